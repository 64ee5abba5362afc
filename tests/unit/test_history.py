"""The LLM history contract (nanobot's get_history), one table row per rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import msgspec
import pytest

from sessionledger import projections
from sessionledger.eventlog import (
    Compacted,
    Consolidated,
    Event,
    Header,
    InvalidEventError,
    MemoryStore,
    MessageAppended,
    MessageList,
    SessionState,
    estimate_tokens,
    fold,
)

TS = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
Msg = dict[str, Any]


def build(
    messages: list[Msg],
    *,
    tokens: list[int] | None = None,
    consolidated: int | None = None,
    compacted: tuple[str, int] | None = None,
) -> SessionState:
    """A folded state holding ``messages`` (stored tokens given or estimated) and cursors."""
    events: list[Event] = []
    for i, message in enumerate(messages):
        count = tokens[i] if tokens is not None else estimate_tokens(message)
        events.append(
            MessageAppended.of(seq=i + 1, ts=TS, id=f"m{i}", message=message, tokens=count)
        )
    seq = len(events)
    if compacted is not None:
        seq += 1
        summary, upto = compacted
        events.append(Compacted(seq=seq, ts=TS, id="c", summary=summary, upto=upto))
    if consolidated is not None:
        seq += 1
        events.append(Consolidated(seq=seq, ts=TS, id="k", upto=consolidated))
    header = Header(seq=0, ts=TS, id="s", key="t:1", created_at=TS)
    return fold(header, events)


def u(text: str, **extra: Any) -> Msg:
    return {"role": "user", "content": text, **extra}


def a(text: Any, **extra: Any) -> Msg:
    return {"role": "assistant", "content": text, **extra}


def call(text: str | None, *ids: str) -> Msg:
    return a(text, tool_calls=[{"id": i, "type": "function", "function": {}} for i in ids])


def t(call_id: str | None, text: str = "result") -> Msg:
    message: Msg = {"role": "tool", "content": text, "name": "web_search"}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def contents(out: list[Msg]) -> list[Any]:
    return [m["content"] for m in out]


@dataclass
class Case:
    rule: str
    messages: list[Msg]
    expected: list[Any]  # the contents of the history
    kwargs: dict[str, Any] = field(default_factory=dict)
    tokens: list[int] | None = None
    consolidated: int | None = None
    compacted: tuple[str, int] | None = None


CASES = [
    Case(
        "starts after last_consolidated",
        [u("u0"), a("a0"), u("u1"), a("a1")],
        ["u1", "a1"],
        consolidated=2,
    ),
    Case(
        "starts after the latest compaction when it covers more",
        [u("u0"), a("a0"), u("u1"), a("a1"), u("u2")],
        ["u2"],
        consolidated=2,
        compacted=("sum", 4),
    ),
    Case(
        "a bad cursor past the live messages is clamped by the fold to 0",
        [u("u0"), a("a0")],
        ["u0", "a0"],
        consolidated=9,
    ),
    Case(
        "window of the newest max_messages",
        [u("u0"), a("a0"), u("u1"), a("a1"), u("u2"), a("a2")],
        ["u2", "a2"],
        {"max_messages": 3},
    ),
    Case(
        "max_messages <= 0 means 120",
        [u(f"u{i}") for i in range(130)],
        [f"u{i}" for i in range(10, 130)],
        {"max_messages": 0},
    ),
    Case(
        "aligned to the first user turn in the window",
        [u("u0"), call("c", "x"), t("x"), a("a0"), u("u1"), a("a1")],
        ["u1", "a1"],
        {"max_messages": 4},
    ),
    Case(
        "a _channel_delivery message just before the first user turn is kept",
        [u("u0"), a("a0"), a("push", _channel_delivery=True), u("reply"), a("a1")],
        ["push", "reply", "a1"],
        {"max_messages": 4},
    ),
    Case(
        "a _channel_delivery message that is the window's first message stays (no alignment)",
        [u("u0"), a("push", _channel_delivery=True), u("reply")],
        ["push", "reply"],
        {"max_messages": 2},
    ),
    Case(
        "a _channel_delivery message not right before the user turn is cut",
        [a("push", _channel_delivery=True), a("other"), u("reply")],
        ["reply"],
    ),
    Case(
        "a window without a user turn is kept whole",
        [u("u0"), a("a0"), a("a1"), a("a2")],
        ["a1", "a2"],
        {"max_messages": 2},
    ),
    Case(
        "orphan tool results at the front are dropped",
        [call("c", "x"), t("x"), t("y"), a("after")],
        ["after"],
        {"max_messages": 3},
    ),
    Case(
        "a tool result whose call is in the window is legal",
        [call("c", "x"), t("x"), a("done")],
        ["c", "result", "done"],
    ),
    Case(
        "a tool message without an id is never an orphan",
        [t(None, "bare"), a("after")],
        ["bare", "after"],
    ),
    Case(
        "the start is after the last orphan",
        [call("c1", "x"), t("x"), t("z"), call("c2", "y"), t("x"), a("end")],
        ["end"],
    ),
    Case(
        "_command messages are skipped",
        [u("/new", _command=True), u("u1"), a("a1", _command=True), a("a2")],
        ["u1", "a2"],
    ),
    Case(
        "assistant replay text is sanitised",
        [
            u("u"),
            a(
                "[Message Time: 2026-11-25T10:00]\nhello\n[image: /tmp/a.png]\n"
                "  message(to='x')  \ngenerate_image(prompt)\n[image: https://x/y.png]"
            ),
        ],
        ["u", "hello\n[image: https://x/y.png]"],
    ),
    Case(
        "only the first time prefix is removed",
        [u("u"), a("[Message Time: 1]\n[Message Time: 2]\nok")],
        ["u", "[Message Time: 2]\nok"],
    ),
    Case(
        "user text is not sanitised",
        [u("[Message Time: 1]\nmessage(x)")],
        ["[Message Time: 1]\nmessage(x)"],
    ),
    Case(
        "user media become one breadcrumb per path",
        [u("look", media=["/a.png", "", 7, "/b.png"])],
        ["look\n[image: /a.png]\n[image: /b.png]"],
    ),
    Case(
        "an image-only user turn becomes its breadcrumbs",
        [u("", media=["/a.png"])],
        ["[image: /a.png]"],
    ),
    Case(
        "media on an assistant message add nothing",
        [u("u"), a("see", media=["/a.png"])],
        ["u", "see"],
    ),
    Case(
        "timestamps prefix only user turns that have one",
        [u("u0", timestamp="T0"), a("a0", timestamp="T1"), u("u1")],
        ["[Message Time: T0]\nu0", "a0", "u1"],
        {"include_timestamps": True},
    ),
    Case(
        "timestamps come before media breadcrumbs",
        [u("look", media=["/a.png"], timestamp="T0")],
        ["[Message Time: T0]\nlook\n[image: /a.png]"],
        {"include_timestamps": True},
    ),
    Case(
        "without include_timestamps nothing is prefixed",
        [u("u0", timestamp="T0")],
        ["u0"],
    ),
    Case(
        "an assistant message left empty by sanitising is dropped",
        [u("u"), a("message(x)"), a("  "), a("ok")],
        ["u", "ok"],
    ),
    Case(
        "an empty assistant message with tool calls or reasoning is kept",
        [
            u("u"),
            call("", "x"),
            t("x"),
            a("", reasoning_content="why"),
            a("", thinking_blocks=[]),
        ],
        ["u", "", "result", "", ""],
    ),
    Case(
        "an assistant message with non-string content is kept as is",
        [u("u"), a(None, tool_calls=[{"id": "q"}]), a([{"type": "text", "text": "p"}])],
        ["u", None, [{"type": "text", "text": "p"}]],
    ),
    Case(
        "missing content becomes an empty string",
        [{"role": "user"}],
        [""],
    ),
    Case(
        "token slicing keeps the newest messages that fit",
        [u("u0"), a("a0"), u("u1"), a("a1"), u("u2"), a("a2")],
        ["u1", "a1", "u2", "a2"],
        {"max_tokens": 40},
        tokens=[10] * 6,
    ),
    Case(
        "token slicing always keeps the last message",
        [u("u0"), u("big")],
        ["big"],
        {"max_tokens": 5},
        tokens=[1, 100],
    ),
    Case(
        "token slicing realigns to a user turn",
        [u("u0"), a("a0"), u("u1"), a("a1"), a("a2")],
        ["u1", "a1", "a2"],
        {"max_tokens": 40},
        tokens=[10] * 5,
    ),
    Case(
        "with no user turn left the nearest one is recovered past the budget",
        [u("u0"), a("a0"), u("u1"), a("a1"), a("a2"), a("a3")],
        ["u1", "a1", "a2", "a3"],
        {"max_tokens": 25},
        tokens=[10] * 6,
    ),
    Case(
        "recovery skips entries the history dropped",
        [u("u0"), u("u1", _command=True), a("message(x)"), a("a1"), a("a2")],
        ["u0", "a1", "a2"],
        {"max_tokens": 15},
        tokens=[10] * 5,
    ),
    Case(
        "with no user turn anywhere the fitting tail stays",
        [a("a0"), a("a1"), a("a2")],
        ["a1", "a2"],
        {"max_tokens": 20},
        tokens=[10] * 3,
    ),
    Case(
        "token slicing never starts on an orphan",
        [u("u0"), call("c", "x"), u("u1"), t("x"), a("end")],
        ["end"],
        {"max_tokens": 30},
        tokens=[10, 50, 10, 10, 10],
    ),
    Case(
        "stored token counts are used, not recounted",
        [u("u0"), a("a0"), u("u1"), a("a1")],
        ["u1", "a1"],
        {"max_tokens": 1000},
        tokens=[10, 990, 5, 5],
    ),
    Case(
        "max_tokens is applied after the count window",
        [u("u0"), a("a0"), u("u1"), a("a1")],
        ["u1", "a1"],
        {"max_messages": 2, "max_tokens": 1000},
        tokens=[10] * 4,
    ),
    Case(
        "the summary comes first when asked for",
        [u("u0"), a("a0"), u("u1")],
        [projections.SUMMARY_PREFIX + "they met", "u1"],
        {"include_summary": True},
        compacted=("they met", 2),
    ),
    Case(
        "no summary without a compaction",
        [u("u0")],
        ["u0"],
        {"include_summary": True},
    ),
    Case(
        "the summary is left out unless asked for",
        [u("u0"), a("a0"), u("u1")],
        ["u1"],
        compacted=("they met", 2),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_history_rule(case: Case) -> None:
    state = build(
        case.messages,
        tokens=case.tokens,
        consolidated=case.consolidated,
        compacted=case.compacted,
    )
    assert contents(projections.history(state, **case.kwargs)) == case.expected


def test_only_the_llm_keys_are_kept() -> None:
    message = {
        "role": "assistant",
        "content": "x",
        "tool_calls": [{"id": "c"}],
        "tool_call_id": "c0",
        "name": "n",
        "reasoning_content": "r",
        "thinking_blocks": [{"t": 1}],
        "timestamp": "T",
        "media": ["/a"],
        "_channel_delivery": False,
        "usage": {"in": 1},
    }
    out = projections.history(build([u("u"), message]))
    assert out[1] == {
        k: v
        for k, v in message.items()
        if k not in {"timestamp", "media", "_channel_delivery", "usage"}
    }
    assert list(out[0]) == ["role", "content"]


def test_history_does_not_mutate_the_state() -> None:
    message = u("look", media=["/a.png"], timestamp="T")
    state = build([message, a("[Message Time: x]\nhi")])
    out = projections.history(state, include_timestamps=True)
    out[0]["content"] = "changed"
    assert state.messages[0].message == u("look", media=["/a.png"], timestamp="T")
    assert state.messages[1].message["content"] == "[Message Time: x]\nhi"


def test_summary_counts_against_the_budget() -> None:
    state = build([u("u0"), a("a0"), u("u1"), a("a1")], tokens=[10] * 4, compacted=("s" * 400, 0))
    entry, summary_tokens = projections.history_with_tokens(state, include_summary=True)[0]
    assert entry["role"] == projections.SUMMARY_ROLE
    assert summary_tokens == estimate_tokens(entry) > 100
    budget = summary_tokens + 25
    with_tokens = projections.history_with_tokens(state, max_tokens=budget, include_summary=True)
    assert [e["content"] for e, _ in with_tokens[1:]] == ["u1", "a1"]
    assert sum(c for _, c in with_tokens) <= budget
    # Without the summary the same budget holds the whole window.
    assert len(projections.history(state, max_tokens=budget)) == 4


def test_added_text_is_charged_on_top_of_the_stored_count() -> None:
    state = build([u("hi", media=["/p.png"], timestamp="2026-11-25T10:00:00")], tokens=[7])
    [(entry, charged)] = projections.history_with_tokens(state, include_timestamps=True)
    added = len(entry["content"].encode()) - len(b"hi")
    assert charged == 7 + (added + 3) // 4
    # With the default counter an entry is never charged less than its own estimate.
    real = build([u("hi", media=["/p.png"], timestamp="2026-11-25T10:00:00")])
    [(entry, charged)] = projections.history_with_tokens(real, include_timestamps=True)
    assert charged >= estimate_tokens(entry)


def test_history_from_a_writer() -> None:
    store = MemoryStore()
    with store.session("telegram:42") as s:
        s.append_message("user", "Plan a trip", media=["/tmp/map.png"])
        s.append_message("assistant", None, tool_calls=[{"id": "c1", "type": "function"}])
        s.append_message("tool", "sunny", tool_call_id="c1", name="weather")
        s.append_message("assistant", "[Message Time: now]\nGo in April.")
        s.mark_consolidated(0)
        out = projections.history(s.state, max_tokens=8_000, include_timestamps=True)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "assistant"]
    assert out[0]["content"].startswith("[Message Time: ")
    assert out[0]["content"].endswith("Plan a trip\n[image: /tmp/map.png]")
    assert out[3]["content"] == "Go in April."


class _Untouchable:
    """Stands for a message outside the window: any use of it fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"history touched a message outside its window (.{name})")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_messages": 50},
        {"max_messages": 50, "max_tokens": 10},
        {"max_messages": 50, "max_tokens": 10**6, "include_timestamps": True},
    ],
)
def test_history_touches_only_its_window(kwargs: dict[str, Any]) -> None:
    tail = [u("q"), *[a(f"a{i}") for i in range(60)]]
    state = build(tail, tokens=[20] * len(tail))
    # 10,000 messages before the newest 61 that history must never look at.
    outside = cast(list[MessageAppended], [_Untouchable()] * 10_000)
    state.messages = MessageList([*outside, *state.messages])
    out = projections.history(state, **kwargs)
    assert out and out[-1]["content"] == "a59"
    assert all(m["role"] == "assistant" for m in out)


def _unopened(message: Msg, seq: int, tokens: int) -> MessageAppended:
    """A message event as a reader gets it from a log: its body not decoded yet."""
    body = msgspec.Raw(msgspec.json.encode(message))
    return MessageAppended(seq=seq, ts=TS, id=f"m{seq}", body=body, tokens=tokens)


def test_a_token_budget_opens_only_the_messages_it_reaches() -> None:
    # 100 turns: user, assistant with a tool call, its result, assistant reply (10 tokens each).
    turns: list[Msg] = []
    for n in range(100):
        turns += [u(f"q{n}"), call(None, f"c{n}"), t(f"c{n}", f"r{n}"), a(f"a{n}")]
    events = [_unopened(m, i + 1, 10) for i, m in enumerate(turns)]
    header = Header(seq=0, ts=TS, id="s", key="t:1", created_at=TS)
    state = fold(header, cast(list[Event], events))
    out = projections.history(state, max_messages=400, max_tokens=200)
    assert len(out) == 20 and out[0]["content"] == "q95"
    assert out == projections.history(build(turns, tokens=[10] * 400), 400, 200)
    opened = [i for i, e in enumerate(events) if "message" in e.__dict__]
    # The 20 it returns, the one over the budget, the 16 before it that rule 3 looks at, and
    # the front of the window (aligned to its first user message): not the other 360.
    assert len(opened) <= 20 + 1 + 16 + 1, opened
    assert min(i for i in opened if i > 0) >= 400 - 20 - 1 - 16


def test_context_tokens_and_usage_ratio() -> None:
    state = build([u("u0"), a("a0"), u("u1"), a("a1"), u("u2")], tokens=[10, 20, 30, 40, 50])
    assert projections.context_start(state) == 0
    assert projections.context_tokens(state) == 150
    consolidated = build(
        [u("u0"), a("a0"), u("u1"), a("a1"), u("u2")], tokens=[10, 20, 30, 40, 50], consolidated=1
    )
    assert projections.context_tokens(consolidated) == 140  # the shorter side is the prefix
    compacted = build(
        [u("u0"), a("a0"), u("u1"), a("a1"), u("u2")],
        tokens=[10, 20, 30, 40, 50],
        consolidated=1,
        compacted=("s", 4),
    )
    assert projections.context_start(compacted) == 4
    assert projections.context_tokens(compacted) == 50  # the shorter side is the window
    assert projections.token_usage_ratio(compacted, 200) == 0.25
    assert projections.token_usage_ratio(compacted, 0) == 0.0


def test_wrong_arguments_get_the_librarys_error_naming_them() -> None:
    state = build([u("hi"), a("hello")])
    with pytest.raises(InvalidEventError, match=r"folded session.*not MemoryStore"):
        projections.history(cast(Any, MemoryStore()))
    with pytest.raises(InvalidEventError, match="max_tokens must be an int, not '5'"):
        projections.history(state, max_tokens=cast(Any, "5"))
    with pytest.raises(InvalidEventError, match="max_messages must be an int, not True"):
        projections.history(state, max_messages=cast(Any, True))
    with pytest.raises(InvalidEventError, match="max_tokens"):
        projections.history_with_tokens(state, max_tokens=cast(Any, 2.5))
    assert len(projections.history(state, max_messages=-3)) == 2  # <= 0: the default window


@pytest.mark.parametrize("max_tokens", [0, 8_000])
def test_call_ids_that_are_not_strings_pair_by_their_text(max_tokens: int) -> None:
    store = MemoryStore()
    with store.session("k") as s:
        s.append_message("user", "go")
        s.append_message("assistant", None, tool_calls=[{"id": 7}, {"id": "8"}, {"type": "x"}])
        s.append_message("tool", "a", tool_call_id="7")
        s.append_message("tool", "b", tool_call_id=8)
        s.append_message("user", "again")
        s.append_message("tool", "orphan", tool_call_id=9)
        s.append_message("assistant", "done")
        out = projections.history(s.state, max_tokens=max_tokens)
    # Rule 6: the orphan (no call 9 declared) cuts: the history starts after it.
    assert [m.get("content") for m in out] == ["done"]
    with store.session("k2") as s:
        s.append_message("user", "go")
        s.append_message("assistant", None, tool_calls=[{"id": 7}, {"id": "8"}, {"type": "x"}])
        s.append_message("tool", "a", tool_call_id="7")
        s.append_message("tool", "b", tool_call_id=8)
        out = projections.history(s.state, max_tokens=max_tokens)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool"]

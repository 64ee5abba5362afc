"""Properties of the LLM history over generated sessions, and a check against an eager version.

The eager version is nanobot's get_history shape written out plainly (build every entry of the
window with the reference rule 4 of ``history_reference``, then slice by tokens);
``projections.history`` builds lazily from the tail and must give the same result.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from history_reference import reference_build
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import projections
from sessionledger.eventlog import (
    Compacted,
    Consolidated,
    Event,
    Header,
    MessageAppended,
    SessionState,
    fold,
)

TS = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
IDS = ("c1", "c2", "c3", "c4")

texts = st.sampled_from(
    [
        "",
        "  ",
        "hello",
        "[Message Time: T]\nhi",
        "message(x)",
        "a\n[image: /tmp/a.png]\nb",
        "generate_image(p)",
        "long " * 20,
    ]
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "user", "assistant", "assistant", "tool", "system"]))
    message: dict[str, Any] = {"role": role, "content": draw(texts)}
    if role == "assistant" and draw(st.booleans()):
        ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=2))
        message["tool_calls"] = [{"id": i, "type": "function"} for i in ids]
    if role == "assistant" and draw(st.integers(0, 5)) == 0:
        message["reasoning_content"] = "r"
    if role == "tool":
        call_id = draw(st.sampled_from([*IDS, None]))
        if call_id is not None:
            message["tool_call_id"] = call_id
    if role == "user" and draw(st.integers(0, 3)) == 0:
        message["media"] = draw(st.lists(st.sampled_from(["/a.png", "", "/b.jpg"]), max_size=2))
    if draw(st.integers(0, 2)) == 0:
        message["timestamp"] = "2026-11-25T10:00:00"
    if draw(st.integers(0, 9)) == 0:
        message["_command"] = True
    if draw(st.integers(0, 7)) == 0:
        message["_channel_delivery"] = True
    return message


@st.composite
def states(draw: st.DrawFn) -> SessionState:
    msgs = draw(st.lists(messages(), max_size=40))
    events: list[Event] = [
        MessageAppended.of(seq=i + 1, ts=TS, id=f"m{i}", message=m, tokens=draw(st.integers(4, 60)))
        for i, m in enumerate(msgs)
    ]
    seq = len(events)
    if draw(st.booleans()) and msgs:
        seq += 1
        upto = draw(st.integers(0, len(msgs)))
        events.append(Compacted(seq=seq, ts=TS, id="c", summary="sum", upto=upto))
    if draw(st.booleans()) and msgs:
        seq += 1
        events.append(Consolidated(seq=seq, ts=TS, id="k", upto=draw(st.integers(0, len(msgs)))))
    return fold(Header(seq=0, ts=TS, id="s", key="p:1", created_at=TS), events)


options = st.fixed_dictionaries(
    {
        "max_messages": st.integers(-1, 45),
        "max_tokens": st.sampled_from([0, 0, 1, 10, 50, 150, 400]),
        "include_timestamps": st.booleans(),
    }
)

Entry = tuple[dict[str, Any], int]


def eager(
    state: SessionState, max_messages: int, max_tokens: int, include_timestamps: bool
) -> list[Entry]:
    """get_history's steps in their plain order, over lists."""
    window = state.messages[projections.context_start(state) :]
    window = window[-(max_messages if max_messages > 0 else 120) :]
    for i, event in enumerate(window):
        if event.message.get("role") == "user":
            window = window[i - 1 if i and window[i - 1].message.get("_channel_delivery") else i :]
            break
    window = window[projections.legal_start(e.message for e in window) :]
    out = [b for e in window if (b := reference_build(e, include_timestamps)) is not None]
    if max_tokens > 0 and out:
        kept: list[Entry] = []
        used = 0
        for entry in reversed(out):
            if kept and used + entry[1] > max_tokens:
                break
            kept.append(entry)
            used += entry[1]
        kept.reverse()
        users = [i for i, (e, _) in enumerate(kept) if e.get("role") == "user"]
        if users:
            kept = kept[users[0] :]
        else:
            all_users = [i for i, (e, _) in enumerate(out) if e.get("role") == "user"]
            if all_users:
                kept = out[all_users[-1] :]
        out = kept
    return out[projections.legal_start(e for e, _ in out) :]


def has_orphan(out: list[dict[str, Any]]) -> bool:
    declared: set[str] = set()
    for message in out:
        declared.update(projections.declared_call_ids(message))
        call_id = message.get("tool_call_id")
        if message["role"] == "tool" and call_id and call_id not in declared:
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(states(), options)
def test_lazy_history_equals_the_eager_rules(state: SessionState, kw: dict[str, Any]) -> None:
    assert projections.history_with_tokens(state, **kw) == eager(state, **kw)


@settings(max_examples=300, deadline=None)
@given(states(), options, st.booleans())
def test_no_orphan_tool_result_in_any_output(
    state: SessionState, kw: dict[str, Any], include_summary: bool
) -> None:
    out = projections.history(state, **kw, include_summary=include_summary)
    assert not has_orphan(out)


@settings(max_examples=300, deadline=None)
@given(states(), options)
def test_output_is_a_suffix_of_the_sanitised_window(
    state: SessionState, kw: dict[str, Any]
) -> None:
    whole = projections.history(state, kw["max_messages"], 0, kw["include_timestamps"])
    out = projections.history(state, **kw)
    assert len(out) <= len(whole)
    assert whole[len(whole) - len(out) :] == out
    # The window is what follows the cursor and the compaction, and no more than max_messages.
    limit = kw["max_messages"] if kw["max_messages"] > 0 else 120
    assert len(out) <= min(limit, len(state.messages) - projections.context_start(state))


@settings(max_examples=300, deadline=None)
@given(states(), options)
def test_token_budget_holds_unless_a_user_turn_is_recovered(
    state: SessionState, kw: dict[str, Any]
) -> None:
    out = projections.history_with_tokens(state, **kw)
    budget = kw["max_tokens"]
    if budget <= 0 or sum(c for _, c in out) <= budget:
        return
    # Over budget only when one turn alone does not fit: no user turn after the first entry.
    assert all(e["role"] != "user" for e, _ in out[1:])

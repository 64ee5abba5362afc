"""Differential: the history's rule 4 (``_entries``, which looks each message's keys up once
per distinct key tuple) against the reference rule of ``history_reference``, on messages that
have any mix of the keys the rule looks at, with odd values (wrong types, falsy values, text
with every line break) and in any key order. Entries must be equal key for key, in the same
key order, with the same charged tokens; and so must whole histories (``eager``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from history_reference import reference_build
from hypothesis import given, settings
from hypothesis import strategies as st
from test_history_props import eager, messages
from test_sanitize_props import pieces

from sessionledger import projections
from sessionledger.eventlog import (
    AGENTS_ITEM_KEY,
    WITHHELD,
    Compacted,
    Consolidated,
    Event,
    Header,
    MessageAppended,
    SessionState,
    fold,
)
from sessionledger.projections._history import _entries, _Front

TS = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
IDS = ("c1", "c2", "c3")

texts = st.one_of(
    st.lists(pieces, max_size=8).map("".join),
    st.text(max_size=30),
    st.sampled_from(["", " ", "hello", "  padded \n", "[image: /a.png]", "message(x)"]),
)
parts = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
        st.just({"type": "image_url", "image_url": {"url": "u"}}),
    ),
    max_size=2,
)
apps = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["Git", " Tool ", "", None, 3]),
                "entry_point": st.sampled_from(["main.py", "", " ", None]),
                "transport": st.sampled_from(["stdio", "", None]),
            },
        ),
        st.just("not a dict"),
    ),
    max_size=10,
)
calls = st.lists(
    st.one_of(
        st.fixed_dictionaries({}, optional={"id": st.sampled_from([*IDS, "", None, 4])}),
        st.just("not a dict"),
    ),
    max_size=3,
)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "role": st.sampled_from(["user", "user", "assistant", "assistant", "tool", "system", None, 3]),
    "content": st.one_of(texts, texts, st.none(), st.integers(0, 2), parts),
    "tool_calls": st.one_of(calls, st.none(), st.just("not a list")),
    "tool_call_id": st.sampled_from([*IDS, "", None, 7]),
    "name": st.sampled_from(["search", ""]),
    "reasoning_content": st.sampled_from(["", "r", None]),
    "thinking_blocks": st.sampled_from([[], [{"type": "thinking", "thinking": "t"}], None]),
    "media": st.one_of(
        st.lists(st.sampled_from(["/a.png", "", "~/b.jpg", "é.png", 3, None]), max_size=3),
        st.just("a.png"),
        st.none(),
    ),
    "cli_apps": st.one_of(apps, st.just("x"), st.none()),
    "mcp_presets": st.one_of(apps, st.just({"name": "m"}), st.none()),
    "timestamp": st.sampled_from(["2026-11-25T10:00:00", "", None, 5, "été"]),
    "_command": st.sampled_from([True, False, 0, 1, "", "x"]),
    WITHHELD: st.sampled_from(["erased", "redacted", "", None]),
    AGENTS_ITEM_KEY: st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["function_call", "function_call_output", "reasoning"]),
                "call_id": st.sampled_from([*IDS, ""]),
            }
        ),
        st.just("not a dict"),
        st.none(),
    ),
    "_channel_delivery": st.sampled_from([True, False]),
    "extra": st.just(1),
}


@st.composite
def wild_messages(draw: st.DrawFn, names: list[str] | None = None) -> dict[str, Any]:
    """A message with some of the keys above, in any order, each with any of its values."""
    if names is None:
        names = draw(st.lists(st.sampled_from(sorted(VALUES)), unique=True, max_size=7))
        if "role" not in names and draw(st.integers(0, 5)):
            names.insert(draw(st.integers(0, len(names))), "role")
        if "content" not in names and draw(st.integers(0, 3)):
            names.insert(draw(st.integers(0, len(names))), "content")
    return {name: draw(VALUES[name]) for name in names}


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Messages of a few key tuples (so the per-shape look-up is reused) with varied values."""
    shapes = draw(st.lists(st.lists(st.sampled_from(sorted(VALUES)), unique=True), min_size=1))
    for names in shapes:
        if draw(st.integers(0, 5)):
            names.insert(0, "role")
    return [
        draw(wild_messages(draw(st.sampled_from(shapes)))) for _ in range(draw(st.integers(0, 40)))
    ]


def _event(i: int, message: dict[str, Any], tokens: int) -> MessageAppended:
    return MessageAppended.of(seq=i + 1, ts=TS, id=f"m{i}", message=message, tokens=tokens)


Built = tuple[list[tuple[str, Any]], int] | None


def _ordered(built: tuple[dict[str, Any], int] | None) -> Built:
    """An entry as its items in order (dicts compare equal in any key order; JSON does not)."""
    return None if built is None else (list(built[0].items()), built[1])


@settings(max_examples=1_000, deadline=None)
@given(st.lists(wild_messages(), max_size=12), st.integers(0, 99), st.booleans())
def test_entries_equal_the_reference_message_by_message(
    msgs: list[dict[str, Any]], tokens: int, include_timestamps: bool
) -> None:
    events = [_event(i, m, tokens) for i, m in enumerate(msgs)]
    got = [_ordered(b) for b in _entries(events, include_timestamps)]
    want = [_ordered(reference_build(e, include_timestamps)) for e in events]
    assert got == want


@settings(max_examples=500, deadline=None)
@given(conversations(), st.booleans())
def test_entries_of_messages_that_share_key_tuples_equal_the_reference(
    msgs: list[dict[str, Any]], include_timestamps: bool
) -> None:
    events = [_event(i, m, 10 + i) for i, m in enumerate(msgs)]
    got = [_ordered(b) for b in _entries(events, include_timestamps)]
    want = [_ordered(reference_build(e, include_timestamps)) for e in events]
    assert got == want
    # Decoded from the log's bytes (no dict kept), a message gives the same entry.
    fresh = [
        MessageAppended(seq=e.seq, ts=e.ts, id=e.id, body=e.body, tokens=e.tokens) for e in events
    ]
    assert [_ordered(b) for b in _entries(fresh, include_timestamps)] == want


@st.composite
def wild_states(draw: st.DrawFn) -> SessionState:
    msgs = draw(st.one_of(conversations(), st.lists(wild_messages(), max_size=30)))
    events: list[Event] = [_event(i, m, draw(st.integers(0, 60))) for i, m in enumerate(msgs)]
    seq = len(events)
    if draw(st.booleans()) and msgs:
        seq += 1
        upto = draw(st.integers(0, len(msgs)))
        events.append(Compacted(seq=seq, ts=TS, id="c", summary="sum", upto=upto))
    if draw(st.booleans()) and msgs:
        seq += 1
        events.append(Consolidated(seq=seq, ts=TS, id="k", upto=draw(st.integers(0, len(msgs)))))
    return fold(Header(seq=0, ts=TS, id="s", key="p:1", created_at=TS), events)


@settings(max_examples=500, deadline=None)
@given(
    wild_states(),
    st.fixed_dictionaries(
        {
            "max_messages": st.integers(-1, 35),
            "max_tokens": st.sampled_from([0, 0, 1, 10, 50, 150, 400]),
            "include_timestamps": st.booleans(),
        }
    ),
)
def test_history_of_wild_messages_equals_the_eager_reference(
    state: SessionState, kw: dict[str, Any]
) -> None:
    got = [_ordered(b) for b in projections.history_with_tokens(state, **kw)]
    assert got == [_ordered(b) for b in eager(state, **kw)]


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.lists(wild_messages(), max_size=15), conversations(), st.lists(messages(), max_size=20)
    )
)
def test_the_cut_found_while_building_is_the_legal_start(msgs: list[dict[str, Any]]) -> None:
    front = _Front()
    built = list(_entries([_event(i, m, 5) for i, m in enumerate(msgs)], False, front))
    assert len(built) == len(msgs)
    assert front.start == projections.legal_start(msgs)

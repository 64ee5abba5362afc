"""Fold properties: folding a prefix then the rest equals folding all; invariants always hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import (
    END_REASONS,
    LIFECYCLE_STATES,
    TRIM_REASONS,
    Cleared,
    Compacted,
    Consolidated,
    Event,
    Header,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    Retracted,
    SessionState,
    Trimmed,
    UnknownEvent,
    UsageRecorded,
    apply,
    fold,
)

T0 = datetime(2026, 11, 25, tzinfo=UTC)
HEADER = Header(seq=0, ts=T0, id="s", key="k", created_at=T0, metadata={"_last_summary": "x"})

cursor = st.integers(min_value=-3, max_value=12)
names = st.sampled_from(["title", "_last_summary", "a", "b"])
reasons = st.none() | st.sampled_from(END_REASONS)
z: dict[str, Any] = {"seq": st.just(0), "ts": st.just(T0), "id": st.just("")}

events_strategy = st.one_of(
    st.builds(
        MessageAppended.of,
        **z,
        message=st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"])}),
        tokens=st.integers(min_value=0, max_value=1000),
    ),
    st.builds(
        MetadataChanged,
        **z,
        set=st.dictionaries(names, st.integers(), max_size=2),
        unset=st.lists(names, max_size=2),
    ),
    st.builds(Consolidated, **z, upto=cursor),
    st.builds(Compacted, **z, summary=st.just("s"), upto=cursor),
    st.builds(Trimmed, **z, count=cursor, reason=st.sampled_from(TRIM_REASONS)),
    st.builds(Cleared, **z, reason=reasons, keep=st.lists(cursor, max_size=3)),
    st.builds(Retracted, **z, count=cursor),
    st.builds(LifecycleChanged, **z, state=st.sampled_from(LIFECYCLE_STATES), reason=reasons),
    st.builds(
        UsageRecorded,
        **z,
        model=st.sampled_from([None, "m1", "m2"]),
        prompt_tokens=st.integers(min_value=0, max_value=100),
        completion_tokens=st.integers(min_value=0, max_value=100),
    ),
    st.builds(UnknownEvent, type=st.just("reaction"), **z),
)


def numbered(events: list[Any]) -> list[Event]:
    return [
        msgspec.structs.replace(e, seq=i, ts=T0 + timedelta(seconds=i), id=f"e{i}", h=f"{i:032x}")
        for i, e in enumerate(events, 1)
    ]


def check_invariants(state: SessionState, events: list[Event]) -> None:
    live = len(state.messages)
    assert 0 <= state.last_consolidated <= live
    if state.compaction is not None:
        assert 0 <= state.compaction.upto <= live
    assert state.live_tokens == sum(m.tokens for m in state.messages)
    assert state.live_tokens >= 0
    appended = [e for e in events if isinstance(e, MessageAppended)]
    assert state.total_messages == len(appended)
    assert state.total_tokens == sum(e.tokens for e in appended)
    # Live messages are a subsequence of what was appended, in order.
    seqs = [m.seq for m in state.messages]
    assert seqs == sorted(set(seqs))
    assert set(seqs) <= {e.seq for e in appended}
    assert state.seq == (events[-1].seq if events else 0)
    assert len(state.ids) == len(events)
    if events:
        assert state.head == events[-1].h and state.updated_at == events[-1].ts


@settings(max_examples=300, deadline=None)
@given(events=st.lists(events_strategy, max_size=30), data=st.data())
def test_prefix_then_rest_equals_all(events: list[Any], data: st.DataObject) -> None:
    numbered_events = numbered(events)
    cut = data.draw(st.integers(min_value=0, max_value=len(numbered_events)))
    whole = fold(HEADER, numbered_events)
    part = fold(HEADER, numbered_events[:cut])
    kept = part.copy()
    rest = fold(HEADER, numbered_events[cut:], state=part)
    assert rest is part
    assert rest == whole
    check_invariants(whole, numbered_events)
    # A copy taken at the cut is untouched by folding the rest.
    assert kept == fold(HEADER, numbered_events[:cut])


@settings(max_examples=150, deadline=None)
@given(events=st.lists(events_strategy, max_size=30))
def test_apply_one_at_a_time_equals_fold(events: list[Any]) -> None:
    numbered_events = numbered(events)
    state = fold(HEADER, [])
    for i, event in enumerate(numbered_events):
        assert apply(state, event) is state
        check_invariants(state, numbered_events[: i + 1])
    assert state == fold(HEADER, numbered_events)

"""The fold: every rule in ``eventlog/_fold.py``'s module docstring, one test (or more) each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from sessionledger.eventlog import (
    Cleared,
    Compacted,
    Compaction,
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
    apply,
    fold,
    initial_state,
)
from sessionledger.eventlog.codec import ZERO_HASH

T0 = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


class Log:
    """Builds events with contiguous seqs and increasing timestamps."""

    def __init__(self) -> None:
        self.seq = 0

    def _next(self) -> dict[str, Any]:
        self.seq += 1
        return {"seq": self.seq, "ts": T0 + timedelta(seconds=self.seq), "id": f"e{self.seq}"}

    def msg(self, content: str = "x", tokens: int = 10, role: str = "user") -> MessageAppended:
        return MessageAppended.of(
            **self._next(), message={"role": role, "content": content}, tokens=tokens
        )

    def meta(self, set: dict[str, Any] | None = None, unset: list[str] | None = None) -> Event:
        return MetadataChanged(**self._next(), set=set or {}, unset=unset or [])

    def consolidated(self, upto: int) -> Event:
        return Consolidated(**self._next(), upto=upto)

    def compacted(self, upto: int, summary: str = "summary") -> Event:
        return Compacted(
            **self._next(), summary=summary, upto=upto, tokens_before=100, tokens_after=10
        )

    def trimmed(self, count: int) -> Event:
        return Trimmed(**self._next(), count=count, reason="file_cap")

    def cleared(self) -> Event:
        return Cleared(**self._next())

    def retracted(self, count: int = 1) -> Event:
        return Retracted(**self._next(), count=count)

    def lifecycle(self, state: Any, reason: Any = None) -> Event:
        return LifecycleChanged(**self._next(), state=state, reason=reason)

    def unknown(self) -> Event:
        return UnknownEvent(type="reaction", **self._next(), raw={"emoji": "+1"})


def header(**metadata: Any) -> Header:
    return Header(
        seq=0, ts=T0, id="session-1", key="cli:1", created_at=T0, metadata=metadata, h="a" * 32
    )


def with_messages(n: int, log: Log | None = None) -> tuple[SessionState, Log]:
    log = log or Log()
    state = fold(header(), [log.msg(f"m{i}", tokens=i + 1) for i in range(n)])
    return state, log


def contents(state: SessionState) -> list[str]:
    return [m.message["content"] for m in state.messages]


def test_initial_state_from_header() -> None:
    state = initial_state(header(title="t"))
    assert state.key == "cli:1" and state.id == "session-1"
    assert state.created_at == state.updated_at == T0
    assert state.metadata == {"title": "t"}
    assert state.messages == [] and state.seq == 0 and state.head == "a" * 32
    assert state.lifecycle == "active" and state.end_reason is None
    assert state.compaction is None and state.last_consolidated == 0
    no_hash = Header(seq=0, ts=T0, id="s", key="k", created_at=T0)
    assert initial_state(no_hash).head == ZERO_HASH


def test_initial_state_does_not_share_header_metadata() -> None:
    h = header(title="t")
    state = initial_state(h)
    state.metadata["title"] = "changed"
    assert h.metadata == {"title": "t"}


def test_message_appends_and_counts_tokens() -> None:
    state, _ = with_messages(3)
    assert contents(state) == ["m0", "m1", "m2"]
    assert state.live_tokens == 1 + 2 + 3
    assert state.total_messages == 3 and state.total_tokens == 6
    assert state.message_dicts == [{"role": "user", "content": f"m{i}"} for i in range(3)]


def test_every_event_advances_seq_time_head_and_ids() -> None:
    log = Log()
    state = initial_state(header())
    events = [
        log.msg(),
        log.meta({"a": 1}),
        log.consolidated(1),
        log.compacted(1),
        log.trimmed(1),
        log.cleared(),
        log.msg(),
        log.retracted(),
        log.lifecycle("idle"),
        log.unknown(),
    ]
    for event in events:
        apply(state, event)
        assert state.seq == event.seq, event
        assert state.updated_at == event.ts
        assert state.ids[event.id] == event.seq
    assert len(state.ids) == len(events)


def test_head_follows_event_hash_when_set() -> None:
    log = Log()
    state = initial_state(header())
    apply(state, msgspec.structs.replace(log.msg(), h="b" * 32))
    assert state.head == "b" * 32
    apply(state, log.msg())  # no hash (an event not read from a log): head unchanged
    assert state.head == "b" * 32


def test_apply_is_in_place_and_returns_state() -> None:
    state = initial_state(header())
    assert apply(state, Log().msg()) is state


def test_metadata_sets_then_unsets() -> None:
    log = Log()
    state = fold(header(keep=1, drop=2), [log.meta({"new": "v", "both": 1}, ["drop", "both"])])
    assert state.metadata == {"keep": 1, "new": "v"}
    apply(state, log.meta(unset=["missing"]))  # removing an absent key is fine
    assert state.metadata == {"keep": 1, "new": "v"}


@pytest.mark.parametrize("upto", [0, 2, 5])
def test_consolidated_in_range(upto: int) -> None:
    state, log = with_messages(5)
    apply(state, log.consolidated(upto))
    assert state.last_consolidated == upto


@pytest.mark.parametrize("upto", [-1, 6, 10**9])
def test_consolidated_out_of_range_clamps_to_zero(upto: int) -> None:
    state, log = with_messages(5)
    apply(state, log.consolidated(3))
    apply(state, log.consolidated(upto))
    assert state.last_consolidated == 0
    assert len(state.messages) == 5  # never hides history


def test_compacted_records_the_latest_summary() -> None:
    state, log = with_messages(6)
    apply(state, log.compacted(2, "first"))
    event = log.compacted(4, "second")
    apply(state, event)
    assert state.compaction == Compaction(
        seq=event.seq,
        summary="second",
        upto=4,
        tokens_before=100,
        tokens_after=10,
        removed=0,
        kept=0,
        ts=event.ts,
    )
    assert len(state.messages) == 6  # a compaction drops nothing by itself


@pytest.mark.parametrize("upto", [-3, 7])
def test_compacted_out_of_range_clamps_to_zero(upto: int) -> None:
    state, log = with_messages(6)
    apply(state, log.compacted(upto))
    assert state.compaction is not None and state.compaction.upto == 0


def test_trimmed_drops_oldest_and_shifts_cursors() -> None:
    state, log = with_messages(10)
    apply(state, log.consolidated(6))
    apply(state, log.compacted(5))
    apply(state, log.trimmed(4))
    assert contents(state) == [f"m{i}" for i in range(4, 10)]
    assert state.last_consolidated == 2
    assert state.compaction is not None and state.compaction.upto == 1
    assert state.live_tokens == sum(range(5, 11))
    assert state.total_messages == 10 and state.total_tokens == sum(range(1, 11))


def test_trimmed_never_shifts_below_zero() -> None:
    state, log = with_messages(10)
    apply(state, log.consolidated(2))
    apply(state, log.compacted(1))
    apply(state, log.trimmed(5))
    assert state.last_consolidated == 0
    assert state.compaction is not None and state.compaction.upto == 0


def test_trimmed_more_than_live_drops_all() -> None:
    state, log = with_messages(3)
    apply(state, log.trimmed(10))
    assert state.messages == [] and state.live_tokens == 0


def test_trimmed_zero_or_negative_is_a_no_op_on_messages() -> None:
    state, log = with_messages(3)
    apply(state, log.consolidated(2))
    for count in (0, -2):
        apply(state, log.trimmed(count))
    assert len(state.messages) == 3 and state.last_consolidated == 2


def test_cleared_empties_resets_and_drops_last_summary() -> None:
    log = Log()
    state = fold(header(_last_summary="old", title="t"), [log.msg(), log.msg(), log.msg()])
    apply(state, log.consolidated(2))
    apply(state, log.compacted(2))
    apply(state, log.cleared())
    assert state.messages == []
    assert state.live_tokens == 0
    assert state.last_consolidated == 0
    assert state.compaction is None
    assert state.metadata == {"title": "t"}
    assert state.total_messages == 3  # totals are history, not live


def test_retracted_withdraws_newest_and_clamps_cursors() -> None:
    state, log = with_messages(6)
    apply(state, log.consolidated(5))
    apply(state, log.compacted(6))
    apply(state, log.retracted(2))
    assert contents(state) == ["m0", "m1", "m2", "m3"]
    assert state.last_consolidated == 4
    assert state.compaction is not None and state.compaction.upto == 4
    assert state.live_tokens == 1 + 2 + 3 + 4


def test_retracted_keeps_cursors_inside_the_remaining_messages() -> None:
    state, log = with_messages(6)
    apply(state, log.consolidated(2))
    apply(state, log.compacted(1))
    apply(state, log.retracted(3))
    assert state.last_consolidated == 2
    assert state.compaction is not None and state.compaction.upto == 1


def test_retracted_more_than_live_drops_all() -> None:
    state, log = with_messages(2)
    apply(state, log.consolidated(2))
    apply(state, log.retracted(5))
    assert state.messages == [] and state.last_consolidated == 0 and state.live_tokens == 0


def test_lifecycle_sets_state_and_reason() -> None:
    log = Log()
    state = fold(header(), [log.lifecycle("archived", "archive")])
    assert (state.lifecycle, state.end_reason) == ("archived", "archive")
    apply(state, log.lifecycle("active"))
    assert (state.lifecycle, state.end_reason) == ("active", None)


def test_unknown_event_only_advances() -> None:
    state, log = with_messages(2)
    before = state.copy()
    event = log.unknown()
    apply(state, event)
    assert state.unknown_events == 1
    assert state.messages == before.messages and state.metadata == before.metadata
    assert state.seq == event.seq


def test_copy_is_independent() -> None:
    state, log = with_messages(3)
    apply(state, log.meta({"a": 1}))
    snapshot = state.copy()
    apply(state, log.msg())
    apply(state, log.meta({"a": 2}))
    apply(state, log.trimmed(1))
    assert len(snapshot.messages) == 3 and snapshot.metadata == {"a": 1}
    assert len(snapshot.ids) == 4
    assert snapshot.seq == 4


def test_fold_onto_existing_state_continues() -> None:
    log = Log()
    events = [log.msg(), log.meta({"a": 1}), log.msg(), log.trimmed(1), log.msg()]
    whole = fold(header(), events)
    part = fold(header(), events[:2])
    assert fold(header(), events[2:], state=part) is part
    assert part == whole

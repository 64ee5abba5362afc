"""Compaction policies at, below and across their thresholds; compaction records what was given."""

from __future__ import annotations

import pytest

from sessionledger.eventlog import InvalidEventError, MemoryStore, SessionState, SessionWriter
from sessionledger.projections import CompactionPolicy


def _session(tokens_each: int = 100, n: int = 10) -> tuple[SessionWriter, SessionState]:
    store = MemoryStore(token_counter=lambda m: tokens_each)
    writer = store.session("c")
    for i in range(n):
        writer.append_message("user" if i % 2 == 0 else "assistant", f"m{i}")
    return writer, writer.state


def test_thresholds_at_below_and_above() -> None:
    _, state = _session()  # 1,000 context tokens
    assert CompactionPolicy(budget=1000, hard_ratio=1.0, soft_ratio=0.5).should_compact(state)
    assert not CompactionPolicy(budget=1001, hard_ratio=1.0, soft_ratio=0.5).should_compact(state)
    policy = CompactionPolicy(budget=2000, hard_ratio=0.8, soft_ratio=0.5)
    assert policy.ratio(state) == 0.5
    assert policy.should_refresh_memory(state)  # exactly at the soft threshold
    assert not policy.should_compact(state)


def test_transition_variants_fire_only_on_the_crossing() -> None:
    writer, state = _session()
    policy = CompactionPolicy(budget=1000, hard_ratio=0.9, soft_ratio=0.6)
    assert policy.should_compact(state)
    assert policy.should_compact_on_transition(0.85, state)  # crossed this turn
    assert not policy.should_compact_on_transition(0.95, state)  # was already inside
    assert policy.should_refresh_memory_on_transition(0.5, state)
    assert not policy.should_refresh_memory_on_transition(0.7, state)
    # Consolidating moves the context start, so the ratio drops below both thresholds.
    writer.mark_consolidated(8)
    assert policy.ratio(writer.state) == pytest.approx(0.2)
    assert not policy.should_refresh_memory(writer.state)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": 0},
        {"budget": -5},
        {"budget": 100, "hard_ratio": 1.5},
        {"budget": 100, "soft_ratio": 0},
        {"budget": 100, "hard_ratio": 0.5, "soft_ratio": 0.7},
        {"budget": 100, "hard_ratio": "0.9"},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidEventError):
        CompactionPolicy(**kwargs)  # type: ignore[arg-type]


def test_compact_records_the_summariser_figures() -> None:
    writer, _ = _session()
    result = writer.compact(
        "summary of 1-6", upto=6, tokens_before=1000, tokens_after=150, duration=2.5, model="m"
    )
    assert (result.seq, result.removed_messages, result.preserved_messages) == (11, 6, 4)
    assert (result.tokens_saved, result.duration, result.model) == (850, 2.5, "m")
    done = writer.state.compaction
    assert done is not None
    assert (done.removed, done.kept, done.tokens_saved) == (6, 4, 850)
    assert (done.duration, done.model) == (2.5, "m")
    before = writer.state.seq
    with pytest.raises(InvalidEventError, match="duration"):
        writer.compact("x", upto=1, duration=-1)
    assert writer.state.seq == before

"""Store statistics from the catalog (sessions, messages, tokens, usage ratios)."""

from __future__ import annotations

import pytest

from sessionledger.eventlog import MemoryStore
from sessionledger.projections import StoreStats, list_sessions, stats_of, store_stats


@pytest.fixture
def store() -> MemoryStore:
    store = MemoryStore(token_counter=lambda message: 100)
    for key, state, n in [
        ("a", "active", 3),
        ("b", "idle", 1),
        ("c", "archived", 2),
        ("d", "suspended", 0),
    ]:
        with store.session(key) as w:
            for _ in range(n):
                w.append_message("user", "x")
            if state != "active":
                w.set_lifecycle(state)  # type: ignore[arg-type]
    return store


def test_counts_by_state_and_totals(store: MemoryStore) -> None:
    stats = store_stats(store)
    assert (stats.total_sessions, stats.active_sessions, stats.idle_sessions) == (4, 1, 1)
    assert stats.archived_sessions == 1
    assert stats.by_state == {"active": 1, "archived": 1, "idle": 1, "suspended": 1}
    assert (stats.total_messages, stats.total_tokens) == (6, 600)
    assert stats.usage == {} and stats.budget is None


def test_usage_ratio_against_a_budget(store: MemoryStore) -> None:
    stats = store_stats(store, budget=200)
    assert stats.usage == {"a": 1.5, "b": 0.5, "c": 1.0, "d": 0.0}
    assert stats.over(1.0) == ["a", "c"]
    assert store_stats(store, budget=0).usage == {}


def test_live_counts_follow_trims(store: MemoryStore) -> None:
    with store.session("a") as w:
        w.trim(2, "truncate")
    assert store_stats(store).total_messages == 4


def test_stats_of_rows_is_pure(store: MemoryStore) -> None:
    rows = list_sessions(store)
    assert stats_of(rows, 100) == store_stats(store, 100)
    assert stats_of([]) == StoreStats()
    with pytest.raises(Exception, match="budget"):
        stats_of(rows, "100")  # type: ignore[arg-type]

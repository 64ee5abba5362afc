"""Store-wide statistics from the catalog, pure over rows.

Rules:
- Counts come from the catalog rows: sessions by lifecycle state (``active``, ``idle``,
  ``archived``; ``compacting`` and ``suspended`` are counted in ``by_state`` only), live
  messages and live tokens summed.
- The usage ratio of a session is its live tokens divided by the budget
  (token count over max tokens); with no positive budget there are no ratios.
"""

from __future__ import annotations

from collections import Counter

import msgspec

from sessionledger.eventlog import BaseStore, InvalidEventError, portable

from ._catalog import catalog_rows
from ._catalog_row import SessionInfo


@portable()
class StoreStats(msgspec.Struct, frozen=True, kw_only=True):
    """Totals over every session of a store."""

    total_sessions: int = 0
    active_sessions: int = 0
    idle_sessions: int = 0
    archived_sessions: int = 0
    total_messages: int = 0
    total_tokens: int = 0
    #: Sessions per lifecycle state (every state that occurs).
    by_state: dict[str, int] = {}
    #: The budget the ratios are against (None: no ratios).
    budget: int | None = None
    #: Session key -> live tokens / budget, for every session (empty without a budget).
    usage: dict[str, float] = {}

    def over(self, ratio: float) -> list[str]:
        """Keys of the sessions whose usage ratio is at least ``ratio``, highest first."""
        hits = [(r, k) for k, r in self.usage.items() if r >= ratio]
        return [k for _, k in sorted(hits, key=lambda hit: (-hit[0], hit[1]))]


def stats_of(rows: list[SessionInfo], budget: int | None = None) -> StoreStats:
    """The statistics of catalog ``rows`` (pure)."""
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise InvalidEventError(f"budget must be an int or None, not {budget!r}")
    states = Counter(row.state for row in rows)
    usage: dict[str, float] = {}
    if budget is not None and budget > 0:
        usage = {row.key: row.tokens / budget for row in rows}
    return StoreStats(
        total_sessions=len(rows),
        active_sessions=states.get("active", 0),
        idle_sessions=states.get("idle", 0),
        archived_sessions=states.get("archived", 0),
        total_messages=sum(row.messages for row in rows),
        total_tokens=sum(row.tokens for row in rows),
        by_state=dict(sorted(states.items())),
        budget=budget,
        usage=usage,
    )


def store_stats(store: BaseStore, budget: int | None = None) -> StoreStats:
    """Statistics of every session in ``store``, from its (refreshed) catalog."""
    return stats_of(catalog_rows(store), budget)

"""How much of a token budget a session's context uses (pure).

Invariants:
- The context is what :func:`projections.history` may send: the live messages from
  :func:`context_start` on (after the consolidation cursor and the latest compaction).
- Counts are the stored per-message counts from the log; nothing is recounted.
- The sum is taken over whichever side of the start is shorter (``live_tokens`` minus the
  prefix, or the window itself), so the cost is O(min(start, live - start)), never O(log).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from sessionledger.eventlog import BaseStore, SessionState, UsageTotals, portable


def context_start(state: SessionState) -> int:
    """Index of the first live message history may show: after the cursor and the compaction."""
    start = state.last_consolidated
    if state.compaction is not None and state.compaction.upto > start:
        start = state.compaction.upto
    return min(max(start, 0), len(state.messages))


def context_tokens(state: SessionState) -> int:
    """Stored token count of the live messages from :func:`context_start` on."""
    messages = state.messages
    start = context_start(state)
    if start <= len(messages) - start:
        return state.live_tokens - sum(m.tokens for m in messages[:start])
    return sum(m.tokens for m in messages[start:])


def token_usage_ratio(state: SessionState, budget: int) -> float:
    """Context tokens divided by ``budget`` (0.0 when the budget is not positive)."""
    if budget <= 0:
        return 0.0
    return context_tokens(state) / budget


@portable()
class StoreUsage(msgspec.Struct, kw_only=True):
    """Provider-reported token usage over a whole store, in total, per model and per session."""

    total: UsageTotals = msgspec.field(default_factory=UsageTotals)
    by_model: dict[str, UsageTotals] = {}
    by_session: dict[str, UsageTotals] = {}


def _add(into: UsageTotals, more: UsageTotals) -> None:
    into.calls += more.calls
    into.prompt_tokens += more.prompt_tokens
    into.completion_tokens += more.completion_tokens
    into.cached_tokens += more.cached_tokens
    into.total_tokens += more.total_tokens


def usage_of(states: Iterable[SessionState]) -> StoreUsage:
    """Add up the ``usage`` events of ``states`` (pure)."""
    out = StoreUsage()
    for state in states:
        if not state.usage.calls:
            continue
        out.by_session[state.key] = state.usage
        _add(out.total, state.usage)
        for model, totals in state.usage_by_model.items():
            _add(out.by_model.setdefault(model, UsageTotals()), totals)
    return out


def store_usage(store: BaseStore) -> StoreUsage:
    """Provider-reported usage over every session of ``store`` (opens each session's state).

    Each session's own totals are ``store.state(key).usage``; this reads every session (from
    its snapshot when it has one), so it costs what opening them all costs.
    """
    return usage_of(store.state(key) for key in store.keys())

"""How much of a token budget a session's context uses (pure; seed 004's ``TokenUsageRatio``).

Invariants:
- The context is what :func:`projections.history` may send: the live messages from
  :func:`context_start` on (after the consolidation cursor and the latest compaction).
- Counts are the stored per-message counts from the log; nothing is recounted.
- The sum is taken over whichever side of the start is shorter (``live_tokens`` minus the
  prefix, or the window itself), so the cost is O(min(start, live - start)), never O(log).
"""

from __future__ import annotations

from eventlog import SessionState


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

"""When to compact, and when to refresh memory first (pure).

The usage ratio is the context's stored token count over the budget (see :mod:`._usage`).
- ``should_compact``: the ratio is at or above the hard threshold.
- ``should_refresh_memory``: the ratio is at or above the soft threshold (which is lower), so an
  agent can save what matters before a compaction discards detail.
- The ``*_on_transition`` variants fire only on the turn where the ratio crosses into the window
  (previous ratio below the threshold, current at or above it), not on every turn after.
The library never calls a model: these only say *when*; the caller's summariser does the work
and records it with ``writer.compact(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionledger.eventlog import InvalidEventError, SessionState

from ._usage import token_usage_ratio


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """Thresholds as fractions of ``budget`` tokens: ``soft_ratio`` <= ``hard_ratio``."""

    budget: int
    hard_ratio: float = 0.85
    soft_ratio: float = 0.6

    def __post_init__(self) -> None:
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget <= 0:
            raise InvalidEventError(f"budget must be a positive int, not {self.budget!r}")
        for name in ("hard_ratio", "soft_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise InvalidEventError(f"{name} must be a number in (0, 1], not {value!r}")
        if self.soft_ratio > self.hard_ratio:
            raise InvalidEventError(
                f"soft_ratio {self.soft_ratio} must not exceed hard_ratio {self.hard_ratio}"
            )

    def ratio(self, state: SessionState) -> float:
        """The session's context tokens over the budget."""
        return token_usage_ratio(state, self.budget)

    def should_compact(self, state: SessionState) -> bool:
        """True when usage is at or above the hard threshold."""
        return self.ratio(state) >= self.hard_ratio

    def should_refresh_memory(self, state: SessionState) -> bool:
        """True when usage is at or above the soft threshold."""
        return self.ratio(state) >= self.soft_ratio

    def should_compact_on_transition(self, previous_ratio: float, state: SessionState) -> bool:
        """True only when usage crosses from below the hard threshold into the window."""
        return previous_ratio < self.hard_ratio <= self.ratio(state)

    def should_refresh_memory_on_transition(
        self, previous_ratio: float, state: SessionState
    ) -> bool:
        """True only when usage crosses from below the soft threshold into the window."""
        return previous_ratio < self.soft_ratio <= self.ratio(state)

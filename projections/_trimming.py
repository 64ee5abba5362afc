"""Trimming policies: pure functions of a folded session that say what to append (a plan).

Invariants:
- A policy never writes; it returns a :class:`TrimPlan` computed against ``state.seq``.
  :func:`apply_plan` carries it out with the writer's ordinary events, the first one guarded by
  ``expected_seq=plan.seq``, so a plan made from a stale state raises ``ConflictError`` and
  writes nothing.
- The log only drops a prefix (``trimmed``) or the newest messages (``retracted``), so a plan is:
  ``clear``, or ``drop`` oldest then ``retract`` newest, then ``reappend`` copies of messages
  that must come after the ones kept in place, then optionally set the consolidation cursor.
  Applying a plan to ``state`` leaves exactly ``kept`` as the live messages (tested).
- The consolidation cursor follows the fold (a trim shifts it down, a retract clamps it); a plan
  sets it explicitly only where that would differ from "the kept messages that were below the
  cursor stay below it". A message is never moved from below the cursor to above it, so nothing
  is consolidated or archived twice.
- :func:`file_cap` archives every dropped message that was above the cursor, exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from sessionledger.eventlog import (
    InvalidEventError,
    MessageAppended,
    SessionState,
    SessionWriter,
    TrimReason,
)

from ._orphans import legal_start, orphaned_tool_indices

#: nanobot's ``FILE_MAX_MESSAGES``.
FILE_MAX_MESSAGES = 2000


class TrimPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a trimming policy wants appended; empty when there is nothing to do."""

    reason: TrimReason
    #: The state's seq the plan was computed against.
    seq: int
    clear: bool = False
    #: Oldest live messages to drop (one ``trimmed`` event).
    drop: int = 0
    #: Newest live messages to withdraw after the drop (one ``retracted`` event).
    retract: int = 0
    #: Messages to append again after the drop and retract, in order.
    reappend: tuple[dict[str, Any], ...] = ()
    #: The consolidation cursor to set last, when the fold would not give it.
    consolidated: int | None = None
    #: Dropped messages that were above the consolidation cursor (file cap only).
    archive: tuple[dict[str, Any], ...] = ()
    #: How many live messages remain once the plan is applied.
    kept: int = 0

    @property
    def empty(self) -> bool:
        """True when applying the plan would append nothing."""
        return not (self.clear or self.drop or self.retract or self.reappend) and (
            self.consolidated is None
        )


def _legal_suffix_bounds(
    messages: Sequence[MessageAppended], max_messages: int, extend_to_user: bool = False
) -> tuple[int, int]:
    """nanobot's ``retain_recent_legal_suffix`` as the kept range ``[lo, hi)``."""
    n = len(messages)
    lo, hi = n - max_messages, n
    if extend_to_user:
        back = next((i for i in range(lo, -1, -1) if messages[i].message.get("role") == "user"), lo)
        lo = back
        first_user = next(
            (i for i in range(lo, n) if messages[i].message.get("role") == "user"), None
        )
        if first_user is not None:
            lo = first_user
        # No hard cap: the caller asked for the whole turn back to its user message.
        return lo + legal_start(messages[i].message for i in range(lo, n)), n
    first_user = next((i for i in range(lo, n) if messages[i].message.get("role") == "user"), None)
    if first_user is not None:
        lo = first_user
    else:
        # Assistant/tool-only tail: anchor at the latest user turn and keep a capped window
        # forward from it (this drops the newest messages, as nanobot does).
        latest = next(
            (i for i in range(lo - 1, -1, -1) if messages[i].message.get("role") == "user"), None
        )
        if latest is not None:
            lo, hi = latest, min(n, latest + max_messages)
    lo += legal_start(messages[i].message for i in range(lo, hi))
    if hi - lo > max_messages:  # nanobot's hard-cap guarantee; the bounds above already hold it
        lo = hi - max_messages
        lo += legal_start(messages[i].message for i in range(lo, hi))
    return lo, hi


def _cursor_after(state: SessionState, drop: int, retract: int) -> int:
    """The consolidation cursor the fold leaves after a trim of ``drop`` and retract."""
    left = len(state.messages) - drop - retract
    return min(max(0, state.last_consolidated - drop), left)


def retain_recent_legal_suffix(
    state: SessionState, max_messages: int, *, extend_to_user: bool = False
) -> TrimPlan:
    """Keep at most ``max_messages``, starting on a user turn at a legal tool boundary.

    With ``extend_to_user`` (nanobot's idle compaction) the suffix starts at the user message at
    or before the newest ``max_messages`` (then on a user turn, at a legal tool boundary), and
    may hold more than ``max_messages``: a turn is kept whole rather than cut.

    ``max_messages <= 0`` clears the session (when it holds anything to clear). When the newest
    ``max_messages`` hold no user turn, the window is anchored at the latest user turn and runs
    forward from it, so the newest messages are withdrawn (nanobot's rule). Unlike nanobot, the
    cursor is then not lowered by the withdrawn count: kept messages that were consolidated stay
    consolidated.
    """
    messages = state.messages
    n = len(messages)
    if max_messages <= 0:
        busy = n or state.last_consolidated or state.compaction is not None
        return TrimPlan(
            reason="retain_suffix",
            seq=state.seq,
            clear=bool(busy or "_last_summary" in state.metadata),
        )
    if n <= max_messages:
        return TrimPlan(reason="retain_suffix", seq=state.seq, kept=n)
    lo, hi = _legal_suffix_bounds(messages, max_messages, extend_to_user)
    return TrimPlan(reason="retain_suffix", seq=state.seq, drop=lo, retract=n - hi, kept=hi - lo)


def file_cap(state: SessionState, limit: int = FILE_MAX_MESSAGES) -> TrimPlan:
    """Bound the live messages to ``limit`` (nanobot's ``enforce_file_cap``), archiving drops.

    ``archive`` holds every dropped message that was above the consolidation cursor, oldest
    first; hand it to your archiver before applying the plan (``apply_plan`` does, given
    ``on_archive``). Nothing is dropped when ``limit <= 0`` or the session is within it.
    """
    messages = state.messages
    n = len(messages)
    if limit <= 0 or n <= limit:
        return TrimPlan(reason="file_cap", seq=state.seq, kept=n)
    lo, hi = _legal_suffix_bounds(messages, limit)
    cursor = state.last_consolidated
    archived = [m.message for m in messages[cursor:lo]]
    archived += [m.message for m in messages[max(hi, cursor) : n]]
    return TrimPlan(
        reason="file_cap",
        seq=state.seq,
        drop=lo,
        retract=n - hi,
        archive=tuple(archived),
        kept=hi - lo,
    )


def truncate_to_budget(
    state: SessionState,
    budget: int,
    *,
    threshold: float = 0.8,
    keep_recent: int = 10,
    system_tokens: int = 0,
    headroom: float = 0.75,
) -> TrimPlan:
    """Seed 000's truncation: keep the first user message and the recent tail under a budget.

    Nothing happens until the stored tokens of the live messages plus ``system_tokens`` reach
    ``threshold * budget``. Then the oldest messages after the first one (kept when it is a user
    message) are dropped, one at a time, until the estimate is under ``headroom * budget`` or
    only ``keep_recent`` remain after it; then every tool message whose call id no kept assistant
    message declares (or that has no id) is dropped too.

    The log drops only a prefix, so keeping message 0 and a later suffix is expressed as: drop
    what precedes the first kept message, retract everything after the leading run of kept
    messages, and re-append the rest of the kept messages (new events, same dicts).
    """
    if budget <= 0:
        raise InvalidEventError(
            f"truncate_to_budget of {state.key!r}: budget must be > 0, not {budget}"
        )
    if not 0 < headroom <= threshold:
        raise InvalidEventError(
            f"truncate_to_budget of {state.key!r}: need 0 < headroom <= threshold, "
            f"not headroom={headroom} threshold={threshold}"
        )
    messages = state.messages
    n = len(messages)
    estimated = state.live_tokens + system_tokens
    nothing = TrimPlan(reason="truncate", seq=state.seq, kept=n)
    if estimated < threshold * budget or n <= max(keep_recent, 0) + 1:
        return nothing
    target = int(budget * headroom)
    keep_first = messages[0].message.get("role") == "user"
    begin = 1 if keep_first else 0
    tail = max(begin, n - max(keep_recent, 0))
    end = begin
    for i in range(begin, tail):
        estimated -= messages[i].tokens
        end = i + 1
        if estimated < target:
            break
    if end == begin:
        return nothing
    kept = ([0] if keep_first else []) + list(range(end, n))
    orphans = set(orphaned_tool_indices([messages[i].message for i in kept]))
    kept = [k for j, k in enumerate(kept) if j not in orphans]
    return _plan_for_kept(state, kept)


def _plan_for_kept(state: SessionState, kept: list[int]) -> TrimPlan:
    """The events that leave exactly ``kept`` (ascending live indices) as the live messages."""
    messages = state.messages
    n = len(messages)
    if not kept:
        return TrimPlan(reason="truncate", seq=state.seq, drop=n, kept=0)
    first = kept[0]
    run = 1
    while run < len(kept) and kept[run] == first + run:
        run += 1
    retract = n - (first + run)
    reappend = tuple(messages[k].message for k in kept[run:])
    want = sum(1 for k in kept if k < state.last_consolidated)
    consolidated = want if want != _cursor_after(state, first, retract) else None
    return TrimPlan(
        reason="truncate",
        seq=state.seq,
        drop=first,
        retract=retract,
        reappend=reappend,
        consolidated=consolidated,
        kept=len(kept),
    )


def apply_plan(
    writer: SessionWriter,
    plan: TrimPlan,
    on_archive: Callable[[Sequence[dict[str, Any]]], object] | None = None,
) -> list[int]:
    """Append the plan's events through ``writer``; return their seqs (empty for an empty plan).

    ``on_archive`` gets ``plan.archive`` first (when it is not empty), so a failing archiver
    leaves the log untouched. The first event carries ``expected_seq=plan.seq``.
    """
    if plan.archive and on_archive is not None:
        on_archive(plan.archive)
    seqs: list[int] = []

    def guard() -> int | None:
        return plan.seq if not seqs else None

    if plan.clear:
        seqs.append(writer.clear(expected_seq=guard()))
        return seqs
    if plan.drop:
        seqs.append(writer.trim(plan.drop, plan.reason, expected_seq=guard()))
    if plan.retract:
        seqs.append(writer.retract(plan.retract, expected_seq=guard()))
    for message in plan.reappend:
        seqs.append(writer.append_message_dict(message, expected_seq=guard()))
    if plan.consolidated is not None:
        seqs.append(writer.mark_consolidated(plan.consolidated, expected_seq=guard()))
    return seqs

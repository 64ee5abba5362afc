"""nanobot's ``Session``, as a mutable object whose reads are computed on the event log's state.

Invariants:
- ``Session`` has nanobot's fields, constructor and methods. Callers append to ``messages`` and
  edit ``metadata`` directly; nothing is written until ``SessionManager.save``.
- Every read (``get_history``) and every trimming decision (``retain_recent_legal_suffix``,
  ``enforce_file_cap``) is computed by :mod:`projections` on a :class:`eventlog.SessionState`:
  the saved state with the unsaved changes folded in (:meth:`Session.log_state`). The unsaved
  changes are found by :func:`diff_messages` and folded with :func:`eventlog.apply`, the same
  fold the log uses, so a read before and after ``save`` gives the same answer.
- A ``last_consolidated`` that is not an int in ``0..len(messages)`` is reset to 0 by the
  constructor; at save and read time such a value counts as 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from sessionledger import projections
from sessionledger.eventlog import (
    Cleared,
    Consolidated,
    IdIndex,
    KnownEvent,
    MessageAppended,
    Retracted,
    SessionState,
    SessionWriter,
    Trimmed,
    TrimReason,
    apply,
    estimate_tokens,
)

from . import _compat
from ._diff import TAIL_CHECK, MessageDiff, diff_messages

Message = dict[str, Any]
FILE_MAX_MESSAGES = projections.FILE_MAX_MESSAGES

logger = logging.getLogger("sessionledger.tools.nanobot")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def value_copy(value: Any) -> Any:
    """An independent copy of a JSON value, as it reads back from the log."""
    return _decode(_encode(value))


def valid_cursor(value: object, live: int) -> int:
    """``value`` if it is an int in ``0..live``, else 0 (nanobot's reset of a bad cursor)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= live:
        return 0
    return value


@dataclass(slots=True, eq=False)
class Binding:
    """A session's link to its log: the writer and what was last saved through it."""

    writer: SessionWriter
    #: The caller's message objects as last saved, oldest first (the log's live messages).
    saved: list[Message]
    #: Value copies of the newest saved messages, to find in-place edits of recent dicts.
    tail: list[Message]
    #: The manager that owns the writer.
    owner: object
    #: The store's token counter (what the writer will store for each message).
    counter: Callable[[Mapping[str, Any]], int] = estimate_tokens
    #: Whether the log file was created by this process and its directory not yet synced.
    new_file: bool = False
    #: The nanobot-format view this process keeps for the session (see ``_views``).
    view: Any = None
    #: True when the view's file belongs to another key (a shared nanobot stem).
    view_blocked: bool = False

    @classmethod
    def from_state(
        cls,
        writer: SessionWriter,
        owner: object,
        counter: Callable[[Mapping[str, Any]], int],
        *,
        new_file: bool = False,
    ) -> Binding:
        """Bind to the writer's current state (the saved messages are the state's dicts)."""
        saved = writer.state.message_dicts
        return cls(writer, saved, value_copy(saved[-TAIL_CHECK:]), owner, counter, new_file)


def local_time(ts: datetime) -> datetime:
    """An aware time as the naive local time nanobot keeps (``datetime.now()`` style)."""
    return ts.astimezone().replace(tzinfo=None) if ts.tzinfo is not None else ts


@dataclass
class Session:
    """A conversation session (nanobot's ``Session``), persisted as an event log."""

    key: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    created_at: datetime = field(default_factory=datetime.now)
    updated_at: datetime = field(default_factory=datetime.now)
    metadata: dict[str, Any] = field(default_factory=dict)
    last_consolidated: int = 0
    _log: Binding | None = field(default=None, init=False, repr=False, compare=False)
    _trim_reason: TrimReason = field(default="truncate", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.last_consolidated = valid_cursor(self.last_consolidated, len(self.messages))

    def add_message(self, role: str, content: str, **kwargs: Any) -> None:
        """Add a message to the session (with a local ISO ``timestamp``)."""
        msg = {"role": role, "content": content, "timestamp": datetime.now().isoformat(), **kwargs}
        self.messages.append(msg)
        self.updated_at = datetime.now()

    def get_history(
        self,
        max_messages: int = 120,
        *,
        max_tokens: int = 0,
        include_timestamps: bool = False,
        extend_to_user: bool = False,
    ) -> list[dict[str, Any]]:
        """Return unconsolidated messages for LLM input (``projections.history`` on the log state).

        ``extend_to_user`` (nanobot 0.2.2) starts a window that holds no user message at the
        nearest earlier one, so a subagent's turn is never replayed without its user message.
        """
        count = _compat.estimator() if max_tokens > 0 else None
        out = projections.history(
            self.log_state(),
            max_messages,
            max_tokens=0 if count is not None else max_tokens,
            include_timestamps=include_timestamps,
            extend_to_user=extend_to_user,
        )
        if count is not None and out:
            out = budget_slice(out, max_tokens, count)
        return out

    def clear(self) -> None:
        """Clear all messages and reset the session to its initial state."""
        self.messages = []
        self.last_consolidated = 0
        self.updated_at = datetime.now()
        self.metadata.pop("_last_summary", None)

    def retain_recent_legal_suffix(
        self, max_messages: int, *, extend_to_user: bool = False
    ) -> tuple[list[dict[str, Any]], int]:
        """Keep a legal recent suffix of at most ``max_messages`` (``projections`` plan).

        With ``extend_to_user`` the suffix reaches back to the user message that starts the
        turn, and may then hold more than ``max_messages``. Returns ``(dropped,
        already_consolidated)`` as nanobot 0.2.2 does: the removed messages in their order, and
        how many of them were below the consolidation cursor.
        """
        if max_messages <= 0:
            dropped = list(self.messages)
            below = min(valid_cursor(self.last_consolidated, len(dropped)), len(dropped))
            self.clear()
            return dropped, below
        state = self.log_state()
        if len(state.messages) <= max_messages:
            return [], 0
        plan = projections.retain_recent_legal_suffix(
            state, max_messages, extend_to_user=extend_to_user
        )
        return self._take(state, plan)

    def enforce_file_cap(
        self,
        on_archive: Callable[[list[dict[str, Any]]], object] | None = None,
        limit: int = FILE_MAX_MESSAGES,
    ) -> None:
        """Bound the session by dropping old messages; ``on_archive`` gets each unconsolidated
        dropped message exactly once (``projections.file_cap``)."""
        state = self.log_state()
        plan = projections.file_cap(state, limit)
        if not (plan.clear or plan.drop or plan.retract):
            return
        before = len(self.messages)
        if plan.archive and on_archive is not None:
            on_archive(list(plan.archive))
        self._take(state, plan)
        logger.info(
            "Session file cap hit for %s: dropped %d, raw-archived %d, kept %d",
            self.key,
            before - len(self.messages),
            len(plan.archive),
            len(self.messages),
        )

    def _take(
        self, state: SessionState, plan: projections.TrimPlan
    ) -> tuple[list[dict[str, Any]], int]:
        """Carry a trimming plan out on ``messages`` and the cursor (saved later as events).

        Returns the dropped messages and how many of them were below the cursor.
        """
        after = fold_plan(state, plan)
        messages = self.messages
        n = len(messages)
        cursor = valid_cursor(self.last_consolidated, n)
        if plan.clear:
            dropped, below = list(messages), cursor
            self.messages = []
        else:
            hi = n - plan.retract
            dropped = messages[: plan.drop] + messages[hi:]
            below = min(plan.drop, cursor) + max(0, cursor - hi)
            self.messages = messages[plan.drop : hi] + list(plan.reappend)
        self.last_consolidated = after.last_consolidated
        self.updated_at = datetime.now()
        self._trim_reason = plan.reason
        return dropped, below

    def log_state(self) -> SessionState:
        """The folded state this session has once saved: the log's, plus the unsaved changes.

        Returned as is (not copied) when nothing is unsaved: treat it as read-only.
        """
        binding = self._log
        if binding is not None and not binding.writer.closed:
            base = binding.writer.state
            diff = diff_messages(binding.saved, self.messages, binding.tail)
            counter: Callable[[Mapping[str, Any]], int] = binding.counter
        else:
            now = datetime.now(UTC)
            base = SessionState(key=self.key, id="", created_at=now, updated_at=now)
            diff = MessageDiff(keep=0)
            counter = estimate_tokens
        cursor = valid_cursor(self.last_consolidated, len(self.messages))
        if diff.unchanged(len(self.messages)) and base.last_consolidated == cursor:
            return base
        return fold_pending(base, diff, self.messages, cursor, counter, self._trim_reason)


def budget_slice(
    entries: list[dict[str, Any]], max_tokens: int, count: Callable[[Mapping[str, Any]], int]
) -> list[dict[str, Any]]:
    """The newest entries within ``max_tokens`` by ``count`` (nanobot's estimator), as nanobot
    slices them: at least the last entry, realigned to the first user entry, or back to the
    nearest earlier user entry past the budget when none fits, then at a legal tool start."""
    kept: list[dict[str, Any]] = []
    used = 0
    for entry in reversed(entries):
        tokens = count(entry)
        if kept and used + tokens > max_tokens:
            break
        kept.append(entry)
        used += tokens
    kept.reverse()
    first = next((i for i, e in enumerate(kept) if e.get("role") == "user"), None)
    if first is not None:
        kept = kept[first:]
    else:
        back = next(
            (i for i in range(len(entries) - 1, -1, -1) if entries[i].get("role") == "user"), None
        )
        if back is not None:
            kept = entries[back:]
    return kept[projections.legal_start(kept) :]


def fold_plan(state: SessionState, plan: projections.TrimPlan) -> SessionState:
    """A light copy of ``state`` with a trimming plan's events folded in."""
    now = datetime.now(UTC)
    events: list[KnownEvent] = []
    seq = state.seq
    if plan.clear:
        events.append(Cleared(seq=seq + 1, ts=now, id=""))
    else:
        if plan.drop:
            events.append(Trimmed(seq=seq + 1, ts=now, id="", count=plan.drop, reason=plan.reason))
        if plan.retract:
            events.append(Retracted(seq=seq + 2, ts=now, id="", count=plan.retract))
        events += [
            MessageAppended.of(seq=seq + 3, ts=now, id="", message=m, tokens=0)
            for m in plan.reappend
        ]
        if plan.consolidated is not None:
            events.append(Consolidated(seq=seq + 4, ts=now, id="", upto=plan.consolidated))
    copy = _light_copy(state)
    for event in events:
        apply(copy, event)
    return copy


def _light_copy(state: SessionState) -> SessionState:
    """A copy that folding placeholder events into leaves ``state`` untouched."""
    return msgspec.structs.replace(
        state,
        messages=state.messages.copy(),
        metadata=dict(state.metadata),
        ids=IdIndex(),
        ended=list(state.ended),
    )


def pending_events(
    base: SessionState,
    diff: MessageDiff,
    current: list[Message],
    cursor: int,
    counter: Callable[[Mapping[str, Any]], int],
    reason: TrimReason = "truncate",
) -> list[KnownEvent]:
    """The events a save would append for ``diff`` (ids and times are placeholders)."""
    now = datetime.now(UTC)
    seq = base.seq
    events: list[KnownEvent] = []

    def nxt() -> int:
        nonlocal seq
        seq += 1
        return seq

    if diff.clear:
        events.append(Cleared(seq=nxt(), ts=now, id=""))
    else:
        if diff.trim:
            events.append(Trimmed(seq=nxt(), ts=now, id="", count=diff.trim, reason=reason))
        if diff.retract:
            events.append(Retracted(seq=nxt(), ts=now, id="", count=diff.retract))
    for message in current[diff.keep :]:
        events.append(
            MessageAppended.of(seq=nxt(), ts=now, id="", message=message, tokens=counter(message))
        )
    events.append(Consolidated(seq=nxt(), ts=now, id="", upto=cursor))
    return events


def fold_pending(
    base: SessionState,
    diff: MessageDiff,
    current: list[Message],
    cursor: int,
    counter: Callable[[Mapping[str, Any]], int],
    reason: TrimReason = "truncate",
) -> SessionState:
    """A light copy of ``base`` with the unsaved changes folded in (``base`` is not touched)."""
    state = _light_copy(base)
    for event in pending_events(base, diff, current, cursor, counter, reason):
        apply(state, event)
    return state

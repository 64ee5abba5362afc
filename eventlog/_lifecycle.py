"""Session lifecycle on a store: archive, reset, ``/new``, idle detection, end hooks, retention.

Rules:
- Every lifecycle change is an event in the session's own log (``lifecycle``, or ``cleared`` with
  an end reason); nothing lives in side files, so replay sees all of it.
- A session *ends* on archive (reason ``archive``), reset (``reset``), ``/new`` (``new``),
  deletion (``delete``) and retention cleanup (``timeout``). End hooks run once per ending, after
  its event is durable, with the final state and the reason. A hook that raises is logged and
  the others still run; the event is never undone.
- Retention moves sessions into a trash folder first (restorable for ``trash_ttl``), then
  removes them for good; it never touches a session whose writer lock a live process holds.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import InvalidEventError, SessionNotFoundError
from ._events import LIFECYCLE_STATES
from ._fold import SessionState

if TYPE_CHECKING:
    from ._store_types import LoadedLog
    from ._writer import SessionWriter

logger = logging.getLogger("sessionledger.eventlog.lifecycle")

#: An end hook: called with the session's final state and the end reason.
EndHook = Callable[[SessionState, str], object]


@dataclass(frozen=True, slots=True)
class TrashEntry:
    """A session moved to the trash: restorable until ``deleted_at + ttl``."""

    id: str
    key: str
    deleted_at: datetime
    reason: str
    location: str


@dataclass(slots=True)
class CleanupReport:
    """What :meth:`LifecycleOps.cleanup` did."""

    trashed: list[str] = field(default_factory=list)
    purged: list[TrashEntry] = field(default_factory=list)
    skipped_locked: list[str] = field(default_factory=list)


def _age(value: timedelta | float | int, name: str) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise InvalidEventError(f"{name} must be a timedelta or seconds, not {value!r}")
    age = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if age < timedelta(0):
        raise InvalidEventError(f"{name} must not be negative, not {value!r}")
    return age


def workspace_prefix(path: str | os.PathLike[str]) -> str:
    """The key prefix of a workspace directory: ``ws:`` and 12 hex of its resolved path's sha256."""
    resolved = str(Path(path).expanduser().resolve())
    return "ws:" + hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:12]


def workspace_key(path: str | os.PathLike[str], now: datetime | None = None) -> str:
    """A new session key for a workspace: its prefix and a UTC timestamp."""
    when = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{workspace_prefix(path)}:{when.strftime('%Y%m%dT%H%M%S%f')}"


class LifecycleOps:
    """Lifecycle operations every store offers (mixed into ``BaseStore``)."""

    trash_ttl: timedelta = timedelta(days=7)
    _end_hooks: list[EndHook]

    # Provided by BaseStore and the backends.
    def session(
        self, key: str, *, metadata: Mapping[str, Any] | None = None
    ) -> SessionWriter:  # pragma: no cover
        raise NotImplementedError

    def state(self, key: str) -> SessionState:  # pragma: no cover
        raise NotImplementedError

    def load(
        self, key: str, *, prefix: bool = False, snapshot: bool = True
    ) -> LoadedLog:  # pragma: no cover
        raise NotImplementedError

    def keys(self) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def exists(self, key: str) -> bool:  # pragma: no cover
        raise NotImplementedError

    def writer_lock_held(self, key: str) -> bool:  # pragma: no cover
        raise NotImplementedError

    def _close_writer(self, key: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def _trash(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        """Move a session's files into the trash; return where they went."""
        raise NotImplementedError(f"{type(self).__name__} has no trash")

    def _untrash(self, entry: TrashEntry) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no trash")

    def _purge(self, entry: TrashEntry) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no trash")

    def _trash_entries(self) -> list[TrashEntry]:
        return []

    # -- end hooks ---------------------------------------------------------------------------

    def on_end(self, hook: EndHook) -> EndHook:
        """Register ``hook(final_state, reason)``, called once whenever a session ends."""
        if not callable(hook):
            raise InvalidEventError(f"an end hook must be callable, not {hook!r}")
        self._end_hooks.append(hook)
        return hook

    def remove_end_hook(self, hook: EndHook) -> None:
        """Unregister a hook added with :meth:`on_end`."""
        self._end_hooks.remove(hook)

    def _ended(self, state: SessionState, reason: str) -> None:
        for hook in list(self._end_hooks):
            try:
                hook(state, reason)
            except Exception:
                logger.exception("end hook %r failed for session %r (%s)", hook, state.key, reason)

    # -- operations --------------------------------------------------------------------------

    def archive(self, key: str) -> bool:
        """End ``key`` as archived (it stays listed, filterable by state); False if it already was."""
        writer = self._existing(key)
        if writer.state.lifecycle == "archived":
            return False
        writer.set_lifecycle("archived", "archive")
        self._ended(writer.state.copy(), "archive")
        return True

    def reset(
        self, key: str, *, keep_metadata: Iterable[str] = (), keep_system: bool = True
    ) -> int:
        """Clear ``key``'s messages but its system prompt; drop metadata not named in ``keep_metadata``.

        Returns the seq of the ``cleared`` event.
        """
        writer = self._existing(key)
        kept_keys = set(keep_metadata)
        # Dropped by the clear itself, so the ended conversation keeps its title.
        drop = [name for name in writer.state.metadata if name not in kept_keys]
        keep = (
            [i for i, m in enumerate(writer.state.messages) if m.message.get("role") == "system"]
            if keep_system
            else []
        )
        seq = writer.clear(keep=keep, reason="reset", unset=drop)
        if writer.state.lifecycle != "active":
            writer.set_lifecycle("active")
        self._ended(writer.state.copy(), "reset")
        return seq

    def new_session(self, key: str, *, keep_title: bool = False) -> int:
        """``/new``: end the current conversation (kept in the log) and start a fresh one.

        The ended conversation stays reachable: ``state.ended`` lists it with its title, and time
        travel to its ``end_seq - 1`` shows it whole. The new conversation starts without a title
        (the clear removes metadata ``title``) unless ``keep_title``. Returns the seq where the
        new conversation starts.
        """
        writer = self.session(key)
        final = writer.state.copy()
        seq = writer.clear(reason="new", unset=() if keep_title else ("title",))
        if writer.state.lifecycle != "active":
            writer.set_lifecycle("active")
        self._ended(final, "new")
        return seq

    def resume(
        self, key: str, start_seq: int, *, by: str | None = None, id: str | None = None
    ) -> int:
        """Make the ended conversation of ``key`` that began at ``start_seq`` current again.

        Written as events: the current conversation ends as by ``/new`` (when it has messages or
        a title), a ``resumed`` event names the conversation and ``by``, its title comes back
        (``metadata``), its live messages are appended again as they were when it ended, then its
        consolidation cursor and compaction. Every event's id derives from ``id`` (random when
        None), so retrying with the same ``id`` after a crash finishes the resume without
        repeating a step. Returns the seq of the ``resumed`` event.

        Raises:
            SessionNotFoundError: no session ``key``.
            InvalidEventError: no ended conversation of ``key`` began at ``start_seq``.
        """
        from ._events import ConversationResumed
        from ._writeapi import Draft, new_event_id

        writer = self._existing(key)
        op = id or new_event_id()
        old = self._conversation_at(key, start_seq)
        state = writer.state
        started = f"{op}:resumed" in state.ids
        if not started and (state.messages or state.metadata.get("title") is not None):
            final = state.copy()
            writer.clear(reason="new", unset=("title",), id=f"{op}:end")
            self._ended(final, "new")
        ended = next(e for e in writer.state.ended if e.start_seq == start_seq)
        count = len(old.messages)

        def make(_s: SessionState, seq: int, ts: datetime, eid: str) -> ConversationResumed:
            return ConversationResumed(
                seq=seq,
                ts=ts,
                id=eid,
                start_seq=start_seq,
                end_seq=ended.end_seq,
                messages=count,
                by=by,
            )

        seq = writer._write(Draft(make), None, f"{op}:resumed")
        if ended.title:
            writer.update_metadata(set={"title": ended.title}, id=f"{op}:title")
        for index, message in enumerate(old.messages):
            writer.append_message_dict(message.message, id=f"{op}:m{index}")
        if old.last_consolidated:
            writer.mark_consolidated(old.last_consolidated, id=f"{op}:consolidated")
        if old.compaction is not None:
            c = old.compaction
            writer.compact(
                c.summary,
                upto=c.upto,
                tokens_before=c.tokens_before,
                tokens_after=c.tokens_after,
                removed=c.removed,
                kept=c.kept,
                duration=c.duration,
                model=c.model,
                id=f"{op}:compacted",
            )
        if writer.state.lifecycle != "active":
            writer.set_lifecycle("active", id=f"{op}:active")
        return seq

    def _conversation_at(self, key: str, start_seq: int) -> SessionState:
        """The state of ``key`` as the ended conversation that began at ``start_seq`` ended."""
        from ._fold import apply, initial_state

        if isinstance(start_seq, bool) or not isinstance(start_seq, int):
            raise InvalidEventError(f"start_seq must be an int, not {start_seq!r}")
        ended = [e for e in self.state(key).ended if e.start_seq == start_seq]
        if not ended:
            raise InvalidEventError(
                f"session {key!r} has no ended conversation that began at seq {start_seq}"
            )
        end = ended[0].end_seq
        loaded = self.load(key, snapshot=False)
        state = initial_state(loaded.header)
        for event in loaded.events:
            if event.seq >= end:
                break
            apply(state, event)
        return state

    def mark_idle(self, older_than: timedelta | float, *, now: datetime | None = None) -> list[str]:
        """Set ``idle`` on active sessions with no event for ``older_than``; return their keys."""
        age = _age(older_than, "older_than")
        cutoff = (now or datetime.now(UTC)) - age
        marked = []
        for key in self.keys():
            state = self.state(key)
            if state.lifecycle == "active" and state.updated_at < cutoff:
                if self.writer_lock_held(key):
                    continue
                self.session(key).set_lifecycle("idle")
                marked.append(key)
        return marked

    def latest_session(self, prefix: str) -> str | None:
        """The key starting with ``prefix`` whose last event is newest (None if there is none)."""
        best: tuple[datetime, str] | None = None
        for key in self.keys():
            if not key.startswith(prefix):
                continue
            updated = self.state(key).updated_at
            if best is None or updated > best[0]:
                best = (updated, key)
        return best[1] if best else None

    def cleanup(
        self,
        older_than: timedelta | float,
        *,
        state: str | None = None,
        now: datetime | None = None,
    ) -> CleanupReport:
        """Move sessions idle for longer than ``older_than`` to the trash; purge expired trash.

        ``state`` limits it to sessions in that lifecycle state. Sessions whose writer lock a live
        process holds are skipped and reported.
        """
        age = _age(older_than, "older_than")
        if state is not None and state not in LIFECYCLE_STATES:
            raise InvalidEventError(
                f"state must be one of {', '.join(LIFECYCLE_STATES)}, not {state!r}"
            )
        moment = now or datetime.now(UTC)
        report = CleanupReport(purged=self.purge_trash(now=moment))
        for key in self.keys():
            current = self.state(key)
            if current.updated_at >= moment - age:
                continue
            if state is not None and current.lifecycle != state:
                continue
            if self.writer_lock_held(key):
                report.skipped_locked.append(key)
                continue
            self._close_writer(key)
            entry_id = f"{moment.strftime('%Y%m%dT%H%M%S%f')}-{os.urandom(4).hex()}"
            self._trash(key, entry_id, "timeout", moment)
            report.trashed.append(key)
            self._ended(current, "timeout")
        return report

    def trash(self) -> list[TrashEntry]:
        """Sessions in the trash, oldest first."""
        return sorted(self._trash_entries(), key=lambda e: e.deleted_at)

    def restore(self, entry: TrashEntry | str) -> str:
        """Bring a trashed session back (by entry or id); return its key.

        Raises InvalidEventError if a session with that key exists again.
        """
        found = self._find_trash(entry)
        if self.exists(found.key):
            raise InvalidEventError(
                f"cannot restore {found.key!r}: a session with that key exists again"
            )
        self._untrash(found)
        return found.key

    def purge_trash(self, *, now: datetime | None = None) -> list[TrashEntry]:
        """Remove for good the trash entries older than ``trash_ttl``; return them."""
        cutoff = (now or datetime.now(UTC)) - self.trash_ttl
        purged = []
        for entry in self._trash_entries():
            if entry.deleted_at < cutoff:
                self._purge(entry)
                purged.append(entry)
        return purged

    def _find_trash(self, entry: TrashEntry | str) -> TrashEntry:
        wanted = entry.id if isinstance(entry, TrashEntry) else entry
        for candidate in self._trash_entries():
            if candidate.id == wanted:
                return candidate
        raise SessionNotFoundError(f"trash entry {wanted}")

    def _existing(self, key: str) -> SessionWriter:
        if not self.exists(key):
            raise SessionNotFoundError(key)
        return self.session(key)

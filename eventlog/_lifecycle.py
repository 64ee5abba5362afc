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

A store holds one :class:`Lifecycle`, written once over the store's public API (``session``,
``state``, ``load``, ``keys``, ``exists``, ``writer_lock_held``) and its backend's trash bin
(:class:`~eventlog._backend.TrashBin`); the store's lifecycle methods delegate to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ._backend import TrashBin, TrashEntry
from ._errors import EventLogError, InvalidEventError, LockedError, SessionNotFoundError
from ._events import LIFECYCLE_STATES
from ._fold import SessionState

if TYPE_CHECKING:
    from ._store import BaseStore
    from ._writer import SessionWriter

__all__ = ("CleanupReport", "EndHook", "Lifecycle", "TrashEntry", "workspace_key")

logger = logging.getLogger("sessionledger.eventlog.lifecycle")

#: An end hook: called with the session's final state and the end reason.
EndHook = Callable[[SessionState, str], object]


@dataclass(slots=True)
class CleanupReport:
    """What :meth:`Lifecycle.cleanup` did."""

    trashed: list[str] = field(default_factory=list)
    purged: list[TrashEntry] = field(default_factory=list)
    skipped_locked: list[str] = field(default_factory=list)
    #: Sessions left where they were, and why (a log that does not open, a refused move).
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no session had a problem."""
        return not self.problems


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


class Lifecycle:
    """The lifecycle operations of one store (it holds this object and delegates to it)."""

    def __init__(self, store: BaseStore, trash: TrashBin | None) -> None:
        # The store owns this object: a weak reference back, so no cycle keeps the store alive.
        self._store = cast("BaseStore", weakref.proxy(store))
        self._bin = trash
        self._mutex = threading.RLock()
        #: How long a trashed session stays restorable.
        self.trash_ttl = timedelta(days=7)
        #: Called once per ending, with the final state and the reason.
        self.end_hooks: list[EndHook] = []

    def _trash_bin(self) -> TrashBin:
        if self._bin is None:
            raise InvalidEventError(f"{self._store.__class__.__name__} has no trash")
        return self._bin

    def _trash_lock(self) -> AbstractContextManager[object]:
        """The lock that serialises trash, restore, purge and cleanup (this process only)."""
        return self._mutex if self._bin is None else self._bin.lock()

    def _readable_states(
        self, keys: Iterable[str], skipped: dict[str, str]
    ) -> Iterator[tuple[str, SessionState]]:
        """Each key's state; a session that does not open is noted in ``skipped`` and passed."""
        for key in keys:
            try:
                yield key, self._store.state(key)
            except SessionNotFoundError:
                continue  # removed meanwhile
            except EventLogError as exc:
                skipped[key] = str(exc)
                logger.warning("session %r skipped: %s", key, exc)

    # -- end hooks ---------------------------------------------------------------------------

    def on_end(self, hook: EndHook) -> EndHook:
        """Register ``hook(final_state, reason)``, called once whenever a session ends."""
        if not callable(hook):
            raise InvalidEventError(f"an end hook must be callable, not {hook!r}")
        self.end_hooks.append(hook)
        return hook

    def ended(self, state: SessionState, reason: str) -> None:
        """Run the end hooks for a session that ended (a hook that raises is logged)."""
        for hook in list(self.end_hooks):
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
        self.ended(writer.state.copy(), "archive")
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
        self.ended(writer.state.copy(), "reset")
        return seq

    def new_session(self, key: str, *, keep_title: bool = False) -> int:
        """``/new``: end the current conversation (kept in the log) and start a fresh one.

        The ended conversation stays reachable: ``state.ended`` lists it with its title, and time
        travel to its ``end_seq - 1`` shows it whole. The new conversation starts without a title
        (the clear removes metadata ``title``) unless ``keep_title``. Returns the seq where the
        new conversation starts.
        """
        writer = self._store.session(key)
        final = writer.state.copy()
        seq = writer.clear(reason="new", unset=() if keep_title else ("title",))
        if writer.state.lifecycle != "active":
            writer.set_lifecycle("active")
        self.ended(final, "new")
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
        from ._writeapi import new_event_id

        writer = self._existing(key)
        op = id or new_event_id()
        old = self._conversation_at(key, start_seq)
        # A store that can group appends into one transaction (PostgreSQL) writes the resume at
        # once; elsewhere the event ids make a retry with the same ``id`` finish it.
        group = getattr(self._store, "batch", None)
        scope = group(key) if callable(group) else contextlib.nullcontext(writer)
        with scope as writer:
            seq, final = self._resume_events(writer, old, start_seq, op, by)
        if final is not None:
            self.ended(final, "new")
        return seq

    def _resume_events(
        self, writer: SessionWriter, old: SessionState, start_seq: int, op: str, by: str | None
    ) -> tuple[int, SessionState | None]:
        from ._events import Compacted, ConversationResumed
        from ._writeapi import Draft

        state = writer.state
        final = None
        started = f"{op}:resumed" in state.ids
        if not started and (state.messages or state.metadata.get("title") is not None):
            final = state.copy()
            writer.clear(reason="new", unset=("title",), id=f"{op}:end")
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
        if (c := old.compaction) is not None:

            def again(_s: SessionState, seq: int, ts: datetime, eid: str) -> Compacted:
                return c.recorded(seq=seq, ts=ts, id=eid)

            writer._write(Draft(again), None, f"{op}:compacted")
        if writer.state.lifecycle != "active":
            writer.set_lifecycle("active", id=f"{op}:active")
        return seq, final

    def _conversation_at(self, key: str, start_seq: int) -> SessionState:
        """The state of ``key`` as the ended conversation that began at ``start_seq`` ended."""
        from ._fold import apply, initial_state

        if isinstance(start_seq, bool) or not isinstance(start_seq, int):
            raise InvalidEventError(f"start_seq must be an int, not {start_seq!r}")
        ended = [e for e in self._store.state(key).ended if e.start_seq == start_seq]
        if not ended:
            raise InvalidEventError(
                f"session {key!r} has no ended conversation that began at seq {start_seq}"
            )
        end = ended[0].end_seq
        loaded = self._store.load(key, snapshot=False)
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
        skipped: dict[str, str] = {}
        for key, state in self._readable_states(self._store.keys(), skipped):
            if state.lifecycle == "active" and state.updated_at < cutoff:
                try:
                    if self._store.writer_lock_held(key):
                        continue
                    self._store.session(key).set_lifecycle("idle")
                except EventLogError as exc:
                    logger.warning("session %r not marked idle: %s", key, exc)
                    continue
                marked.append(key)
        return marked

    def latest_session(self, prefix: str) -> str | None:
        """The key starting with ``prefix`` whose last event is newest (None if there is none)."""
        best: tuple[datetime, str] | None = None
        keys = [key for key in self._store.keys() if key.startswith(prefix)]
        for key, state in self._readable_states(keys, {}):
            if best is None or state.updated_at > best[0]:
                best = (state.updated_at, key)
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
        with self._trash_lock():
            report = CleanupReport(purged=self.purge_trash(now=moment))
            for key, current in self._readable_states(self._store.keys(), report.problems):
                if current.updated_at >= moment - age:
                    continue
                if state is not None and current.lifecycle != state:
                    continue
                entry_id = f"{moment.strftime('%Y%m%dT%H%M%S%f')}-{os.urandom(4).hex()}"
                try:
                    if self._store.writer_lock_held(key):
                        report.skipped_locked.append(key)
                        continue
                    self._store._close_writer(key)
                    self._trash_bin().put(key, entry_id, "timeout", moment)
                except LockedError:
                    report.skipped_locked.append(key)
                    continue
                except EventLogError as exc:  # this session stays; the others go on
                    report.problems[key] = str(exc)
                    continue
                report.trashed.append(key)
                self.ended(current, "timeout")
        return report

    def trash(self) -> list[TrashEntry]:
        """Sessions in the trash, oldest first."""
        entries = [] if self._bin is None else self._bin.entries()
        return sorted(entries, key=lambda e: e.deleted_at)

    def restore(self, entry: TrashEntry | str) -> str:
        """Bring a trashed session back (by entry or id); return its key.

        Raises InvalidEventError if a session with that key exists again. A restore a crash
        interrupted is completed (and its key returned).
        """
        wanted = entry.id if isinstance(entry, TrashEntry) else entry
        with self._trash_lock():
            done = self._trash_bin().restored_meanwhile(wanted)
            if done is not None:
                return done
            found = self._find_trash(wanted)
            if self._store.exists(found.key):
                raise InvalidEventError(
                    f"cannot restore {found.key!r}: a session with that key exists again"
                )
            self._trash_bin().take_back(found)
        return found.key

    def purge_trash(self, *, now: datetime | None = None) -> list[TrashEntry]:
        """Remove for good the trash entries older than ``trash_ttl``; return them."""
        cutoff = (now or datetime.now(UTC)) - self.trash_ttl
        purged: list[TrashEntry] = []
        if self._bin is None:
            return purged
        with self._trash_lock():
            for entry in self._bin.entries():
                if entry.deleted_at < cutoff:
                    self._bin.purge(entry)
                    purged.append(entry)
        return purged

    def _find_trash(self, wanted: str) -> TrashEntry:
        for candidate in self._trash_bin().entries():
            if candidate.id == wanted:
                return candidate
        raise SessionNotFoundError(f"trash entry {wanted}")

    def _existing(self, key: str) -> SessionWriter:
        if not self._store.exists(key):
            raise SessionNotFoundError(key)
        return self._store.session(key)

"""nanobot's ``SessionManager`` over a :class:`eventlog.FileStore`: saves append, never rewrite.

Layout: the store lives in ``<workspace>/sessions/.eventlog/`` (one hash-chained JSONL log per
session, named by the collision-free key encoding). nanobot's own files stay where nanobot put
them, ``<workspace>/sessions/*.jsonl``, untouched: they are imported once, on first access, and a
ledger (``.eventlog/.nanobot-imports.jsonl``) records each import and each deletion.

Invariants:
- ``save`` appends only what changed since the last save (:mod:`._nanobot_diff`): new
  messages, a dropped prefix (``trimmed``), withdrawn newest messages (``retracted``), a clear
  (``cleared``), a moved ``last_consolidated`` (``consolidated``), metadata keys set and removed
  (``metadata``). Bad input raises before anything is written.
- ``save(fsync=False)`` leaves the lines in the page cache, like nanobot; ``fsync=True`` makes
  them durable (and a log file created by this process gets its directory synced once).
- A nanobot file is imported at most once (by its file name) and a deleted key is never
  imported again, even if a nanobot file for it is still there.
- Any number of managers (in one process or several) may share a workspace: each save locks a
  log only while it appends, after the other managers' events. :meth:`SessionManager.close`
  (or garbage collection) releases the logs this one holds open.
"""

from __future__ import annotations

import logging
import shutil
import threading
import weakref
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from sessionledger import projections, replay
from sessionledger.eventlog import (
    CorruptLogError,
    EventLogError,
    FileStore,
    InvalidEventError,
    SessionNotFoundError,
    SessionWriter,
)
from sessionledger.eventlog.backend import fsync_dir

from . import _compat
from ._diff import TAIL_CHECK, diff_messages
from ._import import LEDGER_NAME, Ledger, import_file, import_workspace, remove_legacy
from ._keeper import UPDATED_AT_KEY, ViewKeeper, caller_updated_at
from ._session import Binding, Session, local_time, valid_cursor, value_copy

logger = logging.getLogger("sessionledger.tools.nanobot")

STORE_DIRNAME = ".eventlog"
#: How far a caller's ``updated_at`` may be from the log's last event time and not be kept.
UPDATED_AT_SLACK = timedelta(seconds=1)
#: Metadata a fork does not inherit (nanobot 0.2.2's list).
FORK_VOLATILE_METADATA_KEYS = frozenset(
    {
        "goal_state",
        "pending_user_turn",
        "runtime_checkpoint",
        "thread_goal",
        "title",
        "title_user_edited",
    }
)


class SessionManager:
    """Manages conversation sessions (nanobot's API), stored as append-only event logs."""

    def __init__(self, workspace: Path | str, *, views: bool = True) -> None:
        self.workspace = Path(workspace)
        self.sessions_dir = self.workspace / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        #: The event store (``<workspace>/sessions/.eventlog``).
        self.store = FileStore(self.sessions_dir / STORE_DIRNAME, durability="none")
        self._cache: dict[str, Session] = {}
        self._lock = threading.RLock()
        self._imported = False
        self._ledger = Ledger(self.store.root / LEDGER_NAME)
        #: The nanobot-format views (``sessions/<stem>.jsonl``), or None with ``views=False``.
        self.views = ViewKeeper(self.sessions_dir, self.store, self._ledger) if views else None
        self._finalizer = weakref.finalize(self, self.store.close)

    # -- nanobot's API -------------------------------------------------------------------------

    @staticmethod
    def safe_key(key: str) -> str:
        """nanobot's file stem for ``key`` (its web UI names transcript and thread files by it).

        Not collision-free, as in nanobot; the logs are named collision-free on their own.
        """
        return _compat.nanobot_stem(key)

    @property
    def legacy_sessions_dir(self) -> Path:
        """nanobot's global pre-workspace sessions directory (migrated from on first access)."""
        return _compat.legacy_sessions_dir()

    def _repair(self, key: str) -> Session | None:
        """nanobot's salvage hook (its web UI calls it when a file will not parse): the
        session as its log holds it, uncached; None when there is none."""
        if key in self._cache:
            return self._cache[key]
        data = self.read_session_file(key)
        if data is None:
            return None
        return Session(
            key=key,
            messages=data["messages"],
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            metadata=data["metadata"],
        )

    def _get_session_path(self, key: str) -> Path:
        """Where nanobot keeps ``key``'s file: its view here (nanobot's private helper)."""
        return self.sessions_dir / f"{self.safe_key(key)}.jsonl"

    def get_or_create(self, key: str) -> Session:
        """Get a cached or stored session, or a new empty one (not stored until saved)."""
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            self._ensure_imported()
            session = self._load(key)
            if session is None:
                session = Session(key=key)
            self._cache[key] = session
            return session

    def save(self, session: Session, *, fsync: bool = False) -> None:
        """Append what changed since the last save; with ``fsync`` make it durable."""
        with self._lock:
            self._ensure_imported()
            binding = self._binding(session)
            seq_before = binding.writer.seq
            try:
                appended = self._write_changes(session, binding)
            except SessionNotFoundError:
                # Another manager deleted it since it was loaded: like nanobot, save anew.
                binding = self._binding(session)
                seq_before = binding.writer.seq
                appended = self._write_changes(session, binding)
            if self.views is not None:
                self.views.after_save(session, binding, seq_before, appended)
            if fsync:
                binding.writer.flush()
                if binding.new_file:
                    fsync_dir(str(self.store.root))
                    binding.new_file = False
            self._cache[session.key] = session

    def flush_all(self) -> int:
        """Save every cached session with fsync; return how many were flushed."""
        flushed = 0
        with self._lock:
            for key, session in list(self._cache.items()):
                try:
                    self.save(session, fsync=True)
                    flushed += 1
                except Exception:
                    logger.warning("Failed to flush session %s", key, exc_info=True)
        return flushed

    def invalidate(self, key: str) -> None:
        """Drop a session from the cache (and release its log); the next access re-reads it."""
        with self._lock:
            session = self._cache.pop(key, None)
            if session is not None and session._log is not None and session._log.owner is self:
                session._log.writer.close()

    def delete_session(self, key: str) -> bool:
        """Remove a session for good (it is never imported again); True if it existed."""
        with self._lock:
            self._ensure_imported()
            self.invalidate(key)
            try:
                existed = self.store.delete(key)
            except EventLogError as exc:
                logger.warning("Failed to delete session %s: %s", key, exc)
                return False
            self._ledger.record({"event": "deleted", "key": key})
            if self.views is not None:
                existed = self.views.remove(key) or existed
            return remove_legacy(self.safe_key(key)) or existed

    def read_session_file(self, key: str) -> dict[str, Any] | None:
        """Read a session from its log without caching it; None if it does not exist."""
        self._ensure_imported()
        if not self.store.exists(key):
            return None
        try:
            loaded = self.store.load(key, prefix=True)
        except EventLogError as exc:
            logger.warning("Failed to read session %s: %s", key, exc)
            return None
        state = loaded.state
        metadata = dict(state.metadata)
        updated_at = caller_updated_at(metadata, state)
        metadata.pop(UPDATED_AT_KEY, None)
        return {
            "key": state.key,
            "created_at": local_time(state.created_at).isoformat(),
            "updated_at": updated_at,
            "metadata": metadata,
            "messages": state.message_dicts,
        }

    def read_session_metadata(self, key: str) -> dict[str, Any] | None:
        """A session's key, times and metadata, without its messages; None if it does not exist.

        With views, read from the view's first line (no history is read); else from the log.
        """
        self._ensure_imported()
        if self.views is not None:
            found = self.views.metadata(key)
            if found is not None:
                return found
        data = self.read_session_file(key)
        if data is None:
            return None
        del data["messages"]
        return data

    def fork_session_before_user_index(
        self, source_key: str, target_key: str, before_user_index: int
    ) -> Session | None:
        """Copy ``source_key`` up to (not including) its user message number
        ``before_user_index`` (0-based) into a new session ``target_key``, saved with fsync.

        Volatile metadata (title, goal and turn state) is not copied. None when the source or
        that user message does not exist.
        """
        if before_user_index < 0:
            return None
        with self._lock:
            self._ensure_imported()
            source = self._cache.get(source_key) or self._load(source_key)
            if source is None:
                return None
            copied: list[dict[str, Any]] = []
            users = 0
            for message in source.messages:
                if message.get("role") == "user":
                    if users == before_user_index:
                        break
                    users += 1
                copied.append(value_copy(message))
            if users != before_user_index:
                return None
            metadata = {
                k: value_copy(v)
                for k, v in source.metadata.items()
                if k not in FORK_VOLATILE_METADATA_KEYS
            }
            cursor = source.last_consolidated
            if cursor > len(copied):
                metadata.pop("_last_summary", None)
                cursor = 0
            now = datetime.now()
            target = Session(
                key=target_key,
                messages=copied,
                created_at=now,
                updated_at=now,
                metadata=metadata,
                last_consolidated=cursor,
            )
            self.save(target, fsync=True)
            return target

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every stored session (key, created_at, updated_at, title, preview, path), newest first.

        With views, as nanobot lists its files (title without ``<think>``, the preview scan
        limit, the caller's ``updated_at``); a session without a view comes from the catalog.
        """
        self._ensure_imported()
        viewed = self.views.rows() if self.views is not None else {}
        rows = list(viewed.values())
        for row in projections.list_sessions(self.store):
            if row.key in viewed:
                continue
            rows.append(
                {
                    "key": row.key,
                    "created_at": local_time(row.created_at).isoformat(),
                    "updated_at": local_time(row.updated_at).isoformat(),
                    "title": _compat.strip_think(row.title) if isinstance(row.title, str) else "",
                    "preview": row.preview,
                    "path": str(self.store.path_for(row.key)),
                }
            )
        return sorted(rows, key=lambda row: str(row.get("updated_at") or ""), reverse=True)

    # -- beyond nanobot --------------------------------------------------------------------------

    def close(self) -> None:
        """Release every open log (the writer locks); cached sessions are dropped, not saved."""
        with self._lock:
            self._cache.clear()
            self._finalizer()

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------------

    def _load(self, key: str) -> Session | None:
        self._ensure_imported()
        if not self.store.exists(key) and not self._migrate_legacy(key):
            # nanobot loads an empty file as an empty session; there is nothing to import.
            path = self._get_session_path(key)
            empty = path.is_file() and not path.is_symlink() and path.stat().st_size == 0
            return Session(key=key) if empty else None
        try:
            writer = self.store.open(key)
        except CorruptLogError as exc:
            # nanobot skips the lines it cannot read; here they go to quarantine, not away.
            logger.warning("Session %s: %s; repairing (the rest kept in quarantine)", key, exc)
            replay.repair(self.store, key)
            writer = self.store.open(key)
        state = writer.state
        metadata = value_copy(state.metadata)
        updated_at = datetime.fromisoformat(caller_updated_at(metadata, state))
        metadata.pop(UPDATED_AT_KEY, None)
        session = Session(
            key=key,
            messages=list(state.message_dicts),
            created_at=local_time(state.created_at),
            updated_at=updated_at,
            metadata=metadata,
            last_consolidated=state.last_consolidated,
        )
        session._log = Binding.from_state(writer, self, self.store.token_counter)
        return session

    def _binding(self, session: Session) -> Binding:
        binding = session._log
        if (
            binding is not None
            and binding.owner is self
            and not binding.writer.closed
            and binding.writer.key == session.key
        ):
            return binding
        exists = self.store.exists(session.key)
        writer = self.store.session(session.key, metadata=value_copy(session.metadata))
        binding = Binding.from_state(writer, self, self.store.token_counter, new_file=not exists)
        session._log = binding
        return binding

    def _write_changes(self, session: Session, binding: Binding) -> list[dict[str, Any]] | None:
        """Append the events that bring the log to the session's messages, cursor and metadata.

        Returns the appended messages when the save only appended, else None.
        """
        writer = binding.writer
        current = session.messages
        if not isinstance(current, list):
            raise InvalidEventError(
                f"session {session.key!r}: messages must be a list, not {type(current).__name__}"
            )
        diff = diff_messages(binding.saved, current, binding.tail)
        appended = current[diff.keep :]
        state = writer.state
        # Everything is checked and copied before the first write: bad input writes nothing.
        for message in appended:
            _check_message(session.key, message)
        if not isinstance(session.metadata, dict):
            raise InvalidEventError(f"session {session.key!r}: metadata must be a dict")
        before = dict(state.metadata)
        pinned = before.pop(UPDATED_AT_KEY, None)
        if diff.clear:
            before.pop("_last_summary", None)
        removed = [name for name in before if name not in session.metadata]
        try:
            copies: list[dict[str, Any]] = value_copy(appended)
            changed = _metadata_changes(before, session.metadata)
            changed.pop(UPDATED_AT_KEY, None)
            if not isinstance(session.updated_at, datetime):
                raise TypeError(f"updated_at must be a datetime, not {session.updated_at!r}")
        except (TypeError, msgspec.EncodeError, OverflowError) as exc:
            raise InvalidEventError(
                f"session {session.key!r}: not JSON-serialisable: {exc}"
            ) from exc
        try:
            if diff.clear:
                writer.clear()
            else:
                if diff.trim:
                    writer.trim(diff.trim, session._trim_reason)
                if diff.retract:
                    writer.retract(diff.retract)
            for copy in copies:
                writer.append_message_dict(copy)
            cursor = valid_cursor(session.last_consolidated, len(current))
            session.last_consolidated = cursor  # a bad cursor reads back as 0: say so now
            if writer.state.last_consolidated != cursor:
                writer.mark_consolidated(cursor)
            if changed or removed:
                writer.update_metadata(set=changed, unset=removed)
            self._keep_updated_at(session, writer, pinned)
        except BaseException:
            # Whatever was written is in the state: diff against it (by value) next time.
            session._log = Binding.from_state(writer, self, binding.counter)
            raise
        session._trim_reason = "truncate"
        plain = not (diff.clear or diff.trim or diff.retract)
        if plain and diff.keep == len(binding.saved):
            binding.saved += appended  # the kept prefix equals the saved one already
        else:
            binding.saved = list(current)
        if plain and len(copies) < TAIL_CHECK:
            binding.tail = (binding.tail + copies)[-TAIL_CHECK:]
        else:
            binding.tail = value_copy(current[-TAIL_CHECK:])
        return copies if plain else None

    def _keep_updated_at(self, session: Session, writer: SessionWriter, pinned: object) -> None:
        """Keep a caller-set ``updated_at`` that the log's last event time does not give.

        nanobot saves ``session.updated_at`` as it is; the log's own time is its last event's.
        Within :data:`UPDATED_AT_SLACK` of it the log's time stands; otherwise (a backdated
        session, say) the caller's is kept under a hidden metadata key, reported by reloads,
        ``list_sessions`` and ``read_session_*``, and removed once the two agree again.
        """
        wanted = session.updated_at
        logged = local_time(writer.state.updated_at)
        if wanted.tzinfo is not None:
            wanted = local_time(wanted)
        value = None if abs(wanted - logged) <= UPDATED_AT_SLACK else wanted.isoformat()
        if value == pinned:
            return
        if value is None:
            writer.update_metadata(unset=[UPDATED_AT_KEY])
        else:
            writer.update_metadata(set={UPDATED_AT_KEY: value})

    # -- import ------------------------------------------------------------------------------

    @property
    def ledger_path(self) -> Path:
        """The ledger of imported nanobot files and deleted keys."""
        return self._ledger.path

    def _ensure_imported(self) -> None:
        if self._imported:
            return
        with self._lock:
            if not self._imported:
                import_workspace(self.store, self.sessions_dir, self._ledger)
                if self.views is not None:
                    self.views.reconcile()
                self._imported = True

    def _migrate_legacy(self, key: str) -> bool:
        """Move ``key``'s file from nanobot's legacy global directory and import it."""
        source = _compat.legacy_sessions_dir() / f"{self.safe_key(key)}.jsonl"
        target = self._get_session_path(key)
        if not source.is_file() or source.is_symlink() or target.exists():
            return False
        if key in self._ledger.read()[1]:
            return False  # deleted here: never revived
        try:
            shutil.move(str(source), str(target))
        except OSError as exc:
            logger.warning("Failed to migrate session %s: %s", key, exc)
            return False
        logger.info("Migrated session %s from legacy path", key)
        import_file(self.store, target, self._ledger)
        return self.store.exists(key)


def _metadata_changes(before: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``metadata`` whose value is new, as value copies.

    A value that differs from the logged one only in type (a tuple where the log reads back a
    list) is not a change, so it is not written again on every save.
    """
    changed: dict[str, Any] = {}
    for name, value in metadata.items():
        if not isinstance(name, str):
            raise InvalidEventError(f"metadata keys must be str, not {name!r}")
        if name in before and before[name] == value:
            continue
        copy = value_copy(value)
        if name not in before or before[name] != copy:
            changed[name] = copy
    return changed


def _check_message(key: str, message: object) -> None:
    if not isinstance(message, dict):
        raise InvalidEventError(
            f"session {key!r}: a message must be a dict, not {type(message).__name__}"
        )
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidEventError(
            f"session {key!r}: message role must be a non-empty str, not {role!r}"
        )
    for name in message:
        if not isinstance(name, str):
            raise InvalidEventError(f"session {key!r}: message keys must be str, not {name!r}")

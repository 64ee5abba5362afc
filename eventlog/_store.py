"""What every store shares: the writers it holds, and the surface applications call.

A store holds a backend (:class:`~eventlog._backend.Backend`: open a session's bytes under its
lock, read them without it, list, remove, quarantine, the trash and view bytes) and builds the
rest on it once, the same way for every backend, so the stores cannot drift apart: opening a
session from its bytes (``_opening``) and folding in what other writers appended
(``_catchup``) are written once over the backend; the lifecycle (:class:`Lifecycle`), the
snapshots (:class:`SnapshotViews`) and the sealing (:class:`Privacy`) are objects the store
holds, and its methods delegate to them.

Invariants:
- Many writers, one log: a store keeps one :class:`SessionLog` per session it writes, and any
  number of stores (in this process or others) may write the same session; each write locks
  the log for that write only and first folds in what the others appended (``_catchup``).
- Reading never locks: ``load``, ``state``, ``read_bytes``, ``exists``, ``keys``.
- A log whose session was removed (by this store or another) is closed; its writers raise.
- After ``fork``, a child's logs get fresh locks and reload from the log on next use.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Self, cast

from ._backend import Backend, SharedIO, TrashEntry
from ._catchup import catch_up, revalidate, weak_catch_up
from ._codec import Decoded, normalize_key
from ._crypto import Keyring
from ._errors import (
    CorruptLogError,
    InvalidEventError,
    SessionNotFoundError,
    StoreClosedError,
)
from ._events import Event, Header
from ._fold import SessionState, fold_decoded
from ._lifecycle import CleanupReport, EndHook, Lifecycle
from ._names import check_key
from ._opening import check_metadata, decode_checked, new_header, open_checked, prepare
from ._privacy import Privacy, header_of
from ._store_types import CutReport, LoadedLog, OpenReport, RawSession
from ._tokens import TokenCounter, estimate_tokens
from ._views import SnapshotStatus, SnapshotViews
from ._writer import (
    Durability,
    SessionIO,
    SessionLog,
    SessionWriter,
    check_durability,
)
from ._writerbase import LogArgs

_STORES: weakref.WeakSet[BaseStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class BaseStore:
    """A store over a :class:`~eventlog.backend.Backend`: the shared logic of every sync store.

    ``BaseStore(backend)`` is a complete store; :class:`FileStore`, :class:`MemoryStore` and
    :class:`PostgresStore` each give it their backend and add what is theirs.
    """

    #: Events past the last snapshot that make a closing writer write a new one.
    snapshot_every: int = 256
    #: Events a writer holds in memory (past the index it opened from) before it indexes
    #: them and reads them back from the log on demand (0: never; see :class:`SnapshotViews`).
    settle_every: int = 4096

    def __init__(
        self,
        backend: Backend,
        *,
        durability: Durability | str = "batch",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        batch_window: float = 0.0,
    ) -> None:
        self.durability: Durability = check_durability(durability)
        self._hash_key = normalize_key(hash_key)
        self.token_counter: TokenCounter = token_counter or estimate_tokens
        self.batch_window = batch_window
        self._backend = backend
        backend.attach(weak_catch_up(self))
        self._lifecycle = Lifecycle(self, backend.trash())
        self._views = SnapshotViews(self, backend)
        self._privacy = Privacy(self)
        #: The session logs this store writes, by key (each shared by its writer handles).
        self._writers: dict[str, SessionLog] = {}
        self._reports: dict[str, OpenReport] = {}
        self._mutex = threading.RLock()
        self._closed = False
        #: Run once by :meth:`close` (projections' connections: the search index).
        self._close_hooks: list[Callable[[], object]] = []
        _STORES.add(self)

    def _describe(self, key: str) -> str:
        """Where ``key`` lives, for messages."""
        return self._backend.describe(key)

    # -- public API --------------------------------------------------------------------------

    @property
    def hash_key(self) -> bytes:
        """The secret the chain is keyed with (empty: unkeyed)."""
        return self._hash_key

    def session(self, key: str, *, metadata: Mapping[str, Any] | None = None) -> SessionWriter:
        """Return a writer for ``key``, creating the session on first use.

        Each call returns a new writer over the store's one log of the session: threads may
        share one writer or each use its own (``with store.session(key) as w:``); closing one
        leaves the others open. ``metadata`` seeds a new session's header; it is ignored for an
        existing one. Opening cuts a torn last line into quarantine (see :meth:`open_report`)
        and raises :class:`CorruptLogError` for a bad line in the middle. Other stores and
        processes may write the same session at the same time: each append folds in theirs.
        """
        key = check_key(key)
        if metadata:
            check_metadata(metadata)
        return self._session(key, create=True, metadata=metadata)

    def open(self, key: str) -> SessionWriter:
        """A writer for an existing session: :meth:`session` that never creates one.

        Raises :class:`SessionNotFoundError` for a new key. To read a session without writing,
        use :meth:`load` or :meth:`state` (they never lock).
        """
        return self._session(check_key(key), create=False, metadata=None)

    def open_report(self, key: str) -> OpenReport | None:
        """What opening ``key`` found in this process (torn tail, quarantine), if opened."""
        return self._reports.get(key)

    def load(self, key: str, *, prefix: bool = False, snapshot: bool = True) -> LoadedLog:
        """Read and fold a session without locking it, changing nothing.

        A torn tail is reported, not cut. A bad line in the middle raises
        :class:`CorruptLogError` unless ``prefix`` asks for the readable prefix. With a valid
        snapshot (and ``snapshot`` true, ``prefix`` false) only the log after it is read, and
        ``events`` holds only the events after it (see ``snapshot_seq``).
        """
        key = check_key(key)
        restored = self._views.restore(key, None) if snapshot and not prefix else None
        if restored is not None:
            snap, _, decoded, state = restored
        else:
            data = self._backend.read(key)
            if data is None:
                raise SessionNotFoundError(key)
            decoded = self._decode(key, data)
        if decoded.bad is not None and not prefix:
            raise CorruptLogError(self._describe(key), decoded.bad.line, decoded.bad.reason)
        assert decoded.header is not None
        if restored is None:
            state = fold_decoded(decoded.header, decoded)
        return LoadedLog(
            key=key,
            path=self._describe(key),
            header=decoded.header,
            events=decoded.events,
            state=state,
            valid_length=decoded.valid_length,
            torn=decoded.torn,
            bad=decoded.bad,
            snapshot_seq=snap.seq if restored is not None else 0,
        )

    def state(self, key: str) -> SessionState:
        """The current folded state of ``key``, with what every writer has appended (no lock).

        When this store writes the session, that log's live state is caught up and returned.
        """
        key = check_key(key)
        log = self._writers.get(key)
        if log is not None and not log.closed:
            io = log.io
            with log.lock:
                shared = hasattr(io, "observe") and not log.closed
                if shared and catch_up(self, key, cast(SharedIO, io), log.state, locked=False):
                    return log.state
        return self.load(key).state

    def events(self, key: str) -> Iterator[Event]:
        """Iterate over a session's events, oldest first."""
        return iter(self.load(key, snapshot=False).events)

    def read_bytes(self, key: str) -> bytes:
        """Return a session's log bytes exactly as stored."""
        data = self._backend.read(check_key(key))
        if data is None:
            raise SessionNotFoundError(key)
        return data

    def keys(self) -> list[str]:
        """Every session key in the store, sorted."""
        return sorted(self._backend.list_keys())

    def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists."""
        return self._backend.exists(check_key(key))

    def delete(self, key: str) -> bool:
        """Remove a session for good (log, snapshot, catalog row, quarantine); True if it existed.

        This store's writers of the session are closed; other stores' writers raise
        :class:`SessionNotFoundError` on their next append.
        """
        key = check_key(key)
        with self._mutex:
            final = self.state(key) if self._lifecycle.end_hooks and self.exists(key) else None
            sealed = self._sealed_id(key)
            self._close_writer(key)
            removed = self._backend.remove(key)
        if removed:
            self._privacy.forget_keys(sealed)
        if removed and final is not None:
            self._lifecycle.ended(final, "delete")
        return removed

    def _sealed_id(self, key: str) -> str | None:
        if self._privacy.keyring is None:
            return None
        data = self._backend.read(key)
        header = header_of(data) if data else None
        return header.id if header is not None and header.sealing else None

    def _close_writer(self, key: str) -> None:
        with self._mutex:
            log = self._writers.pop(key, None)
            self._reports.pop(key, None)
        if log is not None:
            log.close()

    # -- lifecycle (see :class:`Lifecycle`) ---------------------------------------------------

    @property
    def trash_ttl(self) -> timedelta:
        """How long a trashed session stays restorable (default 7 days)."""
        return self._lifecycle.trash_ttl

    @trash_ttl.setter
    def trash_ttl(self, value: timedelta) -> None:
        self._lifecycle.trash_ttl = value

    def on_end(self, hook: EndHook) -> EndHook:
        """Register ``hook(final_state, reason)``, called once whenever a session ends."""
        return self._lifecycle.on_end(hook)

    def archive(self, key: str) -> bool:
        """End ``key`` as archived (it stays listed, filterable by state); False if it already was."""
        return self._lifecycle.archive(key)

    def reset(
        self, key: str, *, keep_metadata: Iterable[str] = (), keep_system: bool = True
    ) -> int:
        """Clear ``key``'s messages but its system prompt; drop metadata not named in
        ``keep_metadata``. Returns the seq of the ``cleared`` event."""
        return self._lifecycle.reset(key, keep_metadata=keep_metadata, keep_system=keep_system)

    def new_session(self, key: str, *, keep_title: bool = False) -> int:
        """``/new``: end the current conversation (kept in the log) and start a fresh one.

        See :meth:`Lifecycle.new_session`. Returns the seq where the new conversation starts.
        """
        return self._lifecycle.new_session(key, keep_title=keep_title)

    def resume(
        self, key: str, start_seq: int, *, by: str | None = None, id: str | None = None
    ) -> int:
        """Make the ended conversation of ``key`` that began at ``start_seq`` current again.

        See :meth:`Lifecycle.resume`. Returns the seq of the ``resumed`` event.
        """
        return self._lifecycle.resume(key, start_seq, by=by, id=id)

    def mark_idle(self, older_than: timedelta | float, *, now: datetime | None = None) -> list[str]:
        """Set ``idle`` on active sessions with no event for ``older_than``; return their keys."""
        return self._lifecycle.mark_idle(older_than, now=now)

    def latest_session(self, prefix: str) -> str | None:
        """The key starting with ``prefix`` whose last event is newest (None if there is none)."""
        return self._lifecycle.latest_session(prefix)

    def cleanup(
        self,
        older_than: timedelta | float,
        *,
        state: str | None = None,
        now: datetime | None = None,
    ) -> CleanupReport:
        """Move sessions idle for longer than ``older_than`` to the trash; purge expired trash.

        See :meth:`Lifecycle.cleanup`.
        """
        return self._lifecycle.cleanup(older_than, state=state, now=now)

    def trash(self) -> list[TrashEntry]:
        """Sessions in the trash, oldest first."""
        return self._lifecycle.trash()

    def restore(self, entry: TrashEntry | str) -> str:
        """Bring a trashed session back (by entry or id); return its key (see
        :meth:`Lifecycle.restore`)."""
        return self._lifecycle.restore(entry)

    def purge_trash(self, *, now: datetime | None = None) -> list[TrashEntry]:
        """Remove for good the trash entries older than ``trash_ttl``; return them."""
        return self._lifecycle.purge_trash(now=now)

    # -- snapshots and derived views (see :class:`SnapshotViews`) ------------------------------

    def snapshot_status(self, key: str) -> SnapshotStatus:
        """Check ``key``'s snapshot against its log (reads the log from the snapshot on)."""
        return self._views.snapshot_status(check_key(key))

    def write_snapshot(self, key: str, *, rebuild: bool = False) -> SnapshotStatus:
        """Bring ``key``'s snapshot up to the end of its log; with ``rebuild``, from the log alone.

        See :meth:`SnapshotViews.write_snapshot`.
        """
        return self._views.write_snapshot(check_key(key), rebuild=rebuild)

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None: none kept)."""
        return self._backend.snapshot_bytes(check_key(key))

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Store (or with None, remove) the snapshot of ``key``, atomically."""
        self._backend.put_snapshot(check_key(key), data)

    # -- privacy (see :class:`Privacy`) --------------------------------------------------------

    @property
    def encrypted(self) -> bool:
        """Whether this store seals the sessions it creates (it has a key provider)."""
        return self._privacy.keyring is not None

    @property
    def keyring(self) -> Keyring | None:
        """The store's key provider and key store (None: no encryption)."""
        return self._privacy.keyring

    def open_header(self, key: str, header: Header) -> Header:
        """A header read from ``key``'s bytes by hand, its sealed values opened (as ``load``).

        See :meth:`Privacy.open_header`.
        """
        return self._privacy.open_header(key, header)

    def open_events(self, key: str, header: Header, events: list[Event]) -> list[Event]:
        """Events read from ``key``'s bytes by hand, opened as ``load`` opens them.

        See :meth:`Privacy.open_events`.
        """
        return self._privacy.open_events(key, header, events)

    def finish_erasures(self, key: str) -> bool:
        """Destroy keys an interrupted erase or redact left (the log records it); True if any.

        ``replay.recover`` calls it for every session; opening a session for writing does too.
        """
        return self._privacy.finish_erasures(key)

    def erase(self, key: str, *, by: str | None = None, reason: str | None = None) -> int:
        """Erase a session's content: destroy its keys, keep its log (envelopes and chain).

        Returns the seq of the ``erased`` event; see :meth:`Privacy.erase`.
        """
        return self._privacy.erase(key, by=by, reason=reason)

    def redact(
        self, key: str, seq: int, *, by: str | None = None, reason: str | None = None
    ) -> int:
        """Redact one message: destroy its key; its event stays, with its envelope.

        Returns the seq of the ``redacted`` event (0: already redacted); see
        :meth:`Privacy.redact`.
        """
        return self._privacy.redact(key, seq, by=by, reason=reason)

    def rotate_master_key(self, *, retire: bool = True) -> int:
        """Rewrap every session key under a new master key; return how many were rewrapped.

        See :meth:`Privacy.rotate_master_key`.
        """
        return self._privacy.rotate_master_key(retire=retire)

    # -- replay support (recover, repair, import, follow) ------------------------------------

    def writer_lock_held(self, key: str) -> bool:
        """Whether another writer is writing ``key`` at this moment (its lock is held)."""
        return self._backend.probe_lock(check_key(key))

    def cut(
        self, key: str, offset: int, *, reason: str, expect_length: int | None = None
    ) -> CutReport | None:
        """Move the bytes of ``key``'s log after ``offset`` into quarantine and truncate there.

        Runs under the log's lock; writers of the session reload it on their next append.
        ``offset`` must be a line boundary. With ``expect_length``, a log whose length changed
        since the caller read it is left alone and None is returned.
        """
        key = check_key(key)
        with self._mutex:
            raw = self._backend.open_raw(key, False)
            if raw is None:
                raise SessionNotFoundError(key)
            try:
                data = raw.data
                if expect_length is not None and len(data) != expect_length:
                    return None
                if (
                    offset < 0
                    or offset > len(data)
                    or (offset and data[offset - 1 : offset] != b"\n")
                ):
                    raise InvalidEventError(
                        f"offset {offset} is not a line boundary of {raw.io.name}"
                    )
                line = data.count(b"\n", 0, offset) + 1
                if offset == len(data):
                    return CutReport(key, offset, 0, line, None)
                where = self._backend.quarantine(
                    key, data[offset:], reason=reason, line=line, offset=offset
                )
                raw.io.truncate(offset)
                if self.durability != "none":
                    raw.io.sync()
                return CutReport(key, offset, len(data) - offset, line, where)
            finally:
                raw.io.close()

    def import_bytes(
        self, key: str, data: bytes, *, rejected: Sequence[tuple[str, int, int, bytes]] = ()
    ) -> str:
        """Install a whole, valid log for ``key`` built elsewhere; never overwrite other content.

        Returns ``"created"``, ``"unchanged"`` (the same bytes are already there),
        ``"extended"`` (the stored log was a prefix of ``data``; the rest was appended) or
        ``"clash"`` (a different log holds the key; nothing written). ``rejected`` lines
        (reason, line, offset, bytes) go to quarantine when the session is created.
        """
        key = check_key(key)
        decoded = self._decode(key, data)
        problem = decoded.bad or decoded.torn
        if problem is not None:
            raise CorruptLogError(self._describe(key), problem.line, problem.reason)
        with self._mutex:
            if self._closed:
                raise StoreClosedError("the store is closed")
            raw = self._backend.open_raw(key, True)
            assert raw is not None
            created = raw.created
            try:
                existing = raw.data
                if existing == data:
                    return "unchanged"
                if existing and (not existing.endswith(b"\n") or not data.startswith(existing)):
                    return "clash"
                self._backend.write_import(key, raw, data, sync=self.durability != "none")
                if not existing:
                    for reason, line, offset, text in rejected:
                        self._backend.quarantine(key, text, reason=reason, line=line, offset=offset)
                return "extended" if existing else "created"
            except BaseException:
                if created:  # before the lock is let go: a writer that gets it next keeps its log
                    self._backend.discard_import(key, raw)
                raise
            finally:
                raw.io.close()

    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on (for followers)."""
        return self._backend.read_tail(check_key(key), offset)

    def on_close(self, hook: Callable[[], object]) -> Callable[[], object]:
        """Register ``hook()``, called once when the store closes, after its writers (what a
        projection opened for this store, e.g. the search index's connection, closes then)."""
        if not callable(hook):
            raise InvalidEventError(f"a close hook must be callable, not {hook!r}")
        with self._mutex:
            self._close_hooks.append(hook)
        return hook

    def close(self) -> None:
        """Sync and close every open writer (graceful shutdown, like nanobot's ``flush_all``),
        then run the close hooks (see :meth:`on_close`)."""
        with self._mutex:
            logs = list(self._writers.values())
            self._writers.clear()
            self._closed = True
            hooks, self._close_hooks = self._close_hooks, []
        errors: list[BaseException] = []
        for log in logs:
            try:
                log.close()
            except Exception as exc:  # close the others, then report the first
                errors.append(exc)
        for hook in hooks:
            try:
                hook()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _decode(self, key: str, data: bytes) -> Decoded:
        """``key``'s log bytes decoded and opened (see :func:`decode_checked`)."""
        return decode_checked(self, key, data)

    def _session(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> SessionWriter:
        while True:
            log = self._writers.get(key)
            if log is None or log.closed or revalidate(self, key, log):
                break
        with self._mutex:
            if self._closed:
                raise StoreClosedError("the store is closed")
            log = self._writers.get(key)
            if log is not None and log.poisoned:  # reopen from what is really on disk
                log.abandon()
            if log is None or log.closed:
                args, report = self._open_log(key, create=create, metadata=metadata)
                log = SessionLog(**args)
                log.settle = self._views.settler(key)
                writer = SessionWriter(log, on_close=self._forget)
                try:  # an encrypted store's sealer, and erasures a crash left unfinished
                    self._privacy.arm_writer(writer)
                except BaseException:
                    log.close()
                    raise
                self._writers[key] = log
                self._reports[key] = report
            else:
                writer = SessionWriter(log, on_close=self._forget)
            log.handles += 1
        return writer

    def _forget(self, writer: SessionWriter) -> None:
        """A writer closed; with the last one the log closes (next open reads it again)."""
        log = writer.log
        with self._mutex:
            log.handles -= 1
            last = log.handles <= 0 and self._writers.get(log.key) is log
            if last:
                del self._writers[log.key]
        if last:
            log.close()
        self._views.on_close(writer)

    def _forked(self) -> None:
        """In a forked child: fresh locks; every log reloads from the file on next use."""
        self._mutex = threading.RLock()
        for log in self._writers.values():
            log.reset_locks()

    def _gone(self, key: str, io: SessionIO) -> None:
        """``key``'s log was removed by another writer: close the log this store held."""
        with self._mutex:
            log = self._writers.get(key)
            if log is not None and log.io is io:
                del self._writers[key]
                self._reports.pop(key, None)
        if log is not None and log.io is io:
            log.closed = True
        io.close()

    def _open_log(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[LogArgs, OpenReport]:
        """What a new log of ``key`` is made of (sync or async): opened and folded under its
        lock (:meth:`_open_checked`), its descriptor handed to the backend, this store's
        write settings; and what opening found."""
        raw, state, report = self._open_checked(key, create=create, metadata=metadata)
        try:
            self._backend.release(raw.io)
        except BaseException:
            raw.io.close()
            raise
        args = LogArgs(
            key=key,
            io=raw.io,
            state=state,
            durability=self.durability,
            hash_key=self._hash_key,
            token_counter=self.token_counter,
            batch_window=self.batch_window,
        )
        return args, report

    def _open_checked(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[RawSession, SessionState, OpenReport]:
        """``key`` opened under its writer lock, its torn tail cut, folded (the lock still
        held; see :func:`open_checked`)."""
        return open_checked(self, key, create=create, metadata=metadata)

    def _prepare(
        self, key: str, raw: RawSession, metadata: Mapping[str, Any] | None
    ) -> tuple[SessionState, OpenReport]:
        """The folded state of a log opened under its lock (see :func:`prepare`); a backend
        that opens its own way (PostgreSQL) overrides this."""
        return prepare(self, key, raw, metadata)

    def _new_header(self, key: str, metadata: Mapping[str, Any] | None) -> Header:
        """A new session's header event (see :func:`new_header`)."""
        return new_header(key, metadata)

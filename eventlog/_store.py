"""What every store shares: opening a session from its bytes, catching up, the writers.

A backend supplies raw access (open a session's bytes under its lock, read them without it,
list, remove, quarantine); this module turns bytes into checked, folded sessions the same way
for every backend, so the file and memory stores cannot drift apart.

Invariants:
- Many writers, one log: a store keeps one :class:`SessionLog` per session it writes, and any
  number of stores (in this process or others) may write the same session. Each write locks
  the log for that write only and first folds in what the others appended
  (:meth:`BaseStore._catch_up`): lines that follow the chain are folded; an incomplete last line
  found under the lock was left by a dead writer and goes to quarantine, as on open; anything
  else (a log cut back or replaced, a line that does not follow) reloads the session from the
  log, as on open.
- Reading never locks: ``load``, ``state``, ``read_bytes``, ``exists``, ``keys``.
- A log whose session was removed (by this store or another) is closed; its writers raise.
- After ``fork``, a child's logs get fresh locks and reload from the log on next use.
"""

from __future__ import annotations

import abc
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, Self, cast

import msgspec

from ._codec import ZERO_HASH, Decoded, TornTail, decode_log, encode_line, normalize_key
from ._errors import (
    CorruptLogError,
    InvalidEventError,
    NewerFormatError,
    NotALogError,
    SessionNotFoundError,
    StoreClosedError,
)
from ._events import FORMAT_VERSION, Event, Header
from ._fold import SessionState, apply, fold
from ._indexsnap import IndexMeta
from ._lifecycle import LifecycleOps
from ._names import check_key
from ._privacy import PrivacyOps, header_of
from ._snapshot import Snapshot
from ._store_types import CutReport, LoadedLog, OpenReport, RawSession
from ._tokens import TokenCounter, estimate_tokens
from ._values import encode_checked
from ._views import ViewStorage
from ._writer import (
    Durability,
    SessionIO,
    SessionLog,
    SessionWriter,
    check_durability,
    new_event_id,
)

_STORES: weakref.WeakSet[BaseStore] = weakref.WeakSet()
#: The end of every line: its 32 hex digits of hash, the closing quote and brace, a newline.
_HEAD_BYTES = 35


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class SharedIO(SessionIO, Protocol):
    """A log other stores may write too: what :meth:`BaseStore._catch_up` needs of its I/O."""

    stale: bool

    def observe(self) -> int:
        """The log's current length; raise SessionNotFoundError if it was removed."""

    def read_from(self, offset: int) -> bytes:
        """The log's bytes from ``offset`` on."""

    def set_size(self, size: int) -> None:
        """Record the valid length this writer now knows."""

    def pinned(self) -> AbstractContextManager[bool]:
        """Keep the log usable for a read without its lock (False: it is not open now)."""


@dataclass(slots=True)
class _Reopened:
    io: SessionIO
    data: bytes
    created: bool = False


class BaseStore(PrivacyOps, LifecycleOps, ViewStorage, abc.ABC):
    """Shared logic of the sync stores; a backend implements the abstract raw methods."""

    def __init__(
        self,
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
        #: The session logs this store writes, by key (each shared by its writer handles).
        self._writers: dict[str, SessionLog] = {}
        self._reports: dict[str, OpenReport] = {}
        self._mutex = threading.RLock()
        self._closed = False
        self._end_hooks = []
        _STORES.add(self)

    # -- backend hooks -----------------------------------------------------------------------

    @abc.abstractmethod
    def _open_raw(self, key: str, create: bool) -> RawSession | None:
        """Open ``key`` with its lock held (None if absent and not ``create``)."""

    def _open_raw_from(
        self, key: str, create: bool, snap: Snapshot | IndexMeta | None
    ) -> RawSession | None:
        """Like :meth:`_open_raw`; a backend may read the log only from the line ``snap`` was
        taken at (its raw then has ``base``, that line's offset, and ``snapshot``)."""
        return self._open_raw(key, create)

    @abc.abstractmethod
    def _read_raw(self, key: str) -> bytes | None:
        """Read ``key``'s bytes without the lock (None if absent)."""

    @abc.abstractmethod
    def _describe(self, key: str) -> str:
        """Where ``key`` lives, for messages."""

    @abc.abstractmethod
    def _quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        """Keep ``data`` cut from ``key``'s log; return where it went."""

    @abc.abstractmethod
    def _list_keys(self) -> list[str]:
        """Keys of every session."""

    @abc.abstractmethod
    def _remove(self, key: str) -> bool:
        """Remove a session's log and everything beside it (the caller closed its writer)."""

    def _release(self, io: SessionIO) -> None:
        """A log opened by :meth:`_open_raw` becomes a writer's: drop the lock taken to open it."""

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
            _check_metadata(metadata)
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
        restored = self._restore(key, None) if snapshot and not prefix else None
        if restored is not None:
            snap, _, decoded, state = restored
        else:
            data = self._read_raw(key)
            if data is None:
                raise SessionNotFoundError(key)
            decoded = self._decode(key, data)
        if decoded.bad is not None and not prefix:
            raise CorruptLogError(self._describe(key), decoded.bad.line, decoded.bad.reason)
        assert decoded.header is not None
        if restored is None:
            state = fold(decoded.header, decoded.events)
        state.head = decoded.head  # the last line's: a segment header is a link too
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
                if shared and self._catch_up(key, cast(SharedIO, io), log.state, locked=False):
                    return log.state
        return self.load(key).state

    def events(self, key: str) -> Iterator[Event]:
        """Iterate over a session's events, oldest first."""
        return iter(self.load(key, snapshot=False).events)

    def read_bytes(self, key: str) -> bytes:
        """Return a session's log bytes exactly as stored."""
        data = self._read_raw(check_key(key))
        if data is None:
            raise SessionNotFoundError(key)
        return data

    def keys(self) -> list[str]:
        """Every session key in the store, sorted."""
        return sorted(self._list_keys())

    def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists."""
        return self._read_raw(check_key(key)) is not None

    def delete(self, key: str) -> bool:
        """Remove a session for good (log, snapshot, catalog row, quarantine); True if it existed.

        This store's writers of the session are closed; other stores' writers raise
        :class:`SessionNotFoundError` on their next append.
        """
        key = check_key(key)
        with self._mutex:
            final = self.state(key) if self._end_hooks and self.exists(key) else None
            sealed = self._sealed_id(key)
            self._close_writer(key)
            removed = self._remove(key)
        if removed:
            self._forget_keys(sealed)
        if removed and final is not None:
            self._ended(final, "delete")
        return removed

    def _sealed_id(self, key: str) -> str | None:
        if self._keyring is None:
            return None
        data = self._read_raw(key)
        header = header_of(data) if data else None
        return header.id if header is not None and header.sealing else None

    def _close_writer(self, key: str) -> None:
        with self._mutex:
            log = self._writers.pop(key, None)
            self._reports.pop(key, None)
        if log is not None:
            log.close()

    # -- replay support (recover, repair, import, follow) ------------------------------------

    def writer_lock_held(self, key: str) -> bool:
        """Whether another writer is writing ``key`` at this moment (its lock is held)."""
        return self._probe_lock(check_key(key))

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
            raw = self._open_raw(key, False)
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
                where = self._quarantine(
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
            raw = self._open_raw(key, True)
            assert raw is not None
            created = raw.created
            try:
                existing = raw.data
                if existing == data:
                    return "unchanged"
                if existing and (not existing.endswith(b"\n") or not data.startswith(existing)):
                    return "clash"
                raw.io.append(data[len(existing) :])
                if self.durability != "none":
                    raw.io.sync()
                if not existing:
                    for reason, line, offset, text in rejected:
                        self._quarantine(key, text, reason=reason, line=line, offset=offset)
                return "extended" if existing else "created"
            except BaseException:
                if created:
                    raw.io.close()
                    self._remove(key)
                raise
            finally:
                raw.io.close()

    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on (for followers)."""
        data = self._read_raw(check_key(key))
        if data is None:
            raise SessionNotFoundError(key)
        return len(data), data[offset:]

    def _probe_lock(self, key: str) -> bool:
        return False

    def close(self) -> None:
        """Sync and close every open writer (graceful shutdown, like nanobot's ``flush_all``)."""
        with self._mutex:
            logs = list(self._writers.values())
            self._writers.clear()
            self._closed = True
        errors: list[BaseException] = []
        for log in logs:
            try:
                log.close()
            except Exception as exc:  # close the others, then report the first
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _decode(self, key: str, data: bytes) -> Decoded:
        decoded = decode_log(data, key=self._hash_key)
        where = self._describe(key)
        if decoded.header is None:
            problem = decoded.bad or decoded.torn
            reason = problem.reason if problem is not None else "empty file"
            raise NotALogError(where, f"line 1: {reason}")
        if decoded.header.key != key:
            raise NotALogError(where, f"its header names session {decoded.header.key!r}")
        self._unseal(key, decoded)
        return decoded

    def _session(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> SessionWriter:
        while True:
            log = self._writers.get(key)
            if log is None or log.closed or self._revalidate(key, log):
                break
        with self._mutex:
            if self._closed:
                raise StoreClosedError("the store is closed")
            log = self._writers.get(key)
            if log is not None and log.poisoned:  # reopen from what is really on disk
                log.abandon()
            if log is None or log.closed:
                raw, state, report = self._open_checked(key, create=create, metadata=metadata)
                try:
                    self._release(raw.io)
                except BaseException:
                    raw.io.close()
                    raise
                log = SessionLog(
                    key=key,
                    io=raw.io,
                    state=state,
                    durability=self.durability,
                    hash_key=self._hash_key,
                    token_counter=self.token_counter,
                    batch_window=self.batch_window,
                )
                log.settle = self._settler(key)
                writer = SessionWriter(log, on_close=self._forget)
                try:
                    self._arm_writer(writer)  # an encrypted store's sealer, finished erasures
                except BaseException:
                    log.close()
                    raise
                self._writers[key] = log
                self._reports[key] = report
            else:
                writer = SessionWriter(log, on_close=self._forget)
            log.handles += 1
        return writer

    def _revalidate(self, key: str, log: SessionLog) -> bool:
        """Before handing out a writer of a log this store already holds: catch it up.

        Also checks that the log still ends with the line this store last knew (a log
        rewritten in place to the same length is reloaded). False: the session is gone.
        """
        io: Any = log.io
        if not hasattr(io, "lock"):
            return True
        with log.lock:
            if log.closed:
                return False
            io.lock(True)
            try:
                self._catch_up(key, io, log.state, locked=True, check_head=True)
            except SessionNotFoundError:
                return False
            finally:
                io.unlock()
            if log.state.seq < log.commit.written:
                log.rebase()
        return True

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
        self._snapshot_on_close(writer)

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

    def _catch_up(
        self,
        key: str,
        io: SharedIO,
        state: SessionState,
        *,
        locked: bool,
        check_head: bool = False,
    ) -> bool:
        """Fold into ``state`` what other writers appended to ``key``'s log since ``io`` looked.

        ``locked``: the log's lock is held (a write follows); an incomplete last line is then
        a dead writer's and goes to quarantine, and anything unexpected reloads the log in
        place. Without the lock nothing is written, and False means: read the log instead.
        """
        if not locked:
            with io.pinned() as usable:
                return usable and not io.stale and self._fold_new(key, io, state, locked=False)
        if not io.stale and self._fold_new(key, io, state, locked=True, check_head=check_head):
            return True
        # Cut back, replaced in place, a line that does not follow, or a forked child's first
        # write: open the log again, exactly as on open (quarantine, CorruptLogError).
        data = io.read_from(0)
        io.set_size(len(data))
        fresh, report = self._prepare(key, _Reopened(io, data), None)
        self._reports[key] = report
        for name in SessionState.__struct_fields__:
            setattr(state, name, getattr(fresh, name))
        io.stale = False
        return True

    def _fold_new(
        self, key: str, io: SharedIO, state: SessionState, *, locked: bool, check_head: bool = False
    ) -> bool:
        try:
            length = io.observe()
        except SessionNotFoundError:
            if locked:
                self._gone(key, io)
                raise
            return False
        known = io.size()
        if check_head and known >= _HEAD_BYTES:
            if length < known:
                return False
            # The last line this log knew must still be there: its hash ends it.
            end = io.read_from(known - _HEAD_BYTES)[:_HEAD_BYTES]
            if end[:32] != state.head.encode("ascii") or end[32:] != b'"}\n':
                return False
        if length == known:
            return True
        if length < known:
            return False
        tail = io.read_from(known)
        decoded = decode_log(
            tail,
            key=self._hash_key,
            expect_header=False,
            prev_h=state.head,
            last_seq=state.seq,
            offset=known,
            first_line=state.seq + 2,
        )
        torn = decoded.torn
        if decoded.bad is not None or (torn is not None and torn.data.endswith(b"\n")):
            return False
        for event in self._unseal_events(key, state, decoded.events):
            apply(state, event)
        state.head = decoded.head  # the last line's: a segment header is a link too
        io.set_size(decoded.valid_length)
        if torn is not None and locked:
            where = self._quarantine(
                key, torn.data, reason=torn.reason, line=torn.line, offset=torn.offset
            )
            io.truncate(decoded.valid_length)
            if self.durability != "none":
                io.sync()
            self._reports[key] = OpenReport(key, torn=torn, quarantine=where)
        return True

    def _open_checked(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[RawSession, SessionState, OpenReport]:
        """Open ``key`` under its writer lock, cut a torn tail, fold it (the async store too)."""
        snap = self._read_snapshot(key)
        raw = self._open_raw_from(key, create, snap)
        if raw is None:
            raise SessionNotFoundError(key)
        try:
            state, report = self._prepare(key, raw, metadata)
        except BaseException:
            raw.io.close()
            raise
        return raw, state, report

    def _prepare(
        self, key: str, raw: RawSession, metadata: Mapping[str, Any] | None
    ) -> tuple[SessionState, OpenReport]:
        data = raw.data
        base: int = getattr(raw, "base", 0)
        snap: Snapshot | IndexMeta | None = getattr(raw, "snapshot", None)
        restored = None
        if base:
            # Read from the snapshot's line: use it, or (the log no longer matches it) read all.
            restored = self._restore(key, data, base=base, snap=snap)
            if restored is None:
                data = self._read_raw(key) or b""
        # A header cut anywhere, even inside its first bytes, is a crash while creating it.
        start = b'{"type":"header"'
        torn_header = b"\n" not in data and (data.startswith(start) or start.startswith(data))
        if restored is None and (not data or torn_header):
            # A new session, or a crash while its header was being written.
            quarantine = None
            torn = None
            if data:
                torn = TornTail(1, 0, data, "incomplete header line")
                quarantine = self._quarantine(key, data, reason=torn.reason, line=1, offset=0)
                raw.io.truncate(0)
            header = self._new_header(key, metadata)
            sealed = self._seal_new_header(header)
            line, h = encode_line(sealed, ZERO_HASH, self._hash_key)
            raw.io.append(line)
            if self.durability != "none":
                raw.io.sync()
            header = msgspec.structs.replace(header, h=h, sealing=sealed.sealing)
            return fold(header, ()), OpenReport(
                key, created=not data, torn=torn, quarantine=quarantine
            )
        if restored is None:
            restored = self._restore(key, data)
        decoded = restored[2] if restored is not None else self._decode(key, data)
        if decoded.bad is not None:
            raise CorruptLogError(self._describe(key), decoded.bad.line, decoded.bad.reason)
        assert decoded.header is not None
        version = max(decoded.header.version, decoded.version)
        if version > FORMAT_VERSION:  # read it, never append to it
            raise NewerFormatError(self._describe(key), version, FORMAT_VERSION)
        report = OpenReport(key)
        if decoded.torn is not None:
            torn = decoded.torn
            where = self._quarantine(
                key, torn.data, reason=torn.reason, line=torn.line, offset=torn.offset
            )
            raw.io.truncate(decoded.valid_length)
            if self.durability != "none":
                raw.io.sync()
            report = OpenReport(key, torn=torn, quarantine=where)
        state = restored[3] if restored is not None else fold(decoded.header, decoded.events)
        state.head = decoded.head  # the last line's: a segment header is a link too
        return state, report

    def _new_header(self, key: str, metadata: Mapping[str, Any] | None) -> Header:
        now = datetime.now(UTC)
        return Header(
            seq=0,
            ts=now,
            id=new_event_id(),
            key=key,
            created_at=now,
            metadata=dict(metadata or {}),
        )


def _check_metadata(metadata: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidEventError` (before anything is written) for a value JSON cannot carry."""
    if not isinstance(metadata, Mapping):
        raise InvalidEventError(f"metadata must be a dict, not {type(metadata).__name__}")
    encode_checked(metadata, "metadata")

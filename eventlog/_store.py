"""What every store shares: opening a session from its bytes, the store protocol, reports.

A backend supplies raw access (open a session's bytes under its writer lock, read them without
it, list, remove, quarantine); this module turns bytes into checked, folded sessions the same way
for every backend, so the file and memory stores cannot drift apart.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Self

import msgspec

from ._codec import ZERO_HASH, Decoded, TornTail, decode_log, encode_line, normalize_key
from ._errors import (
    CorruptLogError,
    InvalidEventError,
    LockedError,
    NewerFormatError,
    NotALogError,
    SessionNotFoundError,
    StoreClosedError,
)
from ._events import FORMAT_VERSION, Event, Header
from ._fold import SessionState, fold
from ._indexsnap import IndexMeta
from ._lifecycle import LifecycleOps
from ._names import check_key
from ._privacy import PrivacyOps, header_of
from ._snapshot import Snapshot
from ._store_types import CutReport, LoadedLog, OpenReport, RawSession
from ._tokens import TokenCounter, estimate_tokens
from ._values import encode_checked
from ._views import ViewStorage
from ._writer import Durability, SessionWriter, check_durability, new_event_id


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
        self._writers: dict[str, SessionWriter] = {}
        self._reports: dict[str, OpenReport] = {}
        self._mutex = threading.RLock()
        self._closed = False
        self._end_hooks = []

    # -- backend hooks -----------------------------------------------------------------------

    @abc.abstractmethod
    def _open_raw(self, key: str, create: bool) -> RawSession | None:
        """Open ``key`` under its writer lock (None if absent and not ``create``)."""

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

    # -- public API --------------------------------------------------------------------------

    @property
    def hash_key(self) -> bytes:
        """The secret the chain is keyed with (empty: unkeyed)."""
        return self._hash_key

    def session(self, key: str, *, metadata: Mapping[str, Any] | None = None) -> SessionWriter:
        """Return this process's writer for ``key``, creating the session on first use.

        ``metadata`` seeds a new session's header; it is ignored for an existing one. Opening
        cuts a torn last line into quarantine (see :meth:`open_report`) and raises
        :class:`CorruptLogError` for a bad line in the middle.
        """
        key = check_key(key)
        if metadata:
            _check_metadata(metadata)
        return self._session(key, create=True, metadata=metadata)

    def open(self, key: str) -> SessionWriter:
        """Like :meth:`session`, but raise :class:`SessionNotFoundError` for a new key."""
        return self._session(check_key(key), create=False, metadata=None)

    def open_report(self, key: str) -> OpenReport | None:
        """What opening ``key`` found in this process (torn tail, quarantine), if opened."""
        return self._reports.get(key)

    def load(self, key: str, *, prefix: bool = False, snapshot: bool = True) -> LoadedLog:
        """Read and fold a session without its writer lock, changing nothing.

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
        """The current folded state of ``key`` (from this process's writer when one is open)."""
        writer = self._writers.get(key)
        if writer is not None and not writer.closed:
            return writer.state
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

        Raises :class:`LockedError` when another process's writer holds it.
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
            writer = self._writers.pop(key, None)
            if writer is not None:
                writer.close()
            self._reports.pop(key, None)

    # -- replay support (recover, repair, import, follow) ------------------------------------

    def writer_lock_held(self, key: str) -> bool:
        """Whether a writer other than this store's own (another process) holds ``key``'s lock."""
        key = check_key(key)
        own = self._writers.get(key)
        if own is not None and not own.closed:
            return False
        return self._probe_lock(key)

    def cut(
        self, key: str, offset: int, *, reason: str, expect_length: int | None = None
    ) -> CutReport | None:
        """Move the bytes of ``key``'s log after ``offset`` into quarantine and truncate there.

        Runs under the writer lock (:class:`LockedError` if another writer, or this store's own
        open writer, holds it). ``offset`` must be a line boundary. With ``expect_length``, a log
        whose length changed since the caller read it is left alone and None is returned.
        """
        key = check_key(key)
        with self._mutex:
            own = self._writers.get(key)
            if own is not None and not own.closed:
                raise LockedError(key, self._describe(key))
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
            own = self._writers.get(key)
            if own is not None and not own.closed:
                raise LockedError(key, self._describe(key))
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
        try:
            raw = self._open_raw(key, False)
        except LockedError:
            return True
        if raw is not None:
            raw.io.close()
        return False

    def close(self) -> None:
        """Sync and close every open writer (graceful shutdown, like nanobot's ``flush_all``)."""
        with self._mutex:
            writers = list(self._writers.values())
            self._writers.clear()
            self._closed = True
        errors: list[BaseException] = []
        for writer in writers:
            try:
                writer.close()
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
        with self._mutex:
            if self._closed:
                raise StoreClosedError("the store is closed")
            writer = self._writers.get(key)
            if writer is not None and not writer.closed:
                return writer
            raw, state, report = self._open_checked(key, create=create, metadata=metadata)
            writer = SessionWriter(
                key=key,
                io=raw.io,
                state=state,
                durability=self.durability,
                hash_key=self._hash_key,
                token_counter=self.token_counter,
                batch_window=self.batch_window,
                on_close=self._forget,
            )
            self._arm_writer(writer)
            self._writers[key] = writer
            self._reports[key] = report
            return writer

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

    def _forget(self, writer: SessionWriter) -> None:
        with self._mutex:
            if self._writers.get(writer.key) is writer:
                del self._writers[writer.key]
        self._snapshot_on_close(writer)

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
        if decoded.header.version > FORMAT_VERSION:  # read it, never append to it
            raise NewerFormatError(self._describe(key), decoded.header.version, FORMAT_VERSION)
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
        if restored is not None:
            return restored[3], report
        return fold(decoded.header, decoded.events), report

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

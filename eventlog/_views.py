"""Where a store keeps its derived views (snapshots, the catalog), and snapshot use on open.

A backend overrides the storage hooks (:meth:`ViewStorage.snapshot_bytes`,
:meth:`~ViewStorage.put_snapshot`, :meth:`~ViewStorage.catalog_bytes`,
:meth:`~ViewStorage.put_catalog`, :meth:`~ViewStorage.scan_logs`, :meth:`~ViewStorage.read_log`,
:meth:`~ViewStorage.log_names`, :meth:`~ViewStorage.stat_log`, :meth:`~ViewStorage.read_changes`);
the defaults keep nothing and scan through the public API, which is always correct, only slower.

Invariants:
- Views are derived: losing or damaging one loses nothing; a view that disagrees with the log is
  ignored and rebuilt from the log.
- Snapshot policy: a snapshot is written when a writer closes and its session has at least
  :attr:`ViewStorage.snapshot_every` events past the snapshot it opened from (or past the header,
  when it opened without one); and on demand (:meth:`~ViewStorage.write_snapshot`, which
  ``replay.recover`` and ``projections.rebuild_snapshot`` use). Loading never writes anything.
- A file-store writer holding :attr:`ViewStorage.settle_every` events past the index it opened
  from extends the index snapshot from what it holds and then reads those events back from
  the log like the rest (:meth:`ViewStorage._settle`): its memory stays flat however long it
  appends. That costs the events since the last index (about one record pack and one id
  digest each, no decoding), never the session.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from ._changes import ChangeView, slot_of
from ._codec import Decoded
from ._errors import CorruptLogError, EventLogError, SessionNotFoundError
from ._events import Header
from ._fileindex import FileIndexFiles
from ._fold import SessionState, fold
from ._indexsnap import (
    FileColdIds,
    FileMessages,
    IndexMeta,
    decode_meta,
    extend_from_state,
    is_index_snapshot,
    line_spans,
    open_state,
    write_index,
)
from ._snapshot import (
    Snapshot,
    SnapshotError,
    SnapshotHealth,
    anchor_from,
    anchor_of,
    check_anchor,
    decode_snapshot,
    encode_snapshot,
    make_snapshot,
    resume,
)

if TYPE_CHECKING:
    from ._writer import SessionWriter


@dataclass(frozen=True, slots=True)
class LogStat:
    """One log as a directory scan sees it: its name in the store, size, identity, mtime."""

    name: str
    size: int
    #: Changes when the log is replaced (a new file, or bytes put in place of others).
    ino: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class SnapshotStatus:
    """What a session's snapshot is worth: ``missing``, ``valid``, ``stale`` or ``corrupt``."""

    key: str
    health: SnapshotHealth
    #: The snapshot's seq (0 when missing or corrupt).
    seq: int = 0
    #: Complete log lines after the snapshot (valid snapshots only).
    behind: int = 0
    reason: str = ""
    #: True when the call that returned this wrote a new snapshot.
    written: bool = False


class ViewStorage(abc.ABC):
    """Storage hooks for derived views, and the snapshot logic every store shares."""

    #: Events past the last snapshot that make a closing writer write a new one.
    snapshot_every: int = 256
    #: Events a writer holds in memory (past the index it opened from) before it indexes
    #: them and reads them back from the log on demand (0: never; see :meth:`_settle`).
    settle_every: int = 4096
    _hash_key: bytes

    # -- what the store itself provides --------------------------------------------------------

    @abc.abstractmethod
    def keys(self) -> list[str]:
        """Every session key."""

    @abc.abstractmethod
    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on."""

    @abc.abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """The whole log."""

    @abc.abstractmethod
    def _decode(self, key: str, data: bytes) -> Decoded:
        """Decode a whole log, checking its header names ``key``."""

    @abc.abstractmethod
    def _describe(self, key: str) -> str:
        """Where ``key`` lives, for messages."""

    # -- sealing hooks (an encrypted store overrides these; see ``_privacy``) --------------------

    def _seal_snapshot(self, key: str, snapshot: Snapshot) -> Snapshot:
        return snapshot

    def _unseal_restored(self, key: str, snapshot: Snapshot, decoded: Decoded) -> bool:
        return True

    # -- storage hooks (override in a backend) -------------------------------------------------

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None: none kept)."""
        return None

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Store (or with None, remove) the snapshot of ``key``, atomically."""
        return None

    def catalog_bytes(self) -> bytes | None:
        """The stored session catalog (None: none kept)."""
        return None

    def put_catalog(self, data: bytes) -> None:
        """Store the session catalog, atomically."""
        return None

    def scan_logs(self) -> list[LogStat]:
        """Every log, as one directory scan sees it (the default reads every log's length)."""
        stats: list[LogStat] = []
        for key in self.keys():
            try:
                size, _ = self.read_tail(key, 1 << 62)
            except SessionNotFoundError:
                continue
            stats.append(LogStat(key, size, 0, 0))
        return stats

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """A log named as :meth:`scan_logs` names it: its length and bytes from ``offset``."""
        try:
            return self.read_tail(name, offset)
        except SessionNotFoundError:
            return None

    def log_names(self) -> list[str]:
        """The names :meth:`scan_logs` gives (a backend may list them without a stat each)."""
        return [st.name for st in self.scan_logs()]

    def stat_log(self, name: str) -> LogStat | None:
        """One log as :meth:`scan_logs` would see it (None: there is no such log)."""
        got = self.read_log(name, 1 << 62)
        return None if got is None else LogStat(name, got[0], 0, 0)

    def read_changes(self) -> ChangeView | None:
        """A copy of the store's change table (see :mod:`eventlog._changes`); None: none kept.

        Without one, a catalog refresh stats every log; with one, only the logs in slots whose
        stamp changed since its saved copy (and the directory only when membership changed).
        """
        return None

    @staticmethod
    def log_slot(name: str) -> int:
        """The change-table slot of a log named as :meth:`scan_logs` names it."""
        return slot_of(name)

    def _index_files(self, key: str) -> FileIndexFiles | None:
        """Where ``key``'s message and id records live (None: this store keeps format-2
        snapshots, with the messages inside)."""
        return None

    def _read_snapshot(self, key: str) -> Snapshot | IndexMeta | None:
        """``key``'s snapshot, checked on its own (None: missing, corrupt, or of the format
        this store does not keep)."""
        blob = self.snapshot_bytes(key)
        if blob is None:
            return None
        try:
            if not is_index_snapshot(blob):
                return decode_snapshot(blob, key, self._hash_key)
            if self._index_files(key) is None:
                return None
            meta = decode_meta(blob, key, self._hash_key)
        except SnapshotError:
            return None
        return None if _private(meta.state) or meta.header.sealing else meta

    # -- snapshots -------------------------------------------------------------------------------

    def snapshot_status(self, key: str) -> SnapshotStatus:
        """Check ``key``'s snapshot against its log (reads the log from the snapshot on)."""
        blob = self.snapshot_bytes(key)
        if blob is None:
            return SnapshotStatus(key, "missing")
        snap: Snapshot | IndexMeta
        try:
            if is_index_snapshot(blob):
                snap = decode_meta(blob, key, self._hash_key)
            else:
                snap = decode_snapshot(blob, key, self._hash_key)
        except SnapshotError as exc:
            return SnapshotStatus(key, "corrupt", reason=str(exc))
        if isinstance(snap, IndexMeta) and self._index_files(key) is None:
            return SnapshotStatus(key, "stale", snap.seq, reason="written in another format")
        try:
            _, tail = self.read_tail(key, snap.line_start)
        except SessionNotFoundError:
            return SnapshotStatus(key, "stale", snap.seq, reason="the log is gone")
        problem = check_anchor(snap, tail, self._hash_key)
        if problem is not None:
            return SnapshotStatus(key, "stale", snap.seq, reason=problem)
        behind = tail.count(b"\n", snap.offset - snap.line_start)
        return SnapshotStatus(key, "valid", snap.seq, behind=behind)

    def write_snapshot(self, key: str, *, rebuild: bool = False) -> SnapshotStatus:
        """Bring ``key``'s snapshot up to the end of its log; with ``rebuild``, from the log alone.

        A valid snapshot is extended by the lines after it; a missing, stale or corrupt one (or
        any with ``rebuild``) is replaced by a fold of the whole log. A log with no events gets
        no snapshot.

        Raises:
            CorruptLogError: the log has a bad line (nothing is written).
            SessionNotFoundError: there is no such session.
        """
        files = self._index_files(key)
        if files is not None:
            done = self._write_index_snapshot(key, files, rebuild)
            if done is not None:
                return done
        restored = None if rebuild else self._restore(key, None)
        if restored is not None:
            snap, tail, decoded, state = restored
            if decoded.bad is not None:
                raise CorruptLogError(self._describe(key), decoded.bad.line, decoded.bad.reason)
            if not decoded.events:
                return SnapshotStatus(key, "valid", snap.seq)
            header = snap.header
            anchor = anchor_of(tail, snap.line_start, decoded, anchor_from(snap))
        else:
            data, decoded, header, state = self._fold_whole_log(key)
            anchor = anchor_of(data, 0, decoded, None)
        if anchor is None:
            return SnapshotStatus(key, "missing", reason="the log has no events")
        try:
            snapshot = self._seal_snapshot(key, make_snapshot(header, state, anchor))
            blob = encode_snapshot(snapshot, self._hash_key)
        except (msgspec.EncodeError, OverflowError) as exc:
            self.put_snapshot(key, None)
            return SnapshotStatus(key, "missing", reason=f"state cannot be snapshotted: {exc}")
        self.put_snapshot(key, blob)
        self._snapshot_seqs()[key] = anchor.seq
        return SnapshotStatus(key, "valid", anchor.seq, written=True)

    def _fold_whole_log(self, key: str) -> tuple[bytes, Decoded, Header, SessionState]:
        """The whole log of ``key``, decoded and folded (a bad line is a CorruptLogError)."""
        data = self.read_bytes(key)
        decoded = self._decode(key, data)
        if decoded.bad is not None:
            raise CorruptLogError(self._describe(key), decoded.bad.line, decoded.bad.reason)
        assert decoded.header is not None
        state = fold(decoded.header, decoded.events)
        state.head = decoded.head  # the last line's: a segment header is a link too
        return data, decoded, decoded.header, state

    def _write_index_snapshot(
        self, key: str, files: FileIndexFiles, rebuild: bool
    ) -> SnapshotStatus | None:
        """An index snapshot (None: the session is sealed, erased or redacted; those keep
        format-2 snapshots, whose messages carry what the fold withheld)."""
        restored = None if rebuild else self._restore(key, None)
        if restored is not None and isinstance(restored[0], IndexMeta):
            base = restored[0]
            _, tail, decoded, state = restored
            if decoded.bad is not None:
                raise CorruptLogError(self._describe(key), decoded.bad.line, decoded.bad.reason)
            if not decoded.events:
                return SnapshotStatus(key, "valid", base.seq)
            header = base.header
            anchor = anchor_of(tail, base.line_start, decoded, anchor_from(base))
            first = base.offset - base.line_start
            spans = line_spans(tail, first, len(decoded.events), base.line_start)
            meta: IndexMeta | None = base
        else:
            tail, decoded, header, state = self._fold_whole_log(key)
            anchor = anchor_of(tail, 0, decoded, None)
            spans = line_spans(tail, tail.index(b"\n") + 1, len(decoded.events), 0)
            meta = None
        if anchor is None:
            return SnapshotStatus(key, "missing", reason="the log has no events")
        if _private(state) or header.sealing:
            return None
        try:
            blob = write_index(
                files,
                header=header,
                state=state,
                anchor=anchor,
                events=decoded.events,
                spans=spans,
                base=meta,
                hash_key=self._hash_key,
            )
        except (SnapshotError, msgspec.EncodeError, OverflowError) as exc:
            self.put_snapshot(key, None)
            return SnapshotStatus(key, "missing", reason=f"state cannot be snapshotted: {exc}")
        self.put_snapshot(key, blob)
        self._snapshot_seqs()[key] = anchor.seq
        return SnapshotStatus(key, "valid", anchor.seq, written=True)

    # -- used by the store when opening and closing ---------------------------------------------

    def _snapshot_seqs(self) -> dict[str, int]:
        seqs: dict[str, int] | None = self.__dict__.get("_snapshot_seq_by_key")
        if seqs is None:
            seqs = self.__dict__.setdefault("_snapshot_seq_by_key", {})
        return seqs

    def _restore(
        self,
        key: str,
        data: bytes | None,
        *,
        base: int = 0,
        snap: Snapshot | IndexMeta | None = None,
    ) -> tuple[Snapshot | IndexMeta, bytes, Decoded, SessionState] | None:
        """Open from the snapshot: (snapshot, log from its line, decoded tail, state), or None.

        ``data`` is the log from byte ``base`` on when the caller already holds it (``snap``:
        the snapshot it read it for); otherwise only the part from the snapshot's line on is
        read. None means: no usable snapshot, read the log.
        """
        if snap is None:
            snap = self._read_snapshot(key)
            if snap is None:
                return None
        if data is None:
            try:
                _, tail = self.read_tail(key, snap.line_start)
            except SessionNotFoundError:
                return None
        elif snap.line_start < base:
            return None
        else:
            tail = data[snap.line_start - base :]
        if check_anchor(snap, tail, self._hash_key) is not None:
            return None
        if isinstance(snap, IndexMeta):
            files = self._index_files(key)
            restored = None if files is None else open_state(files, snap, self._hash_key)
            if restored is None:
                return None
        else:
            restored = snap.state
        decoded = resume(snap, tail, self._hash_key)
        if isinstance(snap, Snapshot):
            if not self._unseal_restored(key, snap, decoded):
                return None  # sealed with a key that is gone (erased): read the log
            restored = snap.state
        state = fold(snap.header, decoded.events, restored)
        state.head = decoded.head  # the last line's: a segment header is a link too
        self._snapshot_seqs()[key] = snap.seq
        return snap, tail, decoded, state

    def _snapshot_on_close(self, writer: SessionWriter, state: SessionState | None = None) -> None:
        """The close half of the snapshot policy; a failure only means no snapshot.

        Works on a copy of the writer's state (``state``, or one taken under the log's lock):
        the store's other handles of the session may go on appending while this one closes.
        """
        base = self._snapshot_seqs().get(writer.key, 0)
        if self.snapshot_every <= 0 or writer.state.seq - base < self.snapshot_every:
            return
        if state is None:
            with writer._lock:
                state = writer.state.copy()
        with contextlib.suppress(EventLogError, OSError):
            if not self._extend_index(writer.key, state):
                self.write_snapshot(writer.key)

    def _settler(self, key: str) -> Callable[[SessionState], None] | None:
        """What a writer of ``key`` calls after each write (None: this store keeps no index)."""
        if self._index_files(key) is None or self.settle_every <= 0:
            return None
        return _Settler(self, key, self.settle_every)

    def _settle(self, key: str, state: SessionState) -> bool:
        """Index what a writer's ``state`` holds in memory, then read it from the index like
        the messages it opened with: its own events leave memory (True: done).

        Extends the index snapshot the state opened from (or, opened without one, writes one
        from the header on, see :meth:`_extend_index`); the state then takes the snapshot's message list and on-disk ids, which
        hold exactly what it held (a writer's state equals the fold of its log, and the
        snapshot is used only when it ends at the state's own seq and head). Anything in the
        way (another writer moved the snapshot or the log on, a sealed or private session, an
        I/O error) leaves the state as it was.
        """
        files = self._index_files(key)
        if files is None or _private(state):
            return False
        try:
            # Not extended: another writer may have indexed up to this very state; use it then.
            self._extend_index(key, state)
            meta = self._read_snapshot(key)
            if not isinstance(meta, IndexMeta) or (meta.seq, meta.head) != (state.seq, state.head):
                return False
            opened = open_state(files, meta, self._hash_key)
        except (EventLogError, OSError, ValueError):  # ValueError: SnapshotError
            return False
        if opened is None:
            return False
        older, newer = state.ids.cold, opened.ids.cold
        if isinstance(older, FileColdIds) and isinstance(newer, FileColdIds):
            newer.inherit(older)
        state.messages = opened.messages
        state.ids = opened.ids
        self._snapshot_seqs()[key] = meta.seq
        return True

    def _extend_index(self, key: str, state: SessionState) -> bool:
        """Write the index snapshot of ``state`` from what it holds (True: done): extending
        the one it opened from, or, opened without one (every message in memory), from the
        log's header on."""
        files = self._index_files(key)
        source = state.messages.source
        if files is None or _private(state):
            return False
        meta: IndexMeta | None = None
        since = 0
        if isinstance(source, FileMessages):
            # The stored snapshot, whichever writer wrote it, as long as it does not pass this
            # state and its line checks against the log: it indexes a prefix of what the state
            # holds (one another handle wrote while closing may even be older than the one
            # the state opened from; the lines in between are then decoded).
            stored = self._read_snapshot(key)
            if not isinstance(stored, IndexMeta) or stored.seq > state.seq:
                return False
            meta, since = stored, source.meta.records
            _, tail = self.read_tail(key, meta.line_start)
            if check_anchor(meta, tail, self._hash_key) is not None:
                return False
        elif source is None:
            _, tail = self.read_tail(key, 0)
        else:
            return False
        try:
            blob = extend_from_state(files, meta, state, tail, self._hash_key, since)
        except (SnapshotError, msgspec.EncodeError, OverflowError):
            return False
        if blob is None:
            return False
        self.put_snapshot(key, blob)
        self._snapshot_seqs()[key] = state.seq
        return True


class _Settler:
    """A writer's settle hook: every ``every`` events, index what the writer holds."""

    __slots__ = ("_every", "_key", "_next", "_store", "_wait")

    def __init__(self, store: ViewStorage, key: str, every: int) -> None:
        self._store = store
        self._key = key
        self._every = every
        self._next = 0
        self._wait = every

    def __call__(self, state: SessionState) -> None:
        if state.seq < self._next:
            return
        source = state.messages.source
        base = source.meta.seq if isinstance(source, FileMessages) else 0
        if state.seq - base < self._every:
            self._next = base + self._every
            return
        # A failure is not retried on every append: the wait doubles after each one (a state
        # that cannot settle, e.g. a log in a layout the index does not cover, costs a few
        # tries, not one per window).
        self._next = state.seq + self._wait
        if self._store._settle(self._key, state):
            self._wait = self._every
            self._next = state.seq + self._every
        else:
            self._wait *= 2


def _private(state: SessionState) -> bool:
    """Whether a session's state withholds content (sealed, erased, redacted): its snapshots
    keep the messages as the fold left them (format 2), not as offsets into the log."""
    return state.sealed or bool(state.erased_upto) or bool(state.redacted)

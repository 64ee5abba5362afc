"""Where a store keeps its derived views (snapshots, the catalog), and snapshot use on open.

A store holds one :class:`SnapshotViews`; the bytes live where its backend keeps them
(:meth:`~eventlog._backend.Backend.snapshot_bytes`, :meth:`~eventlog._backend.Backend.put_snapshot`,
:meth:`~eventlog._backend.Backend.index_files`; the defaults keep nothing, which is always
correct, only slower).

Invariants:
- Views are derived: losing or damaging one loses nothing; a view that disagrees with the log is
  ignored and rebuilt from the log.
- Snapshot policy: a snapshot is written when a writer closes and its session has at least
  ``store.snapshot_every`` events past the snapshot it opened from (or past the header,
  when it opened without one); and on demand (:meth:`~SnapshotViews.write_snapshot`, which
  ``replay.recover`` and ``projections.rebuild_snapshot`` use). Loading never writes anything.
- A file-store writer holding ``store.settle_every`` events past the index it opened
  from extends the index snapshot from what it holds and then reads those events back from
  the log like the rest (:meth:`SnapshotViews._settle`): its memory stays flat however long it
  appends. That costs the events since the last index (about one record pack and one id
  digest each, no decoding), never the session.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import msgspec

from ._backend import Backend, LogStat
from ._codec import Decoded
from ._errors import CorruptLogError, EventLogError, SessionNotFoundError
from ._events import Header
from ._fileindex import IndexFiles
from ._fold import SessionState, fold_decoded, withheld
from ._indexsnap import (
    FORMAT3_MAGIC,
    FileColdIds,
    FileMessages,
    IndexMeta,
    MetaSeal,
    decode_meta,
    extend_from_state,
    is_index_snapshot,
    line_spans,
    open_state,
    write_index,
)
from ._snapshot import (
    Anchor,
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
    from ._store import BaseStore
    from ._writeapi import WriteAPI
    from ._writer import SessionWriter

__all__ = ("LogStat", "SnapshotStatus", "SnapshotViews", "withheld")


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


class SnapshotViews:
    """The snapshot logic of one store (it holds this object and delegates to it)."""

    def __init__(self, store: BaseStore, backend: Backend) -> None:
        # The store owns this object: a weak reference back, so no cycle keeps the store alive.
        self._store = cast("BaseStore", weakref.proxy(store))
        self._backend = backend
        self._hash_key = store.hash_key
        #: The seq of the snapshot each session last opened from or wrote (the close policy).
        self.seqs: dict[str, int] = {}

    def _index_files(self, key: str) -> IndexFiles | None:
        return self._backend.index_files(key)

    def read_snapshot(self, key: str) -> Snapshot | IndexMeta | None:
        """``key``'s snapshot, checked on its own (None: missing, corrupt, or of the format
        this store does not keep)."""
        blob = self._backend.snapshot_bytes(key)
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
        if withheld(meta.state):
            return None
        # A sealed session's index snapshot is opened here, where it is read: every IndexMeta
        # in memory holds plaintext values, and is sealed again only when encoded.
        return meta if self._store._privacy.open_sealed(key, meta) else None

    def _index_seal(self, sealed: bool) -> MetaSeal | None:
        """How a sealed session's index snapshot is sealed before it is encoded (None: it
        is not sealed)."""
        if not sealed:
            return None
        store = self._store
        return lambda meta, messages: store._privacy.seal_snapshot(meta.key, meta, messages)

    # -- snapshots -------------------------------------------------------------------------------

    def snapshot_status(self, key: str) -> SnapshotStatus:
        """Check ``key``'s snapshot against its log (reads the log from the snapshot on)."""
        blob = self._backend.snapshot_bytes(key)
        if blob is None:
            return SnapshotStatus(key, "missing")
        if blob.startswith(FORMAT3_MAGIC):  # an earlier version's: no snapshot, not a damaged one
            why = "an index snapshot of format 3 (an earlier version's) is not read"
            return SnapshotStatus(key, "missing", reason=why)
        snap: Snapshot | IndexMeta
        try:
            if is_index_snapshot(blob):
                snap = decode_meta(blob, key, self._hash_key)
            else:
                snap = decode_snapshot(blob, key, self._hash_key)
        except SnapshotError as exc:
            return SnapshotStatus(key, "corrupt", reason=str(exc))
        try:
            _, tail = self._store.read_tail(key, snap.line_start)
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
        taken = self._fold_to_snapshot(key, rebuild, index=False)
        if isinstance(taken, SnapshotStatus):
            return taken
        header, state, anchor = taken.header, taken.state, taken.anchor
        if 0 < anchor.seq <= state.erased_upto:
            # Erased up to its last event: the key its sealed state would be sealed under is
            # destroyed, and the log alone is all there is to read. No snapshot, said why.
            self._backend.put_snapshot(key, None)
            return SnapshotStatus(key, "missing", reason="the session is erased (nothing to seal)")

        def encode() -> bytes:
            snapshot = self._store._privacy.seal_snapshot(key, make_snapshot(header, state, anchor))
            return encode_snapshot(snapshot, self._hash_key)

        return self._put(key, anchor.seq, encode, (msgspec.EncodeError, OverflowError))

    def _fold_to_snapshot(self, key: str, rebuild: bool, *, index: bool) -> _Taken | SnapshotStatus:
        """What a new snapshot of ``key`` is taken from: the stored snapshot (an index one when
        ``index``) extended by the log lines after it, else (or with ``rebuild``) the whole log
        folded; a status instead when there is nothing new to write. A bad line is a
        :class:`CorruptLogError` (nothing is written)."""
        restored = None if rebuild else self.restore(key, None)
        if restored is not None and (not index or isinstance(restored[0], IndexMeta)):
            base, tail, decoded, state = restored
            self._refuse_bad_line(key, decoded)
            if not decoded.events:
                return SnapshotStatus(key, "valid", base.seq)
            anchor = anchor_of(tail, base.line_start, decoded, anchor_from(base))
            extended: Snapshot | IndexMeta | None = base
            data, start, header = tail, base.line_start, base.header
        else:
            data, decoded, header, state = self._fold_whole_log(key)
            extended, start, anchor = None, 0, anchor_of(data, 0, decoded, None)
        if anchor is None:
            return SnapshotStatus(key, "missing", reason="the log has no events")
        _at_anchor(state, anchor)
        return _Taken(extended, data, start, decoded, header, state, anchor)

    def _put(
        self,
        key: str,
        seq: int,
        encode: Callable[[], bytes],
        refused: tuple[type[Exception], ...],
    ) -> SnapshotStatus:
        """Store the snapshot ``encode`` gives (taken at ``seq``); a state it cannot encode
        (``refused``) leaves no snapshot, and says why."""
        try:
            blob = encode()
        except refused as exc:
            self._backend.put_snapshot(key, None)
            return SnapshotStatus(key, "missing", reason=f"state cannot be snapshotted: {exc}")
        self._backend.put_snapshot(key, blob)
        self.seqs[key] = seq
        return SnapshotStatus(key, "valid", seq, written=True)

    def _refuse_bad_line(self, key: str, decoded: Decoded) -> None:
        """A snapshot is never written over a log with a bad line: CorruptLogError naming it."""
        if decoded.bad is not None:
            raise CorruptLogError(self._store._describe(key), decoded.bad.line, decoded.bad.reason)

    def _fold_whole_log(self, key: str) -> tuple[bytes, Decoded, Header, SessionState]:
        """The whole log of ``key``, decoded and folded (a bad line is a CorruptLogError)."""
        data = self._store.read_bytes(key)
        decoded = self._store._decode(key, data)
        self._refuse_bad_line(key, decoded)
        assert decoded.header is not None
        state = fold_decoded(decoded.header, decoded)
        return data, decoded, decoded.header, state

    def _write_index_snapshot(
        self, key: str, files: IndexFiles, rebuild: bool
    ) -> SnapshotStatus | None:
        """An index snapshot (None: the session is sealed, erased or redacted; those keep
        format-2 snapshots, whose messages carry what the fold withheld)."""
        taken = self._fold_to_snapshot(key, rebuild, index=True)
        if isinstance(taken, SnapshotStatus):
            return taken
        if withheld(taken.state):
            return None
        base = cast("IndexMeta | None", taken.base)
        decoded, tail = taken.decoded, taken.data
        first = base.offset - base.line_start if base is not None else tail.index(b"\n") + 1
        spans = line_spans(tail, first, len(decoded.events), taken.start)
        header, anchor = taken.header, taken.anchor

        def encode() -> bytes:
            return write_index(
                files,
                header=header,
                state=taken.state,
                anchor=anchor,
                events=decoded.events,
                spans=spans,
                base=base,
                hash_key=self._hash_key,
                seal=self._index_seal(bool(header.sealing)),
                log=tail,
                log_start=taken.start,
            )

        refused = (SnapshotError, msgspec.EncodeError, OverflowError)
        return self._put(key, anchor.seq, encode, refused)

    # -- used by the store when opening and closing ---------------------------------------------

    def restore(
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
        just_read = snap is None
        if snap is None:
            snap = self.read_snapshot(key)
            if snap is None:
                return None
        if data is None:
            try:
                _, tail = self._store.read_tail(key, snap.line_start)
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
        if not self._store._privacy.unseal_restored(key, snap, decoded, just_read=just_read):
            return None  # sealed with a key that is gone (erased): read the log
        if isinstance(snap, Snapshot):
            restored = snap.state
        state = fold_decoded(snap.header, decoded, restored)
        self.seqs[key] = snap.seq
        return snap, tail, decoded, state

    def on_close(self, writer: WriteAPI[Any, Any], state: SessionState | None = None) -> None:
        """The close half of the snapshot policy; a failure only means no snapshot.

        Works on a copy of the writer's state (``state``, or one taken under the log's lock):
        the store's other handles of the session may go on appending while this one closes.
        """
        base = self.seqs.get(writer.key, 0)
        if self._store.snapshot_every <= 0 or writer.state.seq - base < self._store.snapshot_every:
            return
        if state is None:  # a sync writer (the async store passes its copy)
            with cast("SessionWriter", writer)._lock:
                state = writer.state.copy()
        with contextlib.suppress(EventLogError, OSError):
            if not self._extend_index(writer.key, state):
                self.write_snapshot(writer.key)

    def settler(self, key: str) -> Callable[[SessionState], None] | None:
        """What a writer of ``key`` calls after each write (None: this store keeps no index)."""
        if self._index_files(key) is None or self._store.settle_every <= 0:
            return None
        return _Settler(self, key, self._store.settle_every)

    def _settle(self, key: str, state: SessionState) -> bool | None:
        """Index what a writer's ``state`` holds in memory, then read it from the index like
        the messages it opened with: its own events leave memory (True: done).

        Extends the index snapshot the state opened from (or, opened without one, writes one
        from the header on, see :meth:`_extend_index`); the state then takes the snapshot's message list and on-disk ids, which
        hold exactly what it held (a writer's state equals the fold of its log, and the
        snapshot is used only when it ends at the state's own seq and head). Anything in the
        way (another writer moved the snapshot or the log on, an erased or redacted session, an
        I/O error) leaves the state as it was; None says another writer's snapshot is past
        this state (a race lost, worth trying again after the next append).
        """
        files = self._index_files(key)
        if files is None or withheld(state):
            return False
        try:
            # Not extended: another writer may have indexed up to this very state; use it then.
            extended = self._extend_index(key, state)
            meta = self.read_snapshot(key)
            if isinstance(meta, IndexMeta) and (
                meta.seq > state.seq or (extended and meta.seq != state.seq)
            ):
                # Another writer indexed past this state, or put its older snapshot over the
                # one just written: a race lost, not a state that cannot settle.
                return None
            if not isinstance(meta, IndexMeta) or (meta.seq, meta.head) != (state.seq, state.head):
                return False
            opened = open_state(files, meta, self._hash_key)
        except (EventLogError, OSError, ValueError):  # ValueError: SnapshotError
            return False
        if opened is None:
            return False
        if state.sealed and opened.messages.source is not None:
            # The records point at sealed lines: they open as the writer's own messages did.
            privacy = self._store._privacy
            seal = privacy.seal_of(key, meta.header)
            opened.messages.source.opener = privacy.opener_of(seal, meta)
        older, newer = state.ids.cold, opened.ids.cold
        if isinstance(older, FileColdIds) and isinstance(newer, FileColdIds):
            newer.inherit(older)
        state.messages = opened.messages
        state.ids = opened.ids
        self.seqs[key] = meta.seq
        return True

    def _extend_index(self, key: str, state: SessionState) -> bool:
        """Write the index snapshot of ``state`` from what it holds (True: done): extending
        the one it opened from, or, opened without one (every message in memory), from the
        log's header on."""
        files = self._index_files(key)
        source = state.messages.source
        if files is None or withheld(state):
            return False
        meta: IndexMeta | None = None
        since = 0
        if isinstance(source, FileMessages):
            # The stored snapshot, whichever writer wrote it, as long as it does not pass this
            # state and its line checks against the log: it indexes a prefix of what the state
            # holds (one another handle wrote while closing may even be older than the one
            # the state opened from; the lines in between are then decoded).
            stored = self.read_snapshot(key)
            if not isinstance(stored, IndexMeta) or stored.seq > state.seq:
                return False
            meta, since = stored, source.meta.records
            _, tail = self._store.read_tail(key, meta.line_start)
            if check_anchor(meta, tail, self._hash_key) is not None:
                return False
        elif source is None:
            _, tail = self._store.read_tail(key, 0)
        else:
            return False
        privacy = self._store._privacy
        try:
            blob = extend_from_state(
                files,
                meta,
                state,
                tail,
                self._hash_key,
                since,
                seal=self._index_seal(state.sealed),
                open_header=(lambda h: privacy.open_header(key, h)) if state.sealed else None,
            )
        except (SnapshotError, msgspec.EncodeError, OverflowError):
            return False
        if blob is None:
            return False
        self._backend.put_snapshot(key, blob)
        self.seqs[key] = state.seq
        return True


class _Settler:
    """A writer's settle hook: every ``every`` events, index what the writer holds."""

    __slots__ = ("_every", "_key", "_next", "_store", "_wait")

    def __init__(self, store: SnapshotViews, key: str, every: int) -> None:
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
        # that cannot settle, e.g. an index file that cannot be written, costs a few tries,
        # not one per window). A race lost to another writer that indexed past this state is
        # retried at the next append, which catches up past that writer's snapshot: with
        # two writers on one session, doubling the wait there let each hold hundreds of events.
        self._next = state.seq + self._wait
        done = self._store._settle(self._key, state)
        if done:
            self._wait = self._every
            self._next = state.seq + self._every
        elif done is None:
            self._next = state.seq + 1
        else:
            self._wait *= 2


@dataclass(slots=True)
class _Taken:
    """What a new snapshot is taken from (see :meth:`SnapshotViews._fold_to_snapshot`)."""

    #: The stored snapshot extended (None: the whole log was folded).
    base: Snapshot | IndexMeta | None
    #: The log bytes read (from ``start``, the base's line, or 0) and their decode.
    data: bytes
    start: int
    decoded: Decoded
    header: Header
    state: SessionState
    anchor: Anchor


def _at_anchor(state: SessionState, anchor: Anchor) -> None:
    """Make ``state`` (folded to the end of the log) the state at ``anchor``: they differ
    only in the head when the log ends in a later segment's header (a roll with nothing
    after it yet), which a snapshot does not anchor on; opening reads that header again."""
    if state.seq == anchor.seq:
        state.head = anchor.head

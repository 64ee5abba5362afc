"""Index snapshots (format 4): the folded state without its messages, and where they are.

An index snapshot is ``MAGIC || msgpack(IndexMeta) || digest`` (the digest as in format 2,
keyed with the store's secret). Instead of the live messages' bytes it holds their *ranges* in
the message record file (``<stem>.index``, 64 bytes per message event, see
:data:`~eventlog._msgindex.RECORD`), and instead of the event ids the count of records in the
id file (``<stem>.ids``, 16 bytes per event: an 8-byte id digest and the line's offset). Both
record files are checked chunk by chunk (:data:`CHUNK` records) against digests the snapshot
carries, so opening reads the snapshot, the chunks it needs and the log after its line.

Invariants:
- The anchor rules are format 2's (see :mod:`eventlog._snapshot`): used only when the log line
  ending at ``offset`` is event ``seq`` with hash ``head`` chaining from ``prev_head``.
- Records are a function of the log: the N-th message event's record sits at ``N * 64``, the
  event of seq S's id record at ``(S - 1) * 16``. A full block's span digest (see
  :func:`~eventlog._msgindex.span_hasher`), in its last record, and the partial last block's,
  in the snapshot (``last_span``), are hashed only from bytes the chain vouched for when they
  are written: lines decoded and checked, lines a writer holds found byte for byte equal to
  its own encoding of them, and, where a partial block of an older snapshot is continued, its
  bytes checked first against that snapshot's ``last_span`` (and the chain). Bringing a snapshot up to date writes only
  the records of the lines after its anchor, and rewrites the digest of the last chunk.
- Writing costs the lines after the previous snapshot (plus 16 bytes of digest per 1,024
  records), never the whole session: that is what lets a closing writer snapshot.
- A closing writer (:func:`extend_from_state`) writes its own state rather than a fold of
  decoded lines: the lines since the snapshot are split and hash-checked, and decoded only
  when the writer no longer holds them. That is sound because a writer's live state equals the
  state reopened from its log (the property the suite holds every writer to); the state's
  head must also equal the last line's hash, or the general path runs instead.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import msgspec

from ._codec import SUFFIX_LEN, chain_hash, decode_log, verify_chain
from ._errors import CorruptLogError
from ._events import HELD_LINE, Event, Header, MessageAppended
from ._fileindex import IndexFiles, IndexName
from ._fold import SessionState
from ._idindex import ID_RECORD, IdIndex, id_digest, id_hasher
from ._msgindex import (
    BLOCK,
    FLAG_COMMAND,
    FLAG_DELIVERY,
    FLAG_MEDIA,
    FLAG_TOOL_CALLS,
    FLAG_TOOL_RESULT,
    RECORD,
    ROLES,
    MessageList,
    fill_spans,
    merge_ranges,
    pack_record,
    span_hasher,
)
from ._segments import SEGMENT_HEADER_START
from ._snapshot import (
    DIGEST_SIZE,
    Anchor,
    Anchored,
    SnapshotError,
    digest,
    make_anchored,
    seal,
    snapshot_decoder,
    unseal,
)

#: 4: message records keep a span digest where format 3 kept the previous line's hash (a
#: format-3 snapshot is not read: the next snapshot is rebuilt from the log).
INDEX_VERSION: Final = 4
INDEX_MAGIC: Final = b"SLSNAP4\n"
#: What an earlier version's index snapshot starts with: not read, treated as no snapshot.
FORMAT3_MAGIC: Final = b"SLSNAP3\n"
CHUNK: Final = 1024


class IndexMeta(Anchored, kw_only=True):
    """The folded state of one session after line ``line_no`` (event ``seq``), messages apart.

    Its state holds no messages and no ids (they are in the record files).
    """

    version: int = INDEX_VERSION
    #: Live messages: ``[start, stop)`` ranges of message records, oldest first.
    ranges: list[tuple[int, int]] = msgspec.field(default_factory=list)
    #: Message records written (the message events up to ``seq``), and their chunk digests.
    records: int = 0
    record_digests: bytes = b""
    #: The span digest of the last block of records when it is partial (``records`` not a
    #: multiple of 64): over the log from its first record's line to its last record's line
    #: end; else empty.
    last_span: bytes = b""
    #: Id records (one per event: ``seq`` of them), and their chunk digests.
    id_digests: bytes = b""
    #: A sealed session's window (its newest messages, sealed as one; see
    #: ``_crypto.SessionSeal.seal_window``), or empty. Written after the snapshot's digest
    #: (:func:`encode_meta`), never inside the msgpack: the AEAD tag checks it, and hashing
    #: hundreds of KB on every open would cost what the window saves.
    window: bytes = b""
    #: Where in ``window`` the window lies (a snapshot read keeps the file's bytes there, not
    #: a copy of its window).
    window_span: tuple[int, int] = (0, 0)

    def window_view(self) -> memoryview:
        """The snapshot's window (empty: none)."""
        start, end = self.window_span
        return memoryview(self.window)[start:end]


_decoder = snapshot_decoder(IndexMeta)

MetaSeal = Callable[[IndexMeta, MessageList], IndexMeta]
"""Seals a sealed session's index snapshot before it is encoded (plaintext values sealed),
given the snapshot state's live messages (for its window)."""

#: How a snapshot with a window ends: ``... digest || window || u32le(len(window)) || mark``.
WINDOW_MARK: Final = b"SLWIN1\n"
_WINDOW_TRAILER: Final = 4 + len(WINDOW_MARK)


def is_index_snapshot(data: bytes) -> bool:
    """Whether ``data`` is a format-4 snapshot (by its magic)."""
    return data.startswith(INDEX_MAGIC)


def encode_meta(meta: IndexMeta, key: bytes = b"") -> bytes:
    """Serialise ``meta`` with its digest (and its window, if any, after the digest)."""
    window = meta.window_view()
    if not window:
        return seal(INDEX_MAGIC, meta, key)
    bare = msgspec.structs.replace(meta, window=b"", window_span=(0, 0))
    trailer = len(window).to_bytes(4, "little") + WINDOW_MARK
    return b"".join((seal(INDEX_MAGIC, bare, key), window, trailer))


def split_window(data: bytes) -> tuple[bytes, tuple[int, int]]:
    """An index snapshot's bytes as (the snapshot with its digest, the span of its window
    in ``data``: empty when it has none)."""
    if not data.endswith(WINDOW_MARK) or len(data) < _WINDOW_TRAILER:
        return data, (0, 0)
    end = len(data) - _WINDOW_TRAILER
    cut = end - int.from_bytes(data[end : end + 4], "little")
    if cut < len(INDEX_MAGIC) + DIGEST_SIZE:
        raise SnapshotError("its window does not fit in it")
    return data[:cut], (cut, end)


def decode_meta(data: bytes, session: str, key: bytes = b"") -> IndexMeta:
    """Check and decode an index snapshot of ``session``; raise SnapshotError if unusable.

    The window (if any) is not checked here: it is sealed, and opens only if it is intact."""
    whole = data
    data, span = split_window(data)
    meta = unseal(
        data,
        magic=INDEX_MAGIC,
        version=INDEX_VERSION,
        session=session,
        key=key,
        decode=_decoder.decode,
    )
    if len(meta.record_digests) != _chunks(meta.records) * DIGEST_SIZE:
        raise SnapshotError("its message index digests do not match its record count")
    if len(meta.id_digests) != _chunks(meta.seq) * DIGEST_SIZE:
        raise SnapshotError("its id index digests do not match its seq")
    if len(meta.last_span) != (16 if meta.records % BLOCK else 0):
        raise SnapshotError("its last block's span digest does not match its record count")
    if any(not 0 <= a < b <= meta.records for a, b in meta.ranges):
        raise SnapshotError("a message range is outside its records")
    if span[1] > span[0]:
        meta.window, meta.window_span = whole, span
    else:
        meta.window, meta.window_span = b"", (0, 0)
    return meta


def _chunks(count: int) -> int:
    return (count + CHUNK - 1) // CHUNK


class IndexDamaged(SnapshotError):
    """A record file disagrees with the snapshot's digests (damaged, or rewritten meanwhile)."""


def log_events(files: IndexFiles, meta: IndexMeta, hash_key: bytes) -> list[Event]:
    """Every event up to ``meta``'s line, decoded and checked from the log itself (the way
    back when a record file is damaged)."""
    decoded = decode_log(files.read_log(0, meta.offset), key=hash_key)
    problem = decoded.bad or decoded.torn
    if problem is not None:
        raise CorruptLogError(files.where, problem.line, problem.reason)
    if decoded.header is None or decoded.header.key != meta.key or decoded.head != meta.head:
        raise CorruptLogError(files.where, 1, "the log no longer matches its snapshot")
    return decoded.events


class _Chunks:
    """Reads one record file chunk by chunk, each checked against the snapshot's digests."""

    def __init__(
        self, files: IndexFiles, name: IndexName, size: int, count: int, digests: bytes
    ) -> None:
        self.files, self.name, self.size, self.count = files, name, size, count
        self.digests = digests
        self.key = b""
        self._cache: dict[int, bytes] = {}

    def chunk(self, index: int) -> bytes:
        got = self._cache.get(index)
        if got is not None:
            return got
        first = index * CHUNK
        n = min(CHUNK, self.count - first)
        data = self.files.read(self.name, first * self.size, n * self.size)
        want = self.digests[index * DIGEST_SIZE : (index + 1) * DIGEST_SIZE]
        if len(data) != n * self.size or digest(data, self.key, b"sl-index") != want:
            raise IndexDamaged(f"{self.files.path(self.name)}: chunk {index} fails its digest")
        if len(self._cache) >= 16:
            self._cache.pop(next(iter(self._cache)))
        self._cache[index] = data
        return data

    def read(self, start: int, count: int) -> bytes:
        out: list[bytes] = []
        end = start + count
        pos = start
        while pos < end:
            index = pos // CHUNK
            chunk = self.chunk(index)
            lo = (pos - index * CHUNK) * self.size
            hi = (min(end, (index + 1) * CHUNK) - index * CHUNK) * self.size
            out.append(chunk[lo:hi])
            pos = (index + 1) * CHUNK
        return b"".join(out)


class FileMessages:
    """The message records of a snapshot, and the log they point into (an IndexSource)."""

    def __init__(self, files: IndexFiles, meta: IndexMeta, hash_key: bytes) -> None:
        self.where = files.where
        self.hash_key = hash_key
        self.count = meta.records
        self.last_span = meta.last_span
        self._files = files
        self._meta = meta
        #: The snapshot the records are of.
        self.meta = meta
        self._chunks = _Chunks(files, "index", RECORD.size, meta.records, meta.record_digests)
        self._chunks.key = hash_key
        self.opener: Callable[[MessageAppended], dict[str, Any]] | None = None

    def records(self, start: int, count: int) -> bytes:
        """Records ``start`` to ``start + count``, checked."""
        return self._chunks.read(start, count)

    def read(self, offset: int, length: int) -> bytes:
        """Log bytes by offset."""
        return self._files.read_log(offset, length)

    def all_messages(self) -> list[MessageAppended]:
        """Every message event the records stand for, decoded from the log, in order."""
        events = log_events(self._files, self._meta, self.hash_key)
        messages = [e for e in events if isinstance(e, MessageAppended)]
        if self.opener is not None:
            for message in messages:
                message.__dict__["_open"] = self.opener
        return messages


#: Id lookups answered by scanning the records before their digests are sorted (a writer
#: that retries a few ids never pays for the sort: 0.2-0.7 s at 1M events).
_SCANS: Final = 16


class FileColdIds:
    """The ids of events 1..``count``, from the id file (read whole on first use)."""

    def __init__(self, files: IndexFiles, meta: IndexMeta, hash_key: bytes) -> None:
        self.count = meta.seq
        self._files = files
        self._key = hash_key
        self._chunks = _Chunks(files, "ids", ID_RECORD, meta.seq, meta.id_digests)
        self._chunks.key = hash_key
        self._meta = meta
        self._data: bytes | None = None
        self._fallback: dict[str, int] | None = None
        #: The id digests as integers: sorted, plus those added since (see :meth:`_may_hold`).
        self._sorted: array[int] | None = None
        self._added: set[int] = set()
        self._scans = 0

    def _all(self) -> bytes:
        if self._data is None:
            self._data = self._chunks.read(0, self.count)
        return self._data

    def _may_hold(self, needle: bytes) -> bool:
        """Whether some record may have digest ``needle`` (False is exact: no record is
        missed). The first :data:`_SCANS` lookups say True (the caller scans the records);
        after that the digests are kept as a sorted array (8 bytes per event), so a new id
        costs a binary search, not a scan of every record (5 ms at 1M events)."""
        if self._sorted is None:
            self._scans += 1
            if self._scans <= _SCANS:
                return True
            self._sorted = array("Q", sorted(memoryview(self._all()).cast("Q")[::2]))
        value = int.from_bytes(needle, sys.byteorder)  # as the cast reads it
        if value in self._added:
            return True
        digests = self._sorted
        i = bisect.bisect_left(digests, value)
        return i < len(digests) and digests[i] == value

    def inherit(self, older: FileColdIds) -> None:
        """Take over what ``older`` (of an earlier snapshot of the same log, fewer events) has
        read, reading only the records after it: a writer that settles keeps its lookups."""
        if older._data is None or not 0 < older.count <= self.count:
            return
        try:
            new = self._chunks.read(older.count, self.count - older.count)
        except IndexDamaged:
            return
        self._data = older._data + new
        self._scans = older._scans
        if older._sorted is None:
            return
        added = older._added | set(memoryview(new).cast("Q")[::2])
        if len(added) > len(older._sorted) // 8 + 4096:  # merge now and then: lookups stay fast
            self._sorted = array("Q", sorted([*older._sorted, *added]))
            self._added = set()
        else:
            self._sorted = older._sorted  # never changed in place: sharing it is safe
            self._added = added

    def _from_log(self) -> dict[str, int]:
        if self._fallback is None:
            events = log_events(self._files, self._meta, self._key)
            self._fallback = {e.id: e.seq for e in events}
        return self._fallback

    def find(self, event_id: str) -> int | None:
        """The seq of ``event_id`` among the covered events (confirmed on its line), or None."""
        if self._fallback is not None:
            return self._fallback.get(event_id)
        try:
            data = self._all()
        except IndexDamaged:
            return self._from_log().get(event_id)
        needle = id_digest(event_id, self._key)
        if not self._may_hold(needle):
            return None
        pos = data.find(needle)
        while pos >= 0:
            if pos % ID_RECORD == 0:
                seq = pos // ID_RECORD + 1
                offset = int.from_bytes(data[pos + 8 : pos + 16], "little")
                got = self._event_at(offset)
                if got is not None and got.seq == seq and got.id == event_id:
                    return seq
            pos = data.find(needle, pos + 1)
        return None

    def _event_at(self, offset: int) -> _IdOnly | None:
        size = 4096
        while True:
            data = self._files.read_log(offset, size)
            end = data.find(b"\n")
            if end >= 0 or len(data) < size:
                break
            size *= 4
        try:
            return _id_decoder.decode(data[: end if end >= 0 else len(data)])
        except msgspec.DecodeError:
            return None

    def items(self) -> Iterator[tuple[str, int]]:
        """Every (id, seq), read from the log lines the records point at."""
        try:
            data = self._all()
        except IndexDamaged:
            yield from self._from_log().items()
            return
        for i in range(self.count):
            offset = int.from_bytes(data[i * ID_RECORD + 8 : i * ID_RECORD + 16], "little")
            got = self._event_at(offset)
            if got is not None:
                yield got.id, got.seq


class _IdOnly(msgspec.Struct):
    seq: int
    id: str


_id_decoder = msgspec.json.Decoder(_IdOnly)


def open_state(files: IndexFiles, meta: IndexMeta, hash_key: bytes) -> SessionState | None:
    """The state ``meta`` stands for, reading from ``files``; None if the files are too short."""
    if files.size("index") < meta.records * RECORD.size or files.size("ids") < meta.seq * 16:
        return None
    state = meta.state
    state.messages = MessageList.indexed(FileMessages(files, meta, hash_key), meta.ranges)
    state.ids = IdIndex(cold=FileColdIds(files, meta, hash_key))
    return state


def line_spans(data: bytes, start: int, count: int, base: int) -> list[tuple[int, int]]:
    """(offset, length) of the next ``count`` event lines of ``data`` from byte ``start``
    (a later segment's header between them is a line, but not an event: it is skipped);
    offsets are absolute (``data`` is the log from byte ``base``)."""
    spans: list[tuple[int, int]] = []
    find = data.find
    at_header = data.startswith
    pos = start
    while len(spans) < count:
        end = find(b"\n", pos)
        if not at_header(_HEADER_LINE, pos):
            spans.append((base + pos, end + 1 - pos))
        pos = end + 1
    return spans


def write_index(
    files: IndexFiles,
    *,
    header: Header,
    state: SessionState,
    anchor: Anchor,
    events: Sequence[Event],
    spans: Sequence[tuple[int, int]],
    base: IndexMeta | None,
    hash_key: bytes,
    seal: MetaSeal | None = None,
    log: bytes = b"",
    log_start: int = 0,
) -> bytes:
    """Write the records of ``events`` (whose lines are at ``spans``, absolute) and return the
    encoded snapshot of ``state`` at ``anchor``.

    ``base`` is the snapshot the events follow (None: they are the whole log). ``state`` is
    the fold of ``events`` onto it: its in-memory messages are among ``events``. ``seal``
    (a sealed session's) seals the snapshot's plaintext values before it is encoded, and
    its message records carry no content flags (see :func:`pack_record`). ``log`` is the log
    from byte ``log_start`` (absolute), decoded and chain-checked, holding every line of
    ``events`` and the lines from ``base``'s anchor on (the span digests are hashed from it).

    Raises:
        SnapshotError: a record cannot hold a value (a token count past 32 bits).
    """
    records = base.records if base is not None else 0
    new = _NewRecords(records, sealed=seal is not None)
    add = new.adder(hash_key)
    for event, (offset, length) in zip(events, spans, strict=True):
        add(event, event.id, offset, length, b"")
    return _finish(files, header, state, anchor, base, new, hash_key, seal, log, log_start)


class _NewRecords:
    """The records of the lines after a snapshot, as they are collected."""

    def __init__(self, records: int, *, sealed: bool = False) -> None:
        self.records = records
        self.sealed = sealed
        self.msg_out: list[bytes] = []
        self.id_out: list[bytes] = []
        self.ordinal_of: dict[int, int] = {}

    def adder(self, key: bytes) -> Callable[[Event | None, str, int, int, bytes], None]:
        """How a line is added (bound once per run of lines): its id record, and its message
        record when the event is a message. The call takes the event, its id, the line's
        offset and length and its hash (raw, or ``b""``: taken from the event)."""
        msg_out, id_out, ordinal_of = self.msg_out, self.id_out, self.ordinal_of
        records, sealed = self.records, self.sealed

        def add(
            event: Event | None,
            event_id: str,
            offset: int,
            length: int,
            h: bytes,
        ) -> None:
            if isinstance(event, MessageAppended):
                ordinal_of[event.seq] = records + len(msg_out)
                try:
                    msg_out.append(pack_record(event, offset, length, h, sealed=sealed))
                # A token count outside 32 bits (struct.error, not a ValueError), a message
                # that is not a JSON object (InvalidEventError, a ValueError: its role is read).
                except (struct.error, OverflowError, ValueError) as exc:
                    raise SnapshotError(f"message {event.seq} cannot be indexed: {exc}") from exc
            id_out.append(id_digest(event_id, key) + offset.to_bytes(8, "little"))

        return add

    def held_adder(self, key: bytes) -> Callable[[MessageAppended, int, int, bytes], None]:
        """How a plaintext message line the writer holds is added (bound once per run of
        lines): what :meth:`adder` does for it, inlined (a settling writer adds thousands at
        a time, in its appends' time). The call takes the event, the line's offset and
        length and its hash (raw)."""
        msg_out, id_out, ordinal_of = self.msg_out, self.id_out, self.ordinal_of
        base = self.records
        pack = RECORD.pack
        ids = id_hasher(key)
        roles = ROLES

        def add_held(event: MessageAppended, offset: int, length: int, h: bytes) -> None:
            message = event.message
            get = message.get
            role = get("role")
            flags = 0
            if get("_command"):
                flags = FLAG_COMMAND
            if get("_channel_delivery"):
                flags |= FLAG_DELIVERY
            if get("media"):
                flags |= FLAG_MEDIA
            if get("tool_calls"):
                flags |= FLAG_TOOL_CALLS
            if get("tool_call_id"):
                flags |= FLAG_TOOL_RESULT
            try:
                record = pack(
                    event.seq,
                    offset,
                    length,
                    event.tokens,
                    roles.get(role, 0) if isinstance(role, str) else 0,
                    flags,
                    h,
                    _NO_SPAN,
                )
            except (struct.error, OverflowError) as exc:  # a token count outside 32 bits
                raise SnapshotError(f"message {event.seq} cannot be indexed: {exc}") from exc
            ordinal_of[event.seq] = base + len(msg_out)
            msg_out.append(record)
            hasher = ids.copy()
            hasher.update(event.id.encode("utf-8", "surrogatepass"))
            id_out.append(hasher.digest() + offset.to_bytes(8, "little"))

        return add_held


def _finish(
    files: IndexFiles,
    header: Header,
    state: SessionState,
    anchor: Anchor,
    base: IndexMeta | None,
    new: _NewRecords,
    hash_key: bytes,
    seal: MetaSeal | None,
    log: bytes,
    log_start: int,
) -> bytes:
    records = new.records
    first_seq = base.seq + 1 if base is not None else 1
    msg_out, id_out, ordinal_of = new.msg_out, new.id_out, new.ordinal_of
    messages = state.messages
    ranges = list(messages.ranges) if messages.source is not None else []
    try:
        ordinals = [ordinal_of[event.seq] for event in messages.in_memory]
    except KeyError as exc:
        raise SnapshotError(f"message {exc.args[0]} is not among the indexed lines") from None
    if ordinals and ordinals[-1] - ordinals[0] == len(ordinals) - 1:
        # Ordinals rise with seq: first to last with no gap is one run (the usual case).
        ranges.append((ordinals[0], ordinals[-1] + 1))
    else:
        ranges += [(ordinal, ordinal + 1) for ordinal in ordinals]
    # No new message record: the last block and its digest are the base's (a digest runs to
    # its last record's line, never over the lines after it: a read costs the window).
    last_span = base.last_span if base is not None else b""
    if msg_out:
        carry = None
        if records % BLOCK:
            if base is None:
                raise SnapshotError("records continue a block of no snapshot")
            carry = _carry_block(files, base, hash_key)
        try:
            last_span = fill_spans(msg_out, records, log, log_start, hash_key, carry)
        except ValueError as exc:
            raise SnapshotError(f"the message records cannot be digested: {exc}") from None
    record_digests = _extend(
        files,
        "index",
        RECORD.size,
        records,
        base.record_digests if base else b"",
        msg_out,
        hash_key,
    )
    id_digests = _extend(
        files, "ids", ID_RECORD, first_seq - 1, base.id_digests if base else b"", id_out, hash_key
    )
    bare = msgspec.structs.replace(state, messages=MessageList(), ids=IdIndex())
    meta = make_anchored(IndexMeta, header, bare, anchor)
    meta.ranges = merge_ranges(ranges)
    meta.records = records + len(msg_out)
    meta.record_digests = record_digests
    meta.last_span = last_span
    meta.id_digests = id_digests
    return encode_meta(meta if seal is None else seal(meta, messages), hash_key)


_MESSAGE_TAG: Final = b'{"type":"message",'
_NO_SPAN: Final = bytes(16)
_encode = msgspec.json.Encoder().encode


def _carry_block(files: IndexFiles, base: IndexMeta, key: bytes) -> tuple[Any, int]:
    """The span hasher of ``base``'s partial last block, over the log from that block's first
    line to ``base``'s line end, with that end: the bytes to its last record's line end
    checked against ``base.last_span``, the lines after it (to ``base``'s line) against the
    chain from that record's hash to ``base.head``.

    Raises:
        SnapshotError: the log changed under the records (or they are damaged).
    """
    first = base.records - base.records % BLOCK
    chunks = _Chunks(files, "index", RECORD.size, base.records, base.record_digests)
    chunks.key = key
    recs = chunks.read(first, base.records - first)
    block_off = int.from_bytes(recs[8:16], "little")
    _, offset, length, _, _, _, h, _ = RECORD.unpack(recs[-RECORD.size :])
    cut = offset + length - block_off
    data = files.read_log(block_off, base.offset - block_off)
    hasher = span_hasher(key).copy()
    hasher.update(memoryview(data)[:cut])
    after = verify_chain(data[cut:], key=key, prev_h=h.hex())
    if (
        len(data) != base.offset - block_off
        or hasher.digest()[:16] != base.last_span
        or after.problems
        or after.head != base.head
    ):
        raise SnapshotError("the log changed under the message records it extends")
    hasher.update(memoryview(data)[cut:])
    return hasher, base.offset


#: How a later segment's header line starts (an event's line never does).
_HEADER_LINE: Final = SEGMENT_HEADER_START[1:]
_decode_message = msgspec.json.Decoder(MessageAppended).decode


def _ordinals(files: IndexFiles, meta: IndexMeta, since: int, key: bytes) -> dict[int, int]:
    """seq -> ordinal of the message records ``since`` to ``meta.records`` (digest-checked)."""
    chunks = _Chunks(files, "index", RECORD.size, meta.records, meta.record_digests)
    chunks.key = key
    raw = chunks.read(since, meta.records - since)
    return {rec[0]: since + i for i, rec in enumerate(RECORD.iter_unpack(raw))}


def extend_from_state(
    files: IndexFiles,
    meta: IndexMeta | None,
    state: SessionState,
    tail: bytes,
    hash_key: bytes,
    since: int = 0,
    seal: MetaSeal | None = None,
    open_header: Callable[[Header], Header] | None = None,
) -> bytes | None:
    """The snapshot of a writer's ``state``, opened from ``meta`` (which is still the stored
    snapshot; None: opened without one), written from what the writer holds: the lines since
    ``meta`` are only split and, for lines the writer does not hold, hash-checked and decoded.
    ``tail`` is the log from ``meta.line_start`` (from byte 0 without ``meta``). ``meta`` may
    also be a later snapshot than the state opened from (another writer extended it; it must
    not pass the state's seq): then ``since`` is the record count of the one it opened from.
    None: the state does not line up with the log (take the general path). ``seal`` is as for
    :func:`write_index` (a sealed session's); ``open_header`` opens the header read from the
    log's first line (without ``meta``), as the snapshot keeps it opened until it is sealed.

    A line the writer holds is recognised by its bytes: the writer keeps with each message
    event it writes the line it hashed (see ``HELD_LINE``), and a line equal to it is vouched
    for without hashing it against the chain again (an event kept without its line is
    compared with the writer's own encoding of it, or else checked like any line). The span
    digests hash the log's bytes, so a line changed since it was written is never vouched for.
    """
    if meta is None:
        header_end = tail.find(b"\n")
        decoded = decode_log(tail[: header_end + 1], key=hash_key) if header_end >= 0 else None
        header = decoded.header if decoded is not None else None
        if header is None or header.key != state.key or header.seq != 0 or not header.h:
            return None
        if open_header is not None:
            header = open_header(header)
        first_seq, records, line_no = 1, 0, 1
        prev, prev_prev, base_start = header.h, "", 0
        pos = header_end + 1
    else:
        header = meta.header
        first_seq, records, line_no = meta.seq + 1, meta.records, meta.line_no
        prev, prev_prev, base_start = meta.head, meta.prev_head, meta.line_start
        pos = meta.offset - meta.line_start
    count = state.seq - first_seq + 1
    if count <= 0:
        return None
    # The messages the writer holds, oldest first (seq rises along the list): walked beside
    # the lines, the next one due at ``held_at``.
    in_memory = state.messages.in_memory
    held_at = 0
    while held_at < len(in_memory) and in_memory[held_at].seq < first_seq:
        held_at += 1
    held_next = in_memory[held_at].seq if held_at < len(in_memory) else -1
    id_of: dict[int, str] | None = None  # built when a line the writer does not hold needs it
    new = _NewRecords(records, sealed=seal is not None)
    if meta is not None and held_at:
        # Another writer indexed lines this state holds (it opened from an older snapshot):
        # their records are in the file already; find the held messages' ordinals there.
        new.ordinal_of.update(_ordinals(files, meta, since, hash_key))
    line_start = base_start
    find = tail.find
    headers = 0
    seq = first_seq - 1
    at = tail.startswith
    encode, replace = _encode, msgspec.structs.replace
    add = new.adder(hash_key)
    add_held = None if seal is not None else new.held_adder(hash_key)
    while seq < state.seq:
        if seq + 1 == held_next:
            # The usual case: the next line is one the writer wrote and holds, its bytes the
            # ones it kept (then they are vouched for: it hashed them). Its newline ends it.
            held = in_memory[held_at]
            mine = held.__dict__.get(HELD_LINE)
            if mine is not None and at(mine, pos):
                seq = held_next
                held_at += 1
                held_next = in_memory[held_at].seq if held_at < len(in_memory) else -1
                size = len(mine)
                line_start = base_start + pos
                raw = bytes.fromhex(held.h)
                if add_held is None:  # sealed: its role is read from the envelope
                    add(held, held.id, line_start, size, raw)
                else:
                    add_held(held, line_start, size, raw)
                prev_prev, prev = prev, held.h
                pos += size
                continue
        end = find(b"\n", pos)
        if end < 0:
            return None
        if at(_HEADER_LINE, pos):
            # A later segment's header: a link in the chain that does not advance seq.
            line = tail[pos : end + 1]
            h = line[-35:-3].decode("ascii", "replace")
            if chain_hash(prev, line[: -SUFFIX_LEN - 1], hash_key) != h:
                return None
            prev = h
            headers += 1
            pos = end + 1
            continue
        seq += 1
        if seq == held_next:
            held = in_memory[held_at]
            held_at += 1
            held_next = in_memory[held_at].seq if held_at < len(in_memory) else -1
            # A message line this writer holds without its bytes (or with others): its hash
            # covers its id; its bytes must be the writer's own encoding of it, or else check
            # against the chain like any line.
            if not at(held.h.encode(), end - 34):
                return None  # the writer holds another message at this seq
            mine = encode(replace(held, h=""))
            if not (end - SUFFIX_LEN - pos == len(mine) - 1 and at(mine[:-1], pos)) and (
                chain_hash(prev, tail[pos : end - SUFFIX_LEN], hash_key) != held.h
            ):
                return None
            line_start = base_start + pos
            raw = bytes.fromhex(held.h)
            if add_held is None:  # sealed: its role is read from the envelope
                add(held, held.id, line_start, end + 1 - pos, raw)
            else:
                add_held(held, line_start, end + 1 - pos, raw)
            prev_prev, prev = prev, held.h
            pos = end + 1
            continue
        event: Event | None = None
        line = tail[pos : end + 1]
        h = line[-35:-3].decode("ascii", "replace")
        if chain_hash(prev, line[: -SUFFIX_LEN - 1], hash_key) != h:
            return None
        if line.startswith(_MESSAGE_TAG):
            try:
                event = _decode_message(line)
            except msgspec.DecodeError:
                return None
            if event.seq != seq or event.h != h:
                return None
        if id_of is None:
            recent = state.ids.recent.items()
            id_of = {s: event_id for event_id, s in recent if s >= first_seq}
        event_id = id_of.get(seq)
        if event_id is None:
            try:
                event_id = _id_decoder.decode(tail[pos : end + 1]).id
            except msgspec.DecodeError:
                return None
        line_start = base_start + pos
        raw = bytes.fromhex(h)
        add(event, event_id, line_start, end + 1 - pos, raw)
        prev_prev, prev = prev, h
        pos = end + 1
    if prev != state.head:
        return None
    anchor = Anchor(
        seq=state.seq,
        head=prev,
        prev_head=prev_prev,
        line_start=line_start,
        offset=base_start + pos,
        line_no=line_no + count + headers,
    )
    return _finish(files, header, state, anchor, meta, new, hash_key, seal, tail, base_start)


def _extend(
    files: IndexFiles,
    name: IndexName,
    size: int,
    count: int,
    digests: bytes,
    new: list[bytes],
    key: bytes,
) -> bytes:
    """Write ``new`` records after the ``count`` there are; return the digests of all chunks."""
    partial = count % CHUNK
    head = b""
    kept = digests
    if partial:
        start = count - partial
        head = files.read(name, start * size, partial * size)
        want = digests[-DIGEST_SIZE:]
        if len(head) != partial * size or digest(head, key, b"sl-index") != want:
            raise SnapshotError(f"the {name} file disagrees with the snapshot it extends")
        kept = digests[:-DIGEST_SIZE]
    data = b"".join(new)
    if data:
        files.write(name, count * size, data)
    tail = head + data
    out = [kept]
    for i in range(0, len(tail), CHUNK * size):
        out.append(digest(tail[i : i + CHUNK * size], key, b"sl-index"))
    return b"".join(out)

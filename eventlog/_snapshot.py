"""Snapshots: a session's folded state at seq N, anchored to the log line that ends at N (pure).

A snapshot file is ``MAGIC || body || digest`` where ``body`` is the msgpack of
:class:`Snapshot` and ``digest`` is a 16-byte blake2b of ``MAGIC || body`` (keyed with the
store's secret when it has one, so only key holders can forge a snapshot). This module owns
that sealing, and the checks of the fields every format shares (:class:`Anchored`), for the
index snapshots of :mod:`eventlog._indexsnap` too.

Invariants:
- A snapshot never wins over the log. It is used only when its digest is right, it names the
  session being opened, and the log line ending at ``offset`` is exactly line ``line_no``: its
  bytes end in a newline, its hash field equals ``head``, it chains from ``prev_head`` (the
  hash is recomputed over its bytes), and its ``seq`` equals ``seq``. Anything else is stale or
  corrupt, and the caller reads the whole log instead.
- The state in a snapshot was folded from decoded log lines (never from a writer's in-memory
  objects), so restoring it gives exactly what folding the log gives.
- Opening checks the lines after the snapshot like any other line; corruption *before* the
  snapshot is found by ``verify`` and ``recover``, which read everything.
- Live messages are stored apart from the rest of the state, as their JSON bytes (msgpack
  ``bin``), and decoded into dicts only when read: restoring a long session costs a copy of
  each message's bytes, not a parse (format version 2; version 1 snapshots are rebuilt).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from hashlib import blake2b
from typing import Final, Literal, TypeVar

import msgspec

from ._codec import Decoded, LineDecoder, chain_hash, split_hash
from ._events import Header, MessageAppended
from ._fold import SessionState
from ._idindex import IdIndex
from ._msgindex import MessageList
from ._segments import SEGMENT_HEADER_START

SNAPSHOT_FORMAT: Final = "sessionlog-snapshot"
SNAPSHOT_VERSION: Final = 2
_MAGIC: Final = b"SLSNAP1\n"
#: Size of every snapshot digest (the file's, and the index record files' chunk digests).
DIGEST_SIZE: Final = 16

SnapshotHealth = Literal["missing", "valid", "stale", "corrupt"]


class Anchored(msgspec.Struct, kw_only=True):
    """What every snapshot format stores first: whose state it is, where in the log it is
    anchored, and the state (what the anchor checks read from a snapshot of either format)."""

    format: str = SNAPSHOT_FORMAT
    version: int = SNAPSHOT_VERSION
    key: str
    header: Header
    #: Seq and chain hash of the last event folded, and the hash of the line before it.
    seq: int
    head: str
    prev_head: str
    #: Byte offsets of that line in the log: where it starts and just past its newline.
    line_start: int
    offset: int
    #: Its 1-based line number.
    line_no: int
    #: The folded state (what each format keeps apart is said by its subclass).
    state: SessionState


class Snapshot(Anchored, kw_only=True):
    """The folded state of one session after line ``line_no`` (event ``seq``) of its log;
    its live messages are kept apart, in ``messages``."""

    messages: list[StoredMessage] = []


class StoredMessage(msgspec.Struct, array_like=True, gc=False):
    """A live message in a snapshot: its event's fields and its JSON bytes (decoded on use)."""

    seq: int
    ts: datetime
    id: str
    h: str
    tokens: int
    body: bytes


class _SeqOnly(msgspec.Struct):
    seq: int = -1


def _enc_hook(obj: object) -> object:
    if isinstance(obj, MessageList):
        return []
    if isinstance(obj, IdIndex):
        return dict(obj.items())
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def _dec_hook(kind: type, obj: object) -> object:
    if kind is MessageList:
        return MessageList()
    if kind is IdIndex:
        if type(obj) is dict and not obj:  # an index snapshot's (its ids are in the id file)
            return IdIndex({})
        return IdIndex(msgspec.convert(obj, dict[str, int]))
    raise NotImplementedError(f"cannot decode {kind.__name__}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_seq_decoder = msgspec.json.Decoder(_SeqOnly)


class SnapshotError(ValueError):
    """A snapshot that cannot be used (bad digest, bad encoding, another session's)."""


def digest(data: bytes | memoryview, key: bytes, person: bytes = b"sl-snapshot") -> bytes:
    """The keyed digest that seals a snapshot (``person`` tells the index chunks' apart)."""
    return blake2b(data, digest_size=DIGEST_SIZE, key=key, person=person).digest()


def seal(magic: bytes, snapshot: Anchored, key: bytes) -> bytes:
    """``magic || msgpack(snapshot) || digest``: a snapshot file of either format."""
    body = magic + _encoder.encode(snapshot)
    return body + digest(body, key)


S = TypeVar("S", bound=Anchored)


def snapshot_decoder(kind: type[S]) -> msgspec.msgpack.Decoder[S]:
    """A decoder for a snapshot format (the state's message list and ids as :func:`seal`
    writes them)."""
    return msgspec.msgpack.Decoder(kind, dec_hook=_dec_hook)


def unseal(
    data: bytes,
    *,
    magic: bytes,
    version: int,
    session: str,
    key: bytes,
    decode: Callable[[memoryview], S],
) -> S:
    """Check a sealed snapshot of ``session`` and decode its body with ``decode``.

    Raises:
        SnapshotError: bad magic, digest or encoding, another format or version, another
            session's, or an anchor that disagrees with its own state.
    """
    if len(data) < len(magic) + DIGEST_SIZE or not data.startswith(magic):
        raise SnapshotError("not a snapshot of this format (bad magic or too short)")
    body = memoryview(data)[:-DIGEST_SIZE]
    if digest(body, key) != data[-DIGEST_SIZE:]:
        raise SnapshotError("digest mismatch (damaged, or written with another key)")
    try:
        snapshot = decode(body[len(magic) :])
    except (msgspec.DecodeError, NotImplementedError, ValueError, TypeError) as exc:
        # Invalid UTF-8 in a sealed string is a UnicodeDecodeError, not a DecodeError: an
        # unusable snapshot either way (the log is read instead), never a crash.
        raise SnapshotError(f"undecodable: {exc}") from exc
    if snapshot.format != SNAPSHOT_FORMAT or snapshot.version != version:
        raise SnapshotError(f"format {snapshot.format!r} v{snapshot.version} is not readable")
    if snapshot.key != session or snapshot.state.key != session:
        raise SnapshotError(f"it is a snapshot of session {snapshot.key!r}")
    if snapshot.state.seq != snapshot.seq or snapshot.state.head != snapshot.head:
        raise SnapshotError("its state disagrees with its own anchor")
    if not 0 <= snapshot.line_start < snapshot.offset:
        raise SnapshotError("bad anchor offsets")
    return snapshot


def encode_snapshot(snapshot: Snapshot, key: bytes = b"") -> bytes:
    """Serialise ``snapshot`` with its digest.

    Raises:
        msgspec.EncodeError: a message value msgpack cannot hold (an integer beyond 64 bits).
    """
    state = snapshot.state
    stored = [
        StoredMessage(m.seq, m.ts, m.id, m.h, m.tokens, bytes(m.body)) for m in state.messages
    ]
    flat = msgspec.structs.replace(
        snapshot, state=msgspec.structs.replace(state, messages=[]), messages=stored
    )
    return seal(_MAGIC, flat, key)


class _Anchor(msgspec.Struct):
    """The anchor fields of a stored snapshot (its state is skipped, not decoded)."""

    key: str = ""
    seq: int = -1
    head: str = ""


_anchor = msgspec.msgpack.Decoder(_Anchor)


def _peek(data: bytes, magic: bytes = _MAGIC) -> _Anchor | None:
    if not data.startswith(magic) or len(data) < len(magic) + DIGEST_SIZE:
        return None
    try:
        anchor = _anchor.decode(memoryview(data)[len(magic) : -DIGEST_SIZE])
    except msgspec.DecodeError:
        return None
    return anchor if anchor.seq >= 0 else None


def peek_snapshot(data: bytes, session: str) -> tuple[int, str] | None:
    """The seq and head a stored snapshot of ``session`` records, read without its state.

    Cheap, and unchecked: the digest is not verified (a damaged snapshot can at worst give a
    false alarm when compared with the log). None when ``data`` cannot be read this way.
    """
    anchor = _peek(data)
    if anchor is None or anchor.key != session or not anchor.head:
        return None
    return anchor.seq, anchor.head


def snapshot_seq(data: bytes, magic: bytes = _MAGIC) -> int | None:
    """The seq a stored snapshot was taken at, read like :func:`peek_snapshot` (None if
    unreadable); ``magic``: its format's (an index snapshot's, say)."""
    anchor = _peek(data, magic)
    return None if anchor is None else anchor.seq


def decode_snapshot(data: bytes, session: str, key: bytes = b"") -> Snapshot:
    """Check and decode a snapshot of ``session``; raise :class:`SnapshotError` if unusable."""
    return unseal(
        data, magic=_MAGIC, version=SNAPSHOT_VERSION, session=session, key=key, decode=_decode
    )


_decoder = snapshot_decoder(Snapshot)


def _decode(body: memoryview) -> Snapshot:
    # Decoding allocates one dict and struct per message: pausing the cyclic collector while
    # they are built saves about a quarter of the time, and nothing here can form a cycle.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        snapshot = _decoder.decode(body)
        snapshot.state.messages = MessageList(
            MessageAppended(
                seq=m.seq, ts=m.ts, id=m.id, h=m.h, tokens=m.tokens, body=msgspec.Raw(m.body)
            )
            for m in snapshot.messages
        )
        snapshot.messages = []
    finally:
        if paused:
            gc.enable()
    return snapshot


def check_anchor(snapshot: Anchored, tail: bytes, key: bytes = b"") -> str | None:
    """Why the log disagrees with ``snapshot`` (None if it agrees).

    ``tail`` is the log from ``snapshot.line_start`` on.
    """
    length = snapshot.offset - snapshot.line_start
    if len(tail) < length:
        return f"the log ends before byte {snapshot.offset} (it was cut or replaced)"
    line = tail[:length]
    if not line.endswith(b"\n"):
        return f"no line ends at byte {snapshot.offset}"
    parts = split_hash(line[:-1])
    if parts is None or parts[1] != snapshot.head:
        return f"the line ending at byte {snapshot.offset} is not event {snapshot.seq}"
    body, h = parts
    if chain_hash(snapshot.prev_head, body, key) != h:
        return f"the line ending at byte {snapshot.offset} does not chain from the snapshot"
    try:
        seq = _seq_decoder.decode(line).seq
    except msgspec.DecodeError:
        return f"the line ending at byte {snapshot.offset} is not JSON"
    if seq != snapshot.seq:
        return f"the line ending at byte {snapshot.offset} has seq {seq}, not {snapshot.seq}"
    return None


def resume(snapshot: Anchored, tail: bytes, key: bytes = b"") -> Decoded:
    """Decode the lines after ``snapshot`` (``tail`` is the log from ``snapshot.line_start``).

    The caller has checked the anchor. Offsets and line numbers in the result are absolute;
    ``header`` is the snapshot's and ``events`` holds only the events after it.
    """
    dec = LineDecoder(
        key=key,
        prev_h=snapshot.head,
        last_seq=snapshot.seq,
        expect_header=False,
        first_line=snapshot.line_no + 1,
        offset=snapshot.offset,
    )
    events = dec.feed(tail[snapshot.offset - snapshot.line_start :])
    return dec.decoded(events, snapshot.header)


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where the last valid line of a decoded log sits (what a new snapshot records)."""

    seq: int
    head: str
    prev_head: str
    line_start: int
    offset: int
    line_no: int


def anchor_of(
    data: bytes, data_start: int, decoded: Decoded, before: Anchor | None
) -> Anchor | None:
    """The anchor at the end of ``decoded``, or None when it holds no event.

    ``data`` is the log from byte ``data_start``; ``before`` is the anchor the decoding resumed
    from (None when it decoded from the header, and ``data_start`` is 0). In a log in segments
    the anchor is the last *event's* line: a later segment's header after it (a roll with
    nothing after it yet) is not anchored on, and an event right after such a header chains
    from that header's hash.
    """
    events = decoded.events
    if not events:
        return None
    end = decoded.valid_length - data_start
    start = data.rfind(b"\n", 0, end - 1) + 1
    while start > 0 and data.startswith(_HEADER_LINE, start):
        end = start
        start = data.rfind(b"\n", 0, end - 1) + 1
    last = events[-1]
    prev = decoded.links.get(last.seq - 1)
    if prev is not None:
        pass
    elif len(events) >= 2:
        prev = events[-2].h
    elif before is not None:
        prev = before.head
    else:
        assert decoded.header is not None
        prev = decoded.header.h
    if before is not None:
        line_no = before.line_no + data.count(b"\n", before.offset - data_start, end)
    else:
        line_no = data.count(b"\n", 0, end)
    return Anchor(
        seq=last.seq,
        head=last.h,
        prev_head=prev,
        line_start=data_start + start,
        offset=data_start + end,
        line_no=line_no,
    )


#: How a segment header's line starts (an event's line never does: its tag comes first).
_HEADER_LINE: Final = SEGMENT_HEADER_START[1:]


def make_snapshot(header: Header, state: SessionState, anchor: Anchor) -> Snapshot:
    """A snapshot of ``state`` (folded up to ``anchor``)."""
    return make_anchored(Snapshot, header, state, anchor)


def make_anchored(kind: type[S], header: Header, state: SessionState, anchor: Anchor) -> S:
    """A snapshot of format ``kind`` of ``state`` (folded up to ``anchor``), its other fields
    at their defaults."""
    return kind(
        key=header.key,
        header=header,
        seq=anchor.seq,
        head=anchor.head,
        prev_head=anchor.prev_head,
        line_start=anchor.line_start,
        offset=anchor.offset,
        line_no=anchor.line_no,
        state=state,
    )


def anchor_from(snapshot: Anchored) -> Anchor:
    """The anchor a snapshot records."""
    return Anchor(
        seq=snapshot.seq,
        head=snapshot.head,
        prev_head=snapshot.prev_head,
        line_start=snapshot.line_start,
        offset=snapshot.offset,
        line_no=snapshot.line_no,
    )

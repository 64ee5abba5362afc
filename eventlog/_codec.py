"""Line codec and hash chain (pure: bytes in, events out, no I/O).

A line is one JSON object, UTF-8, ending in ``\\n``, whose last field is a fixed-width hash::

    {"type":"message","seq":3,...,"h":"<32 lowercase hex>"}\\n

``h = blake2b-128(prev_h || body)`` where ``prev_h`` is the previous line's ``h`` as its 32 ASCII
hex characters (32 ``"0"`` for the header) and ``body`` is this line's bytes before ``,"h":"``.
With a secret key the blake2b is keyed, so only key holders can forge a valid chain. Because the
hash field has a fixed width at a fixed place, a reader checks a line without re-encoding it.

Decoding is incremental: :class:`LineDecoder` is fed bytes and returns checked records; at the
end an incomplete or unreadable last line is a :class:`TornTail` result, never an exception. A
bad line followed by more lines is a :class:`BadLine`: the reader stops there.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any, Final

import msgspec

from ._errors import InvalidEventError
from ._events import (
    FORMAT_NAME,
    Event,
    Header,
    KnownEvent,
    MessageAppended,
    UnknownEvent,
)
from ._jsonbytes import escape_unsafe
from ._segments import check_next, segment_number
from ._values import LINE_MAX_DEPTH, line_too_deep

ZERO_HASH: Final = "0" * 32
_GC_PAUSE_BYTES: Final = 1 << 20
_HASH_OPEN: Final = b',"h":"'
_HASH_CLOSE: Final = b'"}'
_HEADER_START: Final = b'{"type":"header"'
#: Bytes after the body: ``,"h":"`` + 32 hex + ``"}`` (the newline not included).
SUFFIX_LEN: Final = len(_HASH_OPEN) + 32 + len(_HASH_CLOSE)

_encoder = msgspec.json.Encoder()
_event_decoder: msgspec.json.Decoder[KnownEvent] = msgspec.json.Decoder(KnownEvent)
_header_decoder = msgspec.json.Decoder(Header)
_raw_decoder = msgspec.json.Decoder(dict[str, Any])
_unknown_decoder = msgspec.json.Decoder(UnknownEvent)
# What decoding a hostile (but correctly chained) line can raise besides msgspec's own errors:
# nesting past msgspec's depth limit, and invalid UTF-8 in an object key.
_UNREADABLE: Final = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)


def normalize_key(hash_key: bytes | str | None) -> bytes:
    """Return the blake2b key bytes for a secret given as bytes or text (None: unkeyed).

    Raises:
        InvalidEventError: an empty secret (it would silently mean an unkeyed store).
    """
    if hash_key is None:
        return b""
    if not isinstance(hash_key, str | bytes | bytearray):
        raise InvalidEventError(f"hash_key must be bytes or str, not {type(hash_key).__name__}")
    if not hash_key:
        raise InvalidEventError("hash_key is empty; pass None for an unkeyed store")
    if isinstance(hash_key, str):
        hash_key = hash_key.encode()
    hash_key = bytes(hash_key)
    if len(hash_key) > 64:
        # blake2b keys are at most 64 bytes; longer secrets are condensed first.
        hash_key = blake2b(hash_key, digest_size=64).digest()
    return hash_key


#: A fresh hasher per key, copied for every line (cheaper than keying a new one each time).
_HASHERS: dict[bytes, blake2b] = {}


def _new_hasher(key: bytes) -> blake2b:
    base = blake2b(digest_size=16, key=key)
    if len(_HASHERS) < 64:  # a process uses a key or two; never grow without bound
        _HASHERS[key] = base
    return base


def keyed_hasher(key: bytes) -> blake2b:
    """The fresh (keyed) hasher of ``key``, shared: copy it, never update it."""
    return _HASHERS.get(key) or _new_hasher(key)


def chain_hash(prev_h: str, body: bytes | memoryview, key: bytes = b"") -> str:
    """Return the chained hash of ``body`` after ``prev_h`` (keyed when ``key`` is non-empty)."""
    hasher = (_HASHERS.get(key) or _new_hasher(key)).copy()
    hasher.update(prev_h.encode("ascii"))
    hasher.update(body)
    return hasher.hexdigest()


def encode_line(event: Header | KnownEvent, prev_h: str, key: bytes = b"") -> tuple[bytes, str]:
    """Encode ``event`` as one line chained after ``prev_h``; return the line and its hash.

    Raises:
        msgspec.EncodeError: a value in the event is not JSON-serialisable.
    """
    if event.h:
        event = msgspec.structs.replace(event, h="")
    try:
        encoded = _encoder.encode(event)
    except UnicodeEncodeError as exc:  # a lone surrogate: not text JSON can carry
        raise msgspec.EncodeError(f"a string is not valid Unicode: {exc}") from exc
    body = encoded[:-1]  # the hash field closes the object
    if not (isinstance(event, MessageAppended) and event.id.isascii()):
        # A message body was escaped when it was encoded, and its other fields are ASCII.
        body = escape_unsafe(body)
    # ``chain_hash``, inlined: this runs once per append.
    hasher = (_HASHERS.get(key) or _new_hasher(key)).copy()
    hasher.update(prev_h.encode("ascii"))
    hasher.update(body)
    h = hasher.hexdigest()
    return b"".join((body, _HASH_OPEN, h.encode("ascii"), _HASH_CLOSE, b"\n")), h


def split_hash(line: bytes) -> tuple[bytes, str] | None:
    """Split a line (without its newline) into body and hash, or None if it has no hash field."""
    if (
        len(line) < SUFFIX_LEN + 2
        or line[-SUFFIX_LEN : -SUFFIX_LEN + len(_HASH_OPEN)] != _HASH_OPEN
    ):
        return None
    if line[-2:] != _HASH_CLOSE:
        return None
    h = line[-34:-2]
    try:
        text = h.decode("ascii")
    except UnicodeDecodeError:
        return None
    if len(text) != 32 or text.strip("0123456789abcdef"):
        return None
    return line[:-SUFFIX_LEN], text


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong at one line of a log: ``line`` is 1-based, ``offset`` its first byte."""

    line: int
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class TornTail:
    """An incomplete or unreadable last line, starting at byte ``offset`` (line ``line``)."""

    line: int
    offset: int
    data: bytes
    reason: str


@dataclass(slots=True)
class Decoded:
    """What a complete buffer decoded to: the valid prefix and what stopped it, if anything."""

    header: Header | None
    events: list[Event]
    #: Bytes of the valid prefix (header and events), the offset where the next line goes.
    valid_length: int
    #: The last valid line's hash.
    head: str
    #: A bad line followed by more data: the log is corrupt from here (not a torn tail).
    bad: Problem | None = None
    torn: TornTail | None = None
    lines: int = 0
    #: The newest format version any header read says (a later segment's may be newer).
    version: int = 0
    #: The segment the last valid line is in (1 for a log not in segments; 0: not known).
    segment: int = 0
    #: The hash of each later segment's header, by the seq it follows (a head may be one).
    links: dict[int, str] = field(default_factory=dict)

    @property
    def last_seq(self) -> int:
        """The seq of the last valid event (the header's seq when there is none)."""
        if self.events:
            return self.events[-1].seq
        return self.header.seq if self.header is not None else 0


class LineDecoder:
    """Checks and decodes lines fed to it in any chunks: hash chain, JSON, contiguous seq.

    ``expect_header`` makes the first line a :class:`Header`. ``prev_h`` and ``last_seq`` let a
    decoder resume after a snapshot or a previous read. After the first bad line, :meth:`feed`
    returns nothing more; :attr:`bad` holds the problem.
    """

    def __init__(
        self,
        *,
        key: bytes = b"",
        prev_h: str = ZERO_HASH,
        last_seq: int = 0,
        expect_header: bool = True,
        first_line: int = 1,
        offset: int = 0,
    ) -> None:
        self.key = key
        self.head = prev_h
        self.last_seq = last_seq
        self.expect_header = expect_header
        self.header: Header | None = None
        self.line_no = first_line - 1
        #: Offset just past the last complete valid line.
        self.offset = offset
        self.bad: Problem | None = None
        #: The segment the last line is in (0: not known, in a tail read without its header).
        self.segment = 0
        self.version = 0
        self.links: dict[int, str] = {}
        self._buf = b""
        self._more_after_bad = False

    def feed(self, data: bytes) -> list[Event]:
        """Consume ``data``; return the events of every complete, valid line in it."""
        if self.bad is not None:
            # Note that data follows the bad line: ``finish`` must not take it for a torn tail,
            # however the data was chunked.
            self._more_after_bad = self._more_after_bad or bool(data)
            return []
        buf = self._buf + data if self._buf else data
        view = memoryview(buf)  # lines are checked and decoded without being copied
        out: list[Event] = []
        start = 0
        find = buf.find
        key = self.key
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            self.line_no += 1
            result = self._check(buf, view, start, end, key)
            if isinstance(result, str):
                self.bad = Problem(self.line_no, self.offset, result)
                self._buf = buf[start:]
                return out
            if result is not None:
                out.append(result)
            self.offset += end + 1 - start
            start = end + 1
        self._buf = buf[start:]
        return out

    @property
    def pending(self) -> bytes:
        """Bytes after the last valid line: an incomplete line, or from the bad line on."""
        return self._buf

    def decoded(self, events: list[Event], header: Header | None = None) -> Decoded:
        """Finish (see :meth:`finish`) and give the result: ``events`` are what :meth:`feed`
        returned; ``header`` is the decoder's own unless given (a tail decoded after a snapshot)."""
        torn = self.finish()
        return Decoded(
            header=self.header if header is None else header,
            events=events,
            valid_length=self.offset,
            head=self.head,
            bad=self.bad,
            torn=torn,
            lines=self.line_no,
            version=self.version,
            segment=self.segment,
            links=self.links,
        )

    def finish(self) -> TornTail | None:
        """Call at the end of the data: the unfinished or unreadable tail, if there is one.

        A bad line is a torn tail only when nothing but (at most) its own newline follows it;
        otherwise :attr:`bad` stays set and this returns None.
        """
        if not self._buf:
            return None
        if self.bad is not None:
            first_nl = self._buf.find(b"\n")
            if first_nl != len(self._buf) - 1 or self._more_after_bad:
                return None
            torn = TornTail(self.bad.line, self.bad.offset, self._buf, self.bad.reason)
            self.bad = None
            return torn
        return TornTail(
            self.line_no + 1, self.offset, self._buf, "incomplete last line (no newline)"
        )

    def _check(
        self, buf: bytes, view: memoryview, start: int, end: int, key: bytes
    ) -> Event | str | None:
        """Check and decode the line ``buf[start:end]`` (its newline at ``end``)."""
        body_end = end - SUFFIX_LEN
        if (
            body_end <= start + 1
            or buf[body_end : body_end + 6] != _HASH_OPEN
            or buf[end - 2 : end] != _HASH_CLOSE
        ):
            return "no hash field (not a session log line, or cut short)"
        # Decode from a copy of just this line: a message's body (msgspec.Raw) references the
        # buffer it was decoded from, and must not keep the whole log (or chunk) alive.
        line = buf[start:end]
        h = chain_hash(self.head, view[start:body_end], key)
        if line[-34:-2] != h.encode("ascii"):
            return "hash mismatch (edited, reordered, or written with another key)"
        if line_too_deep(line):  # the writer refuses such values: never a RecursionError
            return f"nested deeper than {LINE_MAX_DEPTH} containers"
        if not line.isascii():
            # msgspec does not look inside a message body (kept raw, decoded on first use), so
            # text that is not UTF-8 is found here, as a bad line, not later by a reader.
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"invalid UTF-8 at byte {exc.start} of the line"
        if self.expect_header:
            try:
                header = _header_decoder.decode(line)
            except _UNREADABLE as exc:
                return f"bad header: {exc}"
            if header.format != FORMAT_NAME:
                return f"bad header: format {header.format!r} is not {FORMAT_NAME!r}"
            self.expect_header = False
            self.header = header
            self.last_seq = header.seq
            self.head = h
            self.segment = segment_number(header)
            self.version = header.version
            return None
        try:
            event: Event = _event_decoder.decode(line)
        except msgspec.ValidationError as exc:
            if line.startswith(_HEADER_START):
                return self._next_segment(line, h)
            unknown = _decode_unknown(line)
            if unknown is None:
                return f"invalid event: {exc}"
            event = unknown
        except _UNREADABLE as exc:
            return f"invalid JSON: {exc}"
        if event.seq != self.last_seq + 1:
            return f"seq {event.seq} where {self.last_seq + 1} was expected"
        self.last_seq = event.seq
        self.head = h
        return event

    def _next_segment(self, line: bytes, h: str) -> str | None:
        """A header in the middle: the next segment's (see ``_segments``), or the bad line's reason."""
        try:
            header = _header_decoder.decode(line)
        except _UNREADABLE as exc:
            return f"bad segment header: {exc}"
        offset = self.offset if self.header is not None and self.header.segment == 0 else None
        reason = check_next(
            header,
            first=self.header if self.header is not None and self.header.segment == 0 else None,
            segment=self.segment,
            seq=self.last_seq,
            head=self.head,
            offset=offset,
        )
        if reason is not None:
            return reason
        self.segment = header.segment
        self.version = max(self.version, header.version)
        self.links[header.seq] = h
        self.head = h
        return None


def _decode_unknown(line: bytes | memoryview) -> UnknownEvent | None:
    """Keep an event of a type this version does not know, or None if it is not an event."""
    try:
        raw = _raw_decoder.decode(line)
        tag = raw.get("type")
        if not isinstance(tag, str) or tag == "header" or tag in _KNOWN_TAGS:
            return None
        base = _unknown_decoder.decode(line)
    except _UNREADABLE:
        return None
    raw.pop("h", None)
    return msgspec.structs.replace(base, raw=raw)


_KNOWN_TAGS: Final = frozenset(t.__struct_config__.tag for t in KnownEvent.__args__)


def decode_log(
    data: bytes,
    *,
    key: bytes = b"",
    expect_header: bool = True,
    prev_h: str = ZERO_HASH,
    last_seq: int = 0,
    offset: int = 0,
    first_line: int = 1,
) -> Decoded:
    """Decode a whole log (or a tail of one, with ``expect_header=False``) in one call."""
    dec = LineDecoder(
        key=key,
        prev_h=prev_h,
        last_seq=last_seq,
        expect_header=expect_header,
        offset=offset,
        first_line=first_line,
    )
    # Decoding builds a dict per message; for a big log the cyclic collector would run many
    # times over objects that are all still alive. Pause it (restored even on error).
    pause = len(data) > _GC_PAUSE_BYTES and gc.isenabled()
    if pause:
        gc.disable()
    try:
        events = dec.feed(data)
    finally:
        if pause:
            gc.enable()
    return dec.decoded(events)


def encode_lines(
    events: Iterable[Header | KnownEvent], prev_h: str = ZERO_HASH, key: bytes = b""
) -> tuple[bytes, str]:
    """Encode several events as consecutive chained lines; return the bytes and the last hash."""
    out: list[bytes] = []
    h = prev_h
    for event in events:
        line, h = encode_line(event, h, key)
        out.append(line)
    return b"".join(out), h


@dataclass(slots=True)
class ChainCheck:
    """Result of :func:`verify_chain`: lines checked and the first problem, if any."""

    lines: int = 0
    head: str = ZERO_HASH
    problems: list[Problem] = field(default_factory=list)


def verify_chain(data: bytes, *, key: bytes = b"", prev_h: str = ZERO_HASH) -> ChainCheck:
    """Check every line's chained hash without decoding JSON (the fast audit path)."""
    result = ChainCheck(head=prev_h)
    start = 0
    h = prev_h
    line_no = 0
    while start < len(data):
        end = data.find(b"\n", start)
        line_no += 1
        if end < 0:
            result.problems.append(Problem(line_no, start, "incomplete last line (no newline)"))
            break
        parts = split_hash(data[start:end])
        if parts is None:
            result.problems.append(Problem(line_no, start, "no hash field"))
            break
        body, got = parts
        if chain_hash(h, body, key) != got:
            result.problems.append(Problem(line_no, start, "hash mismatch"))
            break
        h = got
        start = end + 1
    result.lines = line_no
    result.head = h
    return result

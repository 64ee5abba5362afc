"""A session's live messages as a list that reads message bodies from the log only when asked.

A :class:`MessageList` is what ``SessionState.messages`` holds. Built from events (a fold of
decoded lines) it is a plain list of them. Opened from an index snapshot it holds *ranges* of
message records (see :data:`RECORD`) and reads each message's line from the log by offset
when something indexes it, in blocks of :data:`BLOCK` records with one read each; events the
fold appends afterwards are kept in memory after those ranges.

Invariants:
- Order: every indexed message is older than every in-memory one, so the list is the indexed
  ranges, in order, followed by the in-memory events; every operation the fold uses (append,
  drop from the front or the back, keep some indexes) preserves that.
- A record is trusted only after its chunk's digest was checked (the source does it); a line
  read by offset is used only when the log bytes of its whole block hash to the block's *span
  digest* (:func:`span_hasher`; hashed from bytes the chain vouched for when the records were
  written), it ends in a newline and its seq and tokens equal the record's. A full block's
  digest is in its last record; the last block, when partial, has its digest in the snapshot
  (to its last record's line end, see ``IndexSource.last_span``). Anything else raises :class:`CorruptLogError` naming the first
  message whose line no longer checks (found line by line against the chain once a digest
  failed): the log changed before the snapshot's line, which ``verify`` reports; the index
  never serves bytes the chain did not vouch for.
- At most :data:`CACHE_BLOCKS` blocks of decoded messages are kept (the window a reader
  touched); beyond that the list costs its ranges, not its messages.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, Protocol, overload

import msgspec

from ._codec import SUFFIX_LEN, keyed_hasher, verify_chain
from ._errors import CorruptLogError
from ._events import MessageAppended

#: One message record: seq, log offset, line length, tokens, role code, flags, the line's hash
#: (raw 16 bytes) and, in the last record of each block of :data:`BLOCK`, the block's span
#: digest (16 bytes, see :func:`span_hasher`; zeros in the other records); 64 bytes,
#: little-endian.
RECORD: Final = struct.Struct("<qqIiBB2x16s16s4x")
#: Where a record keeps its span digest.
_SPAN_AT: Final = 44
_SPAN_END: Final = 60
#: The fields a read takes from a record (seq, offset, length, tokens), the rest skipped
#: (see :func:`_columns`).
_READ_FIELDS: Final = struct.Struct("<qqIi40x")
_NATIVE_LE: Final = sys.byteorder == "little" and struct.calcsize("q") == 8
_NO_SPAN: Final = bytes(16)
BLOCK: Final = 64
CACHE_BLOCKS: Final = 32
_HASH_OPEN: Final = b',"h":"'
ROLES: Final = {"user": 1, "assistant": 2, "tool": 3, "system": 4}
FLAG_COMMAND: Final = 1
FLAG_DELIVERY: Final = 2
FLAG_MEDIA: Final = 4
FLAG_TOOL_CALLS: Final = 8
FLAG_TOOL_RESULT: Final = 16

_message_decoder = msgspec.json.Decoder(MessageAppended)
_decode_message_line = _message_decoder.decode
_decode_message_lines = _message_decoder.decode_lines
_SPAN_HASHERS: dict[bytes, Any] = {}


def span_hasher(key: bytes) -> Any:
    """A fresh hasher of span digests (copy it): SHA-256 keyed by a prefix, ``"sl-span4" ||
    u8(len(key)) || key``. A block's span digest is its first 16 bytes over the log bytes
    from the line of the block's first record (records ``k * BLOCK`` to ``k * BLOCK + BLOCK -
    1``) to the end of its last record's line (a partial last block too: to its last
    record's line end), lines between messages included: one digest checks a block read."""
    hasher = _SPAN_HASHERS.get(key)
    if hasher is None:
        hasher = hashlib.sha256(b"sl-span4" + bytes((len(key),)) + key)
        if len(_SPAN_HASHERS) < 64:
            _SPAN_HASHERS[key] = hasher
    return hasher


def fill_spans(
    records: list[bytes],
    first: int,
    log: bytes,
    log_start: int,
    key: bytes,
    carry: tuple[Any, int] | None,
) -> bytes:
    """Write the span digests of the blocks ``records`` (packed, ordinals ``first`` on) end
    into their last records, in place, from ``log`` (the log from byte ``log_start``: every
    byte it gives them must be vouched for by the chain); return the span digest of the
    partial block they leave (to its last record's line end; empty: none).
    ``carry`` is the hasher of the partial block ``first`` continues, with the offset its
    bytes run to (None: ``first`` starts a block).

    Raises:
        ValueError: a line is outside ``log``, or a block is continued without ``carry``.
    """
    hasher, pos = carry if carry is not None else (None, 0)
    fresh = span_hasher(key)
    view = memoryview(log)
    limit = log_start + len(log)
    count = len(records)
    i = 0
    while i < count:
        ordinal = first + i
        if ordinal % BLOCK == 0:
            hasher, pos = fresh.copy(), int.from_bytes(records[i][8:16], "little")
        elif hasher is None:
            raise ValueError("a block is continued without its hasher")
        last = min(i + BLOCK - ordinal % BLOCK, count) - 1
        if (first + last) % BLOCK != BLOCK - 1:
            break  # the partial last block: hashed below
        record = records[last]
        _hash_to_line_end(hasher, record, pos, view, log_start, limit)
        records[last] = record[:_SPAN_AT] + hasher.digest()[:16] + record[_SPAN_END:]
        hasher = None
        i = last + 1
    if hasher is None:
        return b""
    _hash_to_line_end(hasher, records[-1], pos, view, log_start, limit)
    return bytes(hasher.digest()[:16])


def _hash_to_line_end(
    hasher: Any, record: bytes, pos: int, view: memoryview, log_start: int, limit: int
) -> None:
    """Hash the log from byte ``pos`` to the end of ``record``'s line into ``hasher``.

    Raises:
        ValueError: those bytes are not all in ``view`` (the log from ``log_start`` to
            ``limit``).
    """
    end = int.from_bytes(record[8:16], "little") + int.from_bytes(record[16:20], "little")
    if not log_start <= pos <= end <= limit:
        raise ValueError(f"the line ending at byte {end} is outside the bytes given")
    hasher.update(view[pos - log_start : end - log_start])


def role_and_flags(message: dict[str, Any]) -> tuple[int, int]:
    """The role code and flags a record keeps for ``message`` (what history filters on)."""
    role = message.get("role")
    flags = 0
    if message.get("_command"):
        flags |= FLAG_COMMAND
    if message.get("_channel_delivery"):
        flags |= FLAG_DELIVERY
    if message.get("media"):
        flags |= FLAG_MEDIA
    if message.get("tool_calls"):
        flags |= FLAG_TOOL_CALLS
    if message.get("tool_call_id"):
        flags |= FLAG_TOOL_RESULT
    return ROLES.get(role, 0) if isinstance(role, str) else 0, flags


def pack_record(
    event: MessageAppended,
    offset: int,
    length: int,
    h: bytes = b"",
    *,
    sealed: bool = False,
) -> bytes:
    """The record of ``event`` whose line is ``length`` bytes at ``offset`` of the log;
    ``h`` is the event's hash (raw) when the caller has it. Its span digest is left empty
    (:func:`fill_spans` writes it).

    A ``sealed`` message (an encrypted store's) gets its role code, an envelope field read
    without opening it, and no flags: the flags say what the content holds.

    Raises:
        struct.error: a token count outside 32 bits (the caller then writes no index).
    """
    if sealed:
        role = event.role
        role, flags = (ROLES.get(role, 0) if isinstance(role, str) else 0), 0
    else:
        role, flags = role_and_flags(event.message)
    return RECORD.pack(
        event.seq,
        offset,
        length,
        event.tokens,
        role,
        flags,
        h or bytes.fromhex(event.h),
        _NO_SPAN,
    )


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, stop)`` record ranges in order, each one that starts where the last stopped
    joined to it (how a message list and an index snapshot keep their ranges)."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


class IndexSource(Protocol):
    """Where an indexed list reads: checked records, and log bytes by offset."""

    #: Where the log lives, for error messages.
    where: str
    hash_key: bytes
    #: Records there are, and the partial last block's span digest (empty: the last block
    #: is full), over its bytes to its last record's line end.
    count: int
    last_span: bytes
    #: Attached to every message event read (an encrypted store's opener of sealed bodies,
    #: see ``MessageAppended.message``); None: bodies are plaintext.
    opener: Callable[[MessageAppended], dict[str, Any]] | None

    def records(self, start: int, count: int) -> bytes:
        """Records ``start`` to ``start + count`` (digest-checked), ``RECORD.size`` each."""

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes of the log at ``offset`` (fewer if the log is shorter)."""

    def all_messages(self) -> list[MessageAppended]:
        """Every message event the records stand for (record N is item N), from the log."""


class _Retry(Exception):
    """The record file was damaged and the list now holds every message in memory."""


class MessageList(Sequence[MessageAppended]):
    """The live messages of a session, oldest first (see the module docstring)."""

    __slots__ = ("_cache", "_ranges", "_size", "_source", "_starts", "_tail")

    def __init__(self, events: Iterable[MessageAppended] = ()) -> None:
        self._source: IndexSource | None = None
        self._ranges: list[tuple[int, int]] = []
        self._starts: list[int] = []
        self._size = 0
        self._tail: list[MessageAppended] = list(events)
        #: Decoded messages by block of records (None: that record is not read yet).
        self._cache: dict[int, list[MessageAppended | None]] = {}

    @classmethod
    def indexed(cls, source: IndexSource, ranges: Iterable[tuple[int, int]]) -> MessageList:
        """A list of the records in ``ranges`` (``[start, stop)`` pairs, in order) of ``source``."""
        out = cls()
        out._source = source
        out._set_ranges([(a, b) for a, b in ranges if b > a])
        return out

    def _set_ranges(self, ranges: list[tuple[int, int]]) -> None:
        self._ranges = merged = merge_ranges(ranges)
        self._starts = []
        total = 0
        for a, b in merged:
            self._starts.append(total)
            total += b - a
        self._size = total
        if not merged:
            self._cache.clear()

    # -- what the snapshot writer needs --------------------------------------------------------

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """The indexed record ranges (``[start, stop)``), oldest first."""
        return list(self._ranges)

    @property
    def source(self) -> IndexSource | None:
        """The index the ranges refer to (None: every message is in memory)."""
        return self._source

    @property
    def in_memory(self) -> list[MessageAppended]:
        """The messages held in memory (those after the indexed ranges)."""
        return self._tail

    # -- the list protocol ---------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._size or self._tail)

    @overload
    def __getitem__(self, index: int) -> MessageAppended: ...

    @overload
    def __getitem__(self, index: slice) -> list[MessageAppended]: ...

    def __getitem__(self, index: int | slice) -> MessageAppended | list[MessageAppended]:
        if index.__class__ is int:  # the hot path: history indexes one message at a time
            i: int = index
            size = self._size
            if i < 0:
                i += size + len(self._tail)
            if i >= size:
                if i - size < len(self._tail):
                    return self._tail[i - size]
            elif i >= 0:
                starts = self._starts
                r = bisect.bisect_right(starts, i) - 1
                ordinal = self._ranges[r][0] + i - starts[r]
                events = self._cache.get(ordinal // BLOCK)
                if events is not None:
                    event = events[ordinal % BLOCK]
                    if event is not None:
                        return event
                return self._load(ordinal)
            raise IndexError("message index out of range")
        if isinstance(index, slice):
            lo, hi, step = index.indices(len(self))
            if step == 1:
                return self._slice(lo, hi)
            return [self._get(i) for i in range(lo, hi, step)]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("message index out of range")
        return self._get(index)

    # A damaged record file found mid-way moves every message into the tail (``_recover``):
    # the iterators then go on from the tail, past what they already gave.

    def __iter__(self) -> Iterator[MessageAppended]:
        done = 0
        for a, b in list(self._ranges):
            for ordinal in range(a, b):
                if self._source is None:
                    yield from self._tail[done:]
                    return
                yield self._load(ordinal)
                done += 1
        # (``done - _size``: 0 when nothing was recovered; past what was given when the very
        # last indexed message recovered the list.)
        yield from self._tail[done - self._size :]

    def __reversed__(self) -> Iterator[MessageAppended]:
        tail = self._tail
        yield from reversed(tail)
        done = len(tail)
        for a, b in reversed(list(self._ranges)):
            for ordinal in range(b - 1, a - 1, -1):
                if self._source is None:
                    yield from reversed(self._tail[: len(self._tail) - done])
                    return
                yield self._load(ordinal)
                done += 1

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageList({len(self)} messages, {self._size} indexed)"

    @overload
    def __setitem__(self, index: int, value: MessageAppended) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[MessageAppended]) -> None: ...

    def __setitem__(
        self, index: int | slice, value: MessageAppended | Iterable[MessageAppended]
    ) -> None:
        # Replacing messages (redaction, erasure) is rare: the list moves into memory first.
        if isinstance(index, slice) and index == slice(None):
            items: list[MessageAppended] = list(value)  # type: ignore[arg-type]
        else:
            items = list(self)
            items[index] = value  # type: ignore[index,assignment]
        self._tail = items
        self._source = None
        self._cache = {}
        self._set_ranges([])

    def __delitem__(self, index: int | slice) -> None:
        n = len(self)
        lo, hi, step = index.indices(n) if isinstance(index, slice) else (index, index + 1, 1)
        if not isinstance(index, slice) and lo < 0:
            lo, hi = lo + n, lo + n + 1
        if step != 1:
            doomed = set(range(lo, hi, step))
            self.keep(i for i in range(n) if i not in doomed)
        elif hi >= n:
            self.drop_back(max(n - lo, 0))
        elif lo <= 0:
            self.drop_front(hi)
        elif lo < hi:
            self.keep([*range(lo), *range(hi, n)])

    def append(self, event: MessageAppended) -> None:
        """Add the newest message."""
        self._tail.append(event)

    def copy(self) -> MessageList:
        """An independent list of the same messages (the index is shared, it never changes)."""
        out = MessageList(self._tail)
        out._source = self._source
        out._set_ranges(list(self._ranges))
        out._cache = self._cache  # decoded blocks are immutable events: sharing them is safe
        return out

    def detached(self) -> MessageList:
        """A copy whose in-memory messages own their bytes (see ``MessageAppended.detached``)."""
        out = self.copy()
        out._tail = [m.detached() for m in self._tail]
        return out

    # -- what the fold does ----------------------------------------------------------------------

    def token_sum(self, lo: int, hi: int) -> int:
        """Stored tokens of messages ``lo`` to ``hi`` (records are read, not message bodies)."""
        try:
            return self._token_sum(lo, hi)
        except _Retry:
            return self._token_sum(lo, hi)

    def _token_sum(self, lo: int, hi: int) -> int:
        lo, hi, _ = slice(lo, hi).indices(len(self))
        total = 0
        for i in range(lo, min(hi, self._size)):
            total += int(self._record(self._ordinal(i))[3])
        for m in self._tail[max(lo - self._size, 0) : max(hi - self._size, 0)]:
            total += m.tokens
        return total

    def drop_front(self, count: int) -> int:
        """Remove the oldest ``count`` messages; return their stored tokens."""
        count = max(0, min(count, len(self)))
        tokens = self.token_sum(0, count)  # first: it may move every message into memory
        from_index = min(count, self._size)
        if from_index:
            self._set_ranges(self._cut_ranges(from_index, self._size))
        del self._tail[: count - from_index]
        return tokens

    def drop_back(self, count: int) -> int:
        """Remove the newest ``count`` messages; return their stored tokens."""
        count = max(0, min(count, len(self)))
        n = len(self)
        tokens = self.token_sum(n - count, n)  # first: it may move every message into memory
        from_tail = min(count, len(self._tail))
        if from_tail:
            del self._tail[-from_tail:]
        rest = count - from_tail
        if rest:
            self._set_ranges(self._cut_ranges(0, self._size - rest))
        return tokens

    def keep(self, indexes: Iterable[int]) -> int:
        """Keep only the messages at ``indexes`` (out-of-range ones ignored); return their tokens."""
        wanted = list(indexes)
        try:
            return self._keep(wanted)
        except _Retry:
            return self._keep(wanted)

    def _keep(self, indexes: list[int]) -> int:
        n = len(self)
        wanted = sorted({i for i in indexes if 0 <= i < n})
        ranges = [(self._ordinal(i), self._ordinal(i) + 1) for i in wanted if i < self._size]
        tail = [self._tail[i - self._size] for i in wanted if i >= self._size]
        tokens = sum(int(self._record(a)[3]) for a, _ in ranges) + sum(m.tokens for m in tail)
        self._set_ranges(ranges)
        self._tail = tail
        return tokens

    # -- internals -----------------------------------------------------------------------------

    def _cut_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The ranges covering indexed positions ``lo`` to ``hi``."""
        out: list[tuple[int, int]] = []
        for (a, b), start in zip(self._ranges, self._starts, strict=True):
            s, e = max(lo, start), min(hi, start + b - a)
            if s < e:
                out.append((a + s - start, a + e - start))
        return out

    def _ordinal(self, index: int) -> int:
        r = bisect.bisect_right(self._starts, index) - 1
        return self._ranges[r][0] + index - self._starts[r]

    def _get(self, index: int) -> MessageAppended:
        if index >= self._size:
            return self._tail[index - self._size]
        return self._load(self._ordinal(index))

    def _slice(self, lo: int, hi: int) -> list[MessageAppended]:
        out: list[MessageAppended] = []
        stop = min(hi, self._size)
        if lo < stop:
            try:
                self._prefetch(lo, stop)
            except ValueError:  # SnapshotError: the record file is damaged; use the log
                self._recover()
                return self._slice(lo, hi)
            cache = self._cache
            for first, end in self._cut_ranges(lo, stop):
                # A block's cached run is taken in one slice; a part the cache lost (a window
                # longer than it keeps) is loaded message by message.
                while first < end:
                    block = first // BLOCK
                    base = block * BLOCK
                    upto = min(end, base + BLOCK)
                    events = cache.get(block)
                    part = events[first - base : upto - base] if events is not None else None
                    if part is not None and None not in part:
                        out += part  # type: ignore[arg-type]  # no None in it
                    else:
                        for ordinal in range(first, upto):
                            event = self._load(ordinal)
                            if self._source is None:  # the record file was damaged: in memory
                                return self._slice(lo, hi)
                            out.append(event)
                    first = upto
        out.extend(self._tail[max(lo - self._size, 0) : max(hi - self._size, 0)])
        return out

    def prefetch(self, lo: int, hi: int) -> None:
        """Read the messages at positions ``lo`` to ``hi`` that are not in memory yet, with one
        read of the log per run of consecutive blocks (a window is then indexed for free).

        Raises:
            CorruptLogError: a line is not what the index recorded.
        """
        lo, hi, _ = slice(lo, hi).indices(len(self))
        hi = min(hi, self._size)
        if lo >= hi or self._source is None:
            return
        try:
            self._prefetch(lo, hi)
        except ValueError:  # SnapshotError: the record file is damaged; use the log
            self._recover()

    def _prefetch(self, lo: int, hi: int) -> None:
        """Load the messages at positions ``lo`` to ``hi`` (indexed ones) that are not cached,
        and at most the newest :data:`CACHE_BLOCKS` blocks' worth (the rest loads on demand).
        Only their records are read (not whole blocks), with one read of the log per run of
        them; runs less than a block apart (the holes a ``Cleared`` keep or a redaction leave)
        are read as one, records in between included."""
        wanted = self._cut_ranges(lo, hi)
        if not wanted:
            return
        floor = ((wanted[-1][1] - 1) // BLOCK - CACHE_BLOCKS + 1) * BLOCK  # oldest block kept
        runs: list[list[int]] = []
        cache = self._cache
        for first, end in wanted:
            first = max(first, floor)
            while first < end:
                base = first // BLOCK * BLOCK
                upto = min(end, base + BLOCK)
                slots = cache.get(base // BLOCK)
                if slots is None:
                    missing = [(first, upto)]
                else:
                    missing = []
                    for ordinal in range(first, upto):
                        if slots[ordinal - base] is None:
                            if missing and missing[-1][1] == ordinal:
                                missing[-1] = (missing[-1][0], ordinal + 1)
                            else:
                                missing.append((ordinal, ordinal + 1))
                for a, b in missing:
                    if runs and a - runs[-1][1] <= BLOCK:
                        runs[-1][1] = b
                    else:
                        runs.append([a, b])
                first = upto
        for first, end in runs:
            self._fill(first, end)

    def _record(self, ordinal: int) -> tuple[Any, ...]:
        assert self._source is not None
        try:
            return RECORD.unpack(self._source.records(ordinal, 1))
        except ValueError:  # SnapshotError: the record file is damaged
            self._recover()
            raise _Retry from None

    def _load(self, ordinal: int) -> MessageAppended:
        block = ordinal // BLOCK
        events = self._cache.get(block)
        event = events[ordinal - block * BLOCK] if events is not None else None
        if event is None:
            # The block's records from this one on that are not cached yet, with one read (a
            # reader that walks the list reads it a block at a time).
            first = block * BLOCK
            stop = min(first + BLOCK, max(b for _, b in self._ranges))
            end = ordinal + 1
            while end < stop and (events is None or events[end - first] is None):
                end += 1
            start = ordinal
            while start > first and (events is None or events[start - 1 - first] is None):
                start -= 1
            try:
                self._fill(start, end)
            except ValueError:  # SnapshotError: the record file is damaged; use the log
                return self._recover()[ordinal]
            event = self._cache[block][ordinal - first]
            assert event is not None
        return event

    def _recover(self) -> list[MessageAppended]:
        """Hold every message in memory, decoded from the log (the record file is damaged)."""
        assert self._source is not None
        events = self._source.all_messages()
        self._tail = [events[o] for a, b in self._ranges for o in range(a, b)] + self._tail
        self._source = None
        self._cache = {}
        self._set_ranges([])
        return events

    def _fill(self, first: int, stop: int) -> None:
        """Read, check and cache the messages of records ``first`` to ``stop`` (one log read).

        A block's cache entry is a list of :data:`BLOCK` slots, None where not read yet."""
        source = self._source
        assert source is not None
        events = _read_lines(source, first, stop)
        cache = self._cache
        ordinal = first
        while ordinal < stop:
            block = ordinal // BLOCK
            base = block * BLOCK
            upto = min(stop, base + BLOCK)
            slots = cache.get(block)
            if slots is None:
                if len(cache) >= CACHE_BLOCKS:
                    cache.pop(next(iter(cache)))
                slots = cache[block] = [None] * BLOCK
            if slots.count(None) == BLOCK:
                slots[ordinal - base : upto - base] = events[ordinal - first : upto - first]
            else:  # keep the events already cached (and the messages they decoded)
                for i in range(ordinal, upto):
                    if slots[i - base] is None:
                        slots[i - base] = events[i - first]
            ordinal = upto


def _columns(records: bytes) -> tuple[list[int], list[int], list[int], list[int]]:
    """The seqs, log offsets, line lengths and tokens of packed ``records`` (the only fields
    a read needs), as four lists: no tuple per record, nor objects for the fields it skips
    (on a little-endian machine, strided views of the records themselves).

    Raises:
        struct.error: ``records`` is not whole records.
    """
    if len(records) % RECORD.size:
        raise struct.error(f"{len(records)} bytes are not whole {RECORD.size}-byte records")
    if _NATIVE_LE:
        view = memoryview(records)
        words = view.cast("q")  # 8 per record: seq, offset, then length and tokens
        halves = view.cast("I")  # 16 per record: length is the 5th
        signed = view.cast("i")  # tokens the 6th
        per = RECORD.size
        return (
            words[0 :: per // 8].tolist(),
            words[1 :: per // 8].tolist(),
            halves[4 :: per // 4].tolist(),
            signed[5 :: per // 4].tolist(),
        )
    fields = list(_READ_FIELDS.iter_unpack(records))
    return (
        [f[0] for f in fields],
        [f[1] for f in fields],
        [f[2] for f in fields],
        [f[3] for f in fields],
    )


def _read_lines(source: IndexSource, first: int, stop: int) -> list[MessageAppended]:
    """The message events of records ``first`` to ``stop``, their lines read from the log with
    one read of the whole blocks they touch, each block checked with its span digest (see the
    module docstring)."""
    base = first - first % BLOCK
    count = source.count
    upto = min(stop - (stop - 1) % BLOCK - 1 + BLOCK, count)
    records = source.records(base, upto - base)
    seqs, offsets, lengths, tokens = _columns(records)
    n = len(offsets)
    start = offsets[0]
    end = offsets[-1] + lengths[-1]
    data = source.read(start, end - start)
    view = memoryview(data)
    size = len(data)
    fresh = span_hasher(source.hash_key)
    for j in range(0, n, BLOCK):
        a = offsets[j] - start
        if j + BLOCK <= n:
            k = j + BLOCK - 1
            b = offsets[k] + lengths[k] - start
            at = k * RECORD.size + _SPAN_AT
            want = records[at : at + _SPAN_END - _SPAN_AT]
        else:
            b, want = end - start, source.last_span
        hasher = fresh.copy()
        hasher.update(view[a:b])
        if b > size or hasher.digest()[:16] != want:
            block = records[j * RECORD.size : (j + BLOCK) * RECORD.size]
            raise _diagnose(source, list(RECORD.iter_unpack(block)), data, start)
    opener = source.opener
    lo, hi = first - base, stop - base
    seqs, offsets, lengths, tokens = seqs[lo:hi], offsets[lo:hi], lengths[lo:hi], tokens[lo:hi]
    out = _decode_runs(seqs, offsets, lengths, tokens, data, start)
    if out is not None:
        if opener is not None:
            for event in out:
                event.__dict__["_open"] = opener
        return out
    # Something does not match: line by line, to name the first message that does not.
    out = []
    append = out.append
    for seq, offset, length, said in zip(seqs, offsets, lengths, tokens, strict=True):
        a = offset - start
        b = a + length
        if not 0 <= a < b <= size:
            raise _bad(source, seq, offset, "is outside the bytes its block's records span")
        if data[b - 1] != 10:
            raise _bad(source, seq, offset, "does not end in a newline")
        try:
            event = _decode_message_line(view[a:b])
        except msgspec.DecodeError as exc:
            raise _bad(source, seq, offset, f"is not a message event ({exc})") from exc
        if event.seq != seq or event.tokens != said:
            raise _bad(source, seq, offset, "disagrees with the index on its seq or tokens")
        if opener is not None:
            event.__dict__["_open"] = opener
        append(event)
    return out


def _decode_runs(
    seqs: list[int],
    offsets: list[int],
    lengths: list[int],
    tokens: list[int],
    data: bytes,
    start: int,
) -> list[MessageAppended] | None:
    """The message events of the records whose seqs, log offsets, line lengths and tokens
    are given (their lines in ``data``, the log from byte ``start``), decoded with one call
    per run of adjacent lines (lines between messages are not decoded); None when anything
    disagrees with the records (a record does not start with ``{`` and end in a newline, a
    run's bytes do not decode as that many messages, or a line's seq or tokens differ),
    which the caller then finds line by line. Over lines of one JSON value each (what the
    chain vouches for) this accepts exactly what the line by line check does;
    ``decode_lines`` takes whitespace-separated values, so bytes that are not (two values
    on a line, one over two lines) could pass here and not there, but the block's span
    digest keeps such bytes out unless written with the store's key."""
    view = memoryview(data)
    out: list[MessageAppended] = []
    count = len(offsets)
    i = 0
    while i < count:
        a = offsets[i] - start
        end = a + lengths[i]
        j = i + 1
        try:
            if data[a] != 123 or data[end - 1] != 10:
                return None
            while j < count:
                if offsets[j] - start != end:
                    break
                if data[end] != 123:
                    return None
                end += lengths[j]
                if data[end - 1] != 10:
                    return None
                j += 1
        except IndexError:  # a record past the read (an empty one at its end)
            return None
        # Each record starts a value and ends a line (``decode_lines`` alone would also take
        # records cut anywhere between two lines, or a blank line as a record).
        try:
            events = _decode_message_lines(view[a:end])
        except msgspec.DecodeError:
            return None
        if len(events) != j - i:
            return None
        out += events
        i = j
    for event, seq, said in zip(out, seqs, tokens, strict=True):
        if event.seq != seq or event.tokens != said:
            return None
    return out


def _diagnose(
    source: IndexSource, recs: list[tuple[Any, ...]], data: bytes, start: int
) -> CorruptLogError:
    """Why a block's bytes fail their span digest: the first of its lines that no longer
    checks against the chain (the records' hashes), or the block as a whole."""
    fresh = keyed_hasher(source.hash_key)
    view = memoryview(data)
    prev_end = -1
    prev_hex = ""
    for seq, offset, length, _tokens, _role, _flags, h, _span in recs:
        a = offset - start
        b = a + length
        if a < 0 or b > len(data):
            return _bad(source, seq, offset, "is past the end of the log")
        hex_h = h.hex()
        body_end = b - SUFFIX_LEN - 1
        if data[b - 1] != 10 or data[body_end : b - 3] != _HASH_OPEN + hex_h.encode():
            return _bad(source, seq, offset, "does not have the hash the index recorded")
        if prev_end >= 0 and prev_end < a:
            gap = verify_chain(data[prev_end:a], key=source.hash_key, prev_h=prev_hex)
            if gap.problems:
                at = start + prev_end
                return CorruptLogError(
                    source.where,
                    0,
                    f"a line between byte {at} and message {seq} at byte {offset} does not "
                    "chain (the log changed; run verify)",
                )
        before = data[a - 35 : a - 3] if a >= 35 else source.read(offset - 35, 32)
        hasher = fresh.copy()
        hasher.update(before)
        hasher.update(view[a:body_end])
        if hasher.digest() != h:
            return _bad(source, seq, offset, "does not chain")
        prev_end, prev_hex = b, hex_h
    first, last = recs[0], recs[-1]
    return CorruptLogError(
        source.where,
        0,
        f"messages {first[0]} to {last[0]} (bytes {first[1]} to {last[1] + last[2]}) do not "
        "match the index's span digest (the log changed; run verify)",
    )


def _bad(source: IndexSource, seq: int, offset: int, why: str) -> CorruptLogError:
    return CorruptLogError(
        source.where, 0, f"message {seq} at byte {offset} {why} (the log changed; run verify)"
    )

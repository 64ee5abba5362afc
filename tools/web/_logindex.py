"""Random access to a session's log: a page of events reads and decodes only its own lines.

Invariants:
- A file store's log is read with ``pread`` at the offsets a page needs (never followed through
  a symlink, never anything but a regular file); other stores' logs are held in memory and
  extended with what was appended.
- Line offsets are found by bisection over byte offsets (a line's seq is in its first bytes;
  seqs are contiguous), remembering each line start found, so opening the last page of a
  100,000-message log reads a few hundred KB, not the log.
- Only complete lines count (a line still being written waits for the next look). A log that
  shrank is indexed again from scratch.
- A page is decoded with the chain check resumed from the hash at the end of the line before
  it, so every line shown was checked. A line that fails is reported as a bad line (with why)
  and the page goes on after it, chained from that line's own hash: a viewer of a tampered log
  still shows the rest, and says where the chain breaks.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from sessionledger.eventlog import (
    BaseStore,
    CorruptLogError,
    Event,
    Header,
    NotALogError,
    SessionNotFoundError,
    SessionState,
    UnsafePathError,
    apply,
    decode_log,
)
from sessionledger.eventlog.backend import read_range
from sessionledger.eventlog.codec import ZERO_HASH, split_hash
from sessionledger.replay import FollowPoint

MAX_LOGS = 16
CHUNK = 64 * 1024
#: Below this gap between two known line starts, read the gap instead of bisecting further.
LINEAR = 256 * 1024
T = TypeVar("T")
_SEQ = re.compile(rb'"seq":(\d+)')
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(slots=True)
class BadLine:
    """A line of a page that failed its check."""

    line: int
    seq: int
    reason: str


class _Source:
    """Bytes of one log by offset."""

    def __init__(self, store: BaseStore, key: str) -> None:
        self.store = store
        self.key = key
        path_for: Callable[[str], object] | None = getattr(store, "path_for", None)
        self.path = str(path_for(key)) if path_for is not None else None
        self._data = b""

    def _open(self) -> int:
        assert self.path is not None
        try:
            fd = os.open(self.path, _FLAGS)
        except FileNotFoundError:
            raise SessionNotFoundError(self.key) from None
        except OSError as exc:
            raise UnsafePathError(self.path, f"cannot open it to read: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafePathError(self.path, "not a regular file")
        return fd

    def size(self) -> int:
        if self.path is None:
            size, chunk = self.store.read_tail(self.key, len(self._data))
            if size < len(self._data):
                size, chunk = self.store.read_tail(self.key, 0)
                self._data = b""
            self._data += chunk
            return size
        fd = self._open()
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        if self.path is None:
            return self._data[offset : offset + length]
        fd = self._open()
        try:
            return read_range(fd, offset, length)
        finally:
            os.close(fd)


def _seq_at(line_head: bytes) -> int | None:
    found = _SEQ.search(line_head, 0, 512)
    return int(found.group(1)) if found is not None else None


@dataclass(slots=True)
class LogIndex:
    """What is known of one log: its header, its end, line starts found so far."""

    key: str
    source: _Source
    header: Header | None = None
    end: int = 0
    last_seq: int = 0
    head: str = ZERO_HASH
    #: Known line starts, by seq (sorted, parallel lists).
    seqs: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    #: The folded state at some seq, advanced by what is appended (under ``lock``).
    state: SessionState | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    grow: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> int:
        """The seq of the header line (0, or a segment's start)."""
        return self.header.seq if self.header is not None else 0

    def _known(self, seq: int, offset: int) -> None:
        i = bisect.bisect_left(self.seqs, seq)
        if i < len(self.seqs) and self.seqs[i] == seq:
            return
        self.seqs.insert(i, seq)
        self.offsets.insert(i, offset)

    def refresh(self, hash_key: bytes, path: str) -> None:
        """Take in what was appended since the last look (or everything, if it shrank)."""
        size = self.source.size()
        if size < self.end:
            self.header, self.end, self.last_seq, self.head = None, 0, 0, ZERO_HASH
            self.seqs, self.offsets, self.state = [], [], None
        if self.header is None:
            first = b""
            while b"\n" not in first and len(first) < size:
                first = self.source.read(0, min(size, max(CHUNK, 2 * len(first))))
            cut = first.find(b"\n") + 1
            header = decode_log(first[:cut], key=hash_key).header if cut else None
            if header is None:
                raise NotALogError(path, "line 1 is not a valid session header")
            self.header, self.end, self.last_seq = header, cut, header.seq
            self.head = header.h
            self._known(header.seq, 0)
        if size <= self.end:
            return
        # The last complete line: read back from the end until a line and its start are in.
        span = CHUNK
        while True:
            lo = max(self.end, size - span)
            tail = self.source.read(lo, size - lo)
            last_nl = tail.rfind(b"\n")
            if last_nl < 0:
                if lo == self.end:
                    return  # only a partial line was added
                span *= 2
                continue
            start = tail.rfind(b"\n", 0, last_nl) + 1
            if start == 0 and lo > self.end:
                span *= 2
                continue
            break
        line = tail[start:last_nl]
        split = split_hash(line)
        seq = _seq_at(line)
        if seq is None:
            seq = self.last_seq + tail.count(b"\n", 0, last_nl + 1)  # a bad line: count
        self.end = lo + last_nl + 1
        self.last_seq = seq
        self.head = split[1] if split is not None else ZERO_HASH
        self._known(seq, lo + start)

    def offset_of(self, seq: int) -> int:
        """Where the line of ``seq`` starts (``seq`` past the last line: the end)."""
        if seq > self.last_seq:
            return self.end
        while True:
            i = bisect.bisect_right(self.seqs, seq) - 1
            lo_seq, lo_off = self.seqs[i], self.offsets[i]
            if lo_seq == seq:
                return lo_off
            if i + 1 < len(self.seqs):
                hi_seq, hi_off = self.seqs[i + 1], self.offsets[i + 1]
            else:
                hi_seq, hi_off = self.last_seq + 1, self.end
            if hi_off - lo_off <= LINEAR or hi_seq - lo_seq <= 2:
                return self._scan(lo_seq, lo_off, hi_off, seq)
            mid = (lo_off + hi_off) // 2
            chunk = self.source.read(mid, CHUNK)
            nl = chunk.find(b"\n")
            if nl < 0 or mid + nl + 1 >= hi_off:
                return self._scan(lo_seq, lo_off, hi_off, seq)
            found = _seq_at(chunk[nl + 1 :])
            if found is None or not lo_seq < found < hi_seq:
                return self._scan(lo_seq, lo_off, hi_off, seq)
            self._known(found, mid + nl + 1)

    def _scan(self, lo_seq: int, lo_off: int, hi_off: int, seq: int) -> int:
        data = self.source.read(lo_off, hi_off - lo_off)
        pos, at = 0, lo_seq
        while at < seq:
            nl = data.find(b"\n", pos)
            if nl < 0:
                return hi_off
            pos, at = nl + 1, at + 1
        self._known(seq, lo_off + pos)
        return lo_off + pos

    def point_after(self, seq: int) -> FollowPoint:
        """Where to follow the log from, just after the line of ``seq``."""
        assert self.header is not None
        seq = min(max(seq, self.base), self.last_seq)
        offset = self.offset_of(seq + 1)
        return FollowPoint(offset, self._hash_before(offset), seq, seq - self.base + 1, self.header)

    def _hash_before(self, offset: int) -> str:
        if offset == 0:
            return ZERO_HASH
        tail = self.source.read(max(0, offset - 96), min(96, offset))
        split = split_hash(tail[:-1]) if tail.endswith(b"\n") else None
        return split[1] if split is not None else ZERO_HASH

    def open_with(self, store: BaseStore, events: list[Event]) -> list[Event]:
        """``events`` opened by ``store`` when the session is sealed (encryption at rest)."""
        header = self.header
        if header is None or not header.sealing:
            return events
        return store.open_events(header.key, header, events)

    def events(self, lo: int, hi: int, hash_key: bytes) -> tuple[list[Event], list[BadLine]]:
        """Events with ``lo <= seq <= hi`` (clamped to the log), checked; and the bad lines."""
        lo = max(lo, self.base + 1)
        hi = min(hi, self.last_seq)
        if hi < lo:
            return [], []
        start = self.offset_of(lo)
        stop = self.offset_of(hi + 1)
        data = self.source.read(start, stop - start)
        events: list[Event] = []
        bad: list[BadLine] = []
        prev_h, last, pos = self._hash_before(start), lo - 1, 0
        while pos < len(data):
            decoded = decode_log(
                data[pos:],
                key=hash_key,
                expect_header=False,
                prev_h=prev_h,
                last_seq=last,
                offset=start + pos,
                first_line=last - self.base + 2,
            )
            events.extend(decoded.events)
            problem = decoded.bad or decoded.torn
            if problem is None:
                break
            line_start = problem.offset - start
            nl = data.find(b"\n", line_start)
            line = data[line_start : nl if nl >= 0 else len(data)]
            seq = _seq_at(line)
            bad.append(BadLine(problem.line, seq if seq is not None else -1, problem.reason))
            split = split_hash(line)
            prev_h = split[1] if split is not None else ZERO_HASH
            last = seq if seq is not None else (events[-1].seq + 1 if events else last + 1)
            if nl < 0:
                break
            pos = nl + 1
        return events, bad


class LogCache:
    """The logs the viewer has open, refreshed on each use (thread-safe)."""

    def __init__(self, store: BaseStore, *, max_logs: int = MAX_LOGS) -> None:
        self.store = store
        self.max_logs = max_logs
        self._logs: OrderedDict[str, LogIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, path: str) -> LogIndex:
        """The index of ``key``, with whatever was appended since it was last looked at."""
        with self._lock:
            index = self._logs.get(key)
            if index is None:
                index = self._logs[key] = LogIndex(key, _Source(self.store, key))
            self._logs.move_to_end(key)
            while len(self._logs) > self.max_logs:
                self._logs.popitem(last=False)
        with index.grow:
            index.refresh(self.store.hash_key, path)
        return index

    def with_head_state(self, key: str, path: str, use: Callable[[SessionState], T]) -> T:
        """``use(state)`` with the folded state at the last indexed line, under the log's lock.

        The state is loaded once (``store.load``, from a snapshot when there is one), then
        advanced by what is appended, so a live session's view costs its new events only.
        """
        index = self.get(key, path)
        with index.lock:
            state = index.state
            if state is None or state.seq > index.last_seq:
                state = self.store.load(key).state
                if state.seq > index.last_seq:  # the log grew between the two reads
                    index = self.get(key, path)
            if state.seq < index.last_seq:
                events, bad = index.events(state.seq + 1, index.last_seq, self.store.hash_key)
                if bad:
                    raise CorruptLogError(path, bad[0].line, bad[0].reason)
                events = index.open_with(self.store, events)
                for event in events:
                    apply(state, event)
            index.state = state
            return use(state)

"""A session's log bytes and line offsets, so a page of events decodes only its own lines.

Invariants:
- Only complete lines are indexed (a line still being written waits for the next refresh).
  A refresh reads what was appended since (``read_tail``); a log that shrank is read again.
- A page is decoded with the chain check resumed from the hash at the end of the line before
  it, so every line shown was checked. A line that fails is shown as a bad line (with why) and
  the page goes on after it, chained from that line's own hash: a viewer of a tampered log
  still shows the rest, and says where the chain breaks.
- The cache holds a few logs (least recently used first out), bounded in bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from sessionledger.eventlog import (
    ZERO_HASH,
    BaseStore,
    CorruptLogError,
    Event,
    Header,
    NotALogError,
    SessionState,
    apply,
    decode_log,
    split_hash,
)

MAX_LOGS = 6
T = TypeVar("T")
MAX_BYTES = 1 << 30


class _Seq(msgspec.Struct):
    seq: int = -1


_seq_of = msgspec.json.Decoder(_Seq)


@dataclass(slots=True)
class BadLine:
    """A line of a page that failed its check."""

    line: int
    seq: int
    reason: str


@dataclass(slots=True)
class LogIndex:
    """One log's complete lines: bytes, the offset past each line, the header."""

    key: str
    data: bytes = b""
    ends: list[int] = field(default_factory=list)
    header: Header | None = None
    #: The folded state at some seq, advanced by the events indexed since (under ``lock``).
    state: SessionState | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Held while lines are added.
    grow: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> int:
        """The seq of the header line (0, or a segment's start)."""
        return self.header.seq if self.header is not None else 0

    @property
    def last_seq(self) -> int:
        """The seq of the last complete line."""
        return self.base + max(len(self.ends) - 1, 0)

    @property
    def head(self) -> str:
        """The hash at the end of the last complete line."""
        return self._hash(len(self.ends) - 1)

    def _line(self, i: int) -> bytes:
        start = self.ends[i - 1] if i else 0
        return self.data[start : self.ends[i] - 1]

    def _hash(self, i: int) -> str:
        if i < 0:
            return ZERO_HASH
        split = split_hash(self._line(i))
        return split[1] if split is not None else ZERO_HASH

    def extend(self, chunk: bytes, hash_key: bytes, path: str) -> None:
        """Add the complete lines of ``chunk`` (the bytes after :attr:`data`)."""
        end = chunk.rfind(b"\n") + 1
        if not end:
            return
        offset = len(self.data)
        self.data = self.data + chunk[:end] if self.data else chunk[:end]
        find = self.data.find
        pos = find(b"\n", offset)
        while pos >= 0:
            self.ends.append(pos + 1)
            pos = find(b"\n", pos + 1)
        if self.header is None:
            first = decode_log(self.data[: self.ends[0]], key=hash_key)
            if first.header is None:
                raise NotALogError(path, "line 1 is not a valid session header")
            self.header = first.header

    def events(self, lo: int, hi: int, hash_key: bytes) -> tuple[list[Event], list[BadLine]]:
        """Events with ``lo <= seq <= hi`` (clamped to the log), checked; and the bad lines."""
        first = max(lo, self.base + 1) - self.base  # line index (0 is the header)
        last = min(hi, self.last_seq) - self.base
        events: list[Event] = []
        bad: list[BadLine] = []
        i = first
        while i <= last:
            start = self.ends[i - 1]
            decoded = decode_log(
                self.data[start : self.ends[last]],
                key=hash_key,
                expect_header=False,
                prev_h=self._hash(i - 1),
                last_seq=self.base + i - 1,
                offset=start,
                first_line=i + 1,
            )
            events.extend(decoded.events)
            problem = decoded.bad or decoded.torn
            if problem is None:
                break
            j = problem.line - 1  # the failing line's index
            try:
                seq = _seq_of.decode(self._line(j)).seq
            except msgspec.DecodeError:
                seq = -1
            bad.append(BadLine(problem.line, seq, problem.reason))
            i = j + 1
        return events, bad


class LogCache:
    """The logs the viewer has open, refreshed on each use (thread-safe)."""

    def __init__(self, store: BaseStore, *, max_logs: int = MAX_LOGS) -> None:
        self.store = store
        self.max_logs = max_logs
        self._logs: OrderedDict[str, LogIndex] = OrderedDict()
        self._lock = threading.Lock()

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
                    self.refresh(index, path)
            if state.seq < index.last_seq:
                events, bad = index.events(state.seq + 1, index.last_seq, self.store.hash_key)
                if bad:
                    raise CorruptLogError(path, bad[0].line, bad[0].reason)
                for event in events:
                    apply(state, event)
            index.state = state
            return use(state)

    def get(self, key: str, path: str) -> LogIndex:
        """The index of ``key``, with whatever was appended since it was last read."""
        with self._lock:
            index = self._logs.get(key)
            if index is None:
                index = self._logs[key] = LogIndex(key)
            self._logs.move_to_end(key)
            total = sum(len(i.data) for i in self._logs.values())
            while len(self._logs) > self.max_logs or (total > MAX_BYTES and len(self._logs) > 1):
                _, dropped = self._logs.popitem(last=False)
                total -= len(dropped.data)
        return self.refresh(index, path)

    def refresh(self, index: LogIndex, path: str) -> LogIndex:
        """Read what was appended to ``index``'s log (or all of it again if it shrank)."""
        with index.grow:
            size, chunk = self.store.read_tail(index.key, len(index.data))
            if size < len(index.data):  # cut or replaced: start again
                size, chunk = self.store.read_tail(index.key, 0)
                index.data, index.ends, index.header, index.state = b"", [], None, None
            index.extend(chunk, self.store.hash_key, path)
        return index

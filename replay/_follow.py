"""Follow a session: yield the events already in its log after a seq, then new ones as they
are appended (by this or any other process), until the caller stops.

Invariants:
- No busy loop: between reads the follower waits on a :class:`Waker`. The default sleeps with
  bounded exponential backoff (``poll`` doubling up to ``max_poll``, back to ``poll`` once an
  event arrives). A store can offer a better waker (PostgreSQL's LISTEN/NOTIFY) through a
  ``follow_waker(key)`` method; a waker only has to return early, the log is always re-read.
- Every line yielded was checked like any other read: hash chain, seq, event. A partial line
  still being written is never yielded; it is read again whole on the next poll (reads restart
  at the end of the last complete line, so a tail cut by a new writer cannot glue).
- A corrupt line, or a log cut below what was already read, raises :class:`CorruptLogError`.
- The same object is a sync iterator and an async iterator (anyio: asyncio and trio).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import NamedTuple, Protocol, Self, TypedDict, Unpack, runtime_checkable

import anyio
import anyio.to_thread

from sessionledger.eventlog import (
    BaseStore,
    CorruptLogError,
    Event,
    Header,
    InvalidEventError,
    PostgresStore,
)
from sessionledger.eventlog.codec import ZERO_HASH, LineDecoder

from ._views import where


@runtime_checkable
class Waker(Protocol):
    """Blocks a follower between reads until new data may be there, or ``timeout`` passes."""

    def wait(self, timeout: float) -> None:
        """Block (sync) for at most ``timeout`` seconds."""

    async def wait_async(self, timeout: float) -> None:
        """Wait (async) for at most ``timeout`` seconds."""

    def close(self) -> None:
        """Release what the waker holds (a connection, a watch)."""


class PollingWaker:
    """The default waker: sleep for the timeout (bounded polling)."""

    def wait(self, timeout: float) -> None:
        """Sleep ``timeout`` seconds."""
        time.sleep(timeout)

    async def wait_async(self, timeout: float) -> None:
        """Sleep ``timeout`` seconds without blocking the event loop."""
        await anyio.sleep(timeout)

    def close(self) -> None:
        """Nothing to release."""


class FollowPoint(NamedTuple):
    """Where a follower starts reading: just past a complete line whose position and hash the
    caller already knows (e.g. from its own index), so following a long log does not read it
    all first. The next line must chain from ``head``; anything else is reported as corrupt."""

    offset: int
    head: str
    seq: int
    line: int
    header: Header


class AsyncStoreLike(Protocol):
    """An async store: followed through the sync store underneath it."""

    @property
    def sync(self) -> BaseStore:
        """The sync store underneath."""
        ...


class Follow(Iterator[Event], AsyncIterator[Event]):
    """Events of one session after ``after_seq``, old then new; see :func:`follow`."""

    def __init__(
        self,
        store: BaseStore | AsyncStoreLike,
        key: str,
        after_seq: int = 0,
        *,
        poll: float = 0.01,
        max_poll: float = 0.25,
        idle_timeout: float | None = None,
        waker: Waker | None = None,
        start: FollowPoint | None = None,
    ) -> None:
        if poll <= 0 or max_poll < poll:
            raise InvalidEventError("need 0 < poll <= max_poll")
        if not isinstance(store, BaseStore):
            store = store.sync
        self.store: BaseStore = store
        self.key = key
        self.after_seq = after_seq
        self.poll = poll
        self.max_poll = max_poll
        self.idle_timeout = idle_timeout
        if waker is None:
            waker = store.follow_waker(key) if isinstance(store, PostgresStore) else PollingWaker()
        self._waker: Waker = waker
        self._path = where(store, key)
        self._pending: deque[Event] = deque()
        self.header: Header | None = None
        #: End of the last complete, checked line; its hash, seq and line number.
        self._offset = 0
        self._head = ZERO_HASH
        self._seq = 0
        self._line = 0
        self._delay = poll
        self._closed = False
        if start is not None:
            self.header = start.header
            self._offset, self._head, self._seq, self._line = (
                start.offset,
                start.head,
                start.seq,
                start.line,
            )
        store.read_tail(key, 1 << 62)  # an unknown key fails here, before iteration (reads nothing)

    def read_new(self) -> int:
        """Read what was appended since the last read; return how many events it queued."""
        size, chunk = self.store.read_tail(self.key, self._offset)
        if size < self._offset:
            raise CorruptLogError(
                self._path,
                self._line,
                f"the log is now {size} bytes, shorter than the {self._offset} already "
                "followed (cut by repair, or replaced)",
            )
        if not chunk:
            return 0
        dec = LineDecoder(
            key=self.store.hash_key,
            prev_h=self._head,
            last_seq=self._seq,
            expect_header=self.header is None,
            first_line=self._line + 1,
            offset=self._offset,
        )
        events = dec.feed(chunk)
        if dec.header is not None:
            self.header = self.store.open_header(self.key, dec.header)
        if self.header is not None and self.header.sealing:
            events = self.store.open_events(self.key, self.header, events)
        if dec.bad is not None:
            raise CorruptLogError(self._path, dec.bad.line, dec.bad.reason)
        self._offset = dec.offset
        self._head = dec.head
        self._seq = dec.last_seq
        self._line = dec.line_no
        before = len(self._pending)
        self._pending.extend(e for e in events if e.seq > self.after_seq)
        return len(self._pending) - before

    def _next_wait(self, idle_since: float) -> float | None:
        """Seconds to wait before the next read, or None when the idle timeout has passed."""
        wait = self._delay
        self._delay = min(self._delay * 2, self.max_poll)
        if self.idle_timeout is not None:
            left = self.idle_timeout - (time.monotonic() - idle_since)
            if left <= 0:
                return None
            wait = min(wait, left)
        return wait

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Event:
        idle_since = time.monotonic()
        while not self._pending:
            if self._closed or self.read_new():
                break
            wait = self._next_wait(idle_since)
            if wait is None:
                break
            self._waker.wait(wait)
        if not self._pending:
            self.close()
            raise StopIteration
        self._delay = self.poll
        return self._pending.popleft()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        idle_since = time.monotonic()
        while not self._pending:
            if self._closed:
                break
            queued: int = await anyio.to_thread.run_sync(self.read_new)
            if queued:
                break
            wait = self._next_wait(idle_since)
            if wait is None:
                break
            await self._waker.wait_async(wait)
        if not self._pending:
            self.close()
            raise StopAsyncIteration
        self._delay = self.poll
        return self._pending.popleft()

    def close(self) -> None:
        """Stop following: iteration ends and the waker is released."""
        if not self._closed:
            self._closed = True
            self._waker.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FollowOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Follow` (defaults there), which :func:`follow` passes on."""

    poll: float
    max_poll: float
    idle_timeout: float | None
    waker: Waker | None
    start: FollowPoint | None


def follow(
    store: BaseStore | AsyncStoreLike,
    key: str,
    after_seq: int = 0,
    **options: Unpack[FollowOptions],
) -> Follow:
    """Iterate (``for`` or ``async for``) over ``key``'s events after ``after_seq``, live.

    Runs until the caller breaks out or calls ``close()``; with ``idle_timeout``, it also ends
    once no new event arrived for that many seconds. An async store is followed through the
    sync store underneath it (``store.sync``). ``start`` resumes reading at a known line
    instead of reading the log from its first line. ``poll`` and ``max_poll`` bound the
    polling back-off in seconds (0.01 and 0.25 by default; a ``waker`` wakes it sooner).

    Raises:
        SessionNotFoundError: no session ``key`` (at once, not on the first ``next``).
        CorruptLogError: a followed line is corrupt, or the log was cut below what was read.
    """
    return Follow(store, key, after_seq, **options)

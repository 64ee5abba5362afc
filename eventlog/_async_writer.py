"""The async session writer: the shared write API over anyio (runs on asyncio and trio).

No thread hop per append: a line is one ``os.write`` to the page cache, made on the event loop
(a few microseconds); only fsync runs in a worker thread (``anyio.to_thread.run_sync``), once per
batch of appends. The methods are those of the sync writer: ``await writer.append_message(...)``.

An async store keeps one :class:`AsyncSessionLog` per session it writes; each
``await store.session(key)`` returns a new :class:`AsyncSessionWriter` handle over it, so tasks
can each hold (and close) their own writer (``async with await store.session(key) as w:``).

Invariants:
- An append checks for cancellation once before anything is staged: cancelling it there (or
  before) writes nothing.
- A shared log (file, memory) is locked for each write: the lock is tried on the loop and, when
  another process holds it, awaited in a worker thread while this log's other tasks queue
  behind. Catching up, staging, writing the line and folding the event then run with no await
  in between, so tasks on one event loop never interleave lines; ``state`` follows the log.
- Once its line is written, an append is shielded from (anyio) cancellation until the line is
  durable or its fsync failed (``StorageError(durable_unknown=True)``); a cancelled caller then
  sees the cancellation at its next checkpoint, with the line durable.
- ``"batch"``: at most one fsync in flight per log; appends arriving meanwhile share the next
  one (``GroupCommit``); ``batch_window`` bounds how long a leader waits for more appends.
  ``"always"``: every append runs its own fsync after its line is written (outside the lock).
  ``"none"``: no fsync.
- A failed fsync poisons the log (see ``_commit``); unlike the sync writer in ``"always"``
  mode, the line is not cut back: the lock is gone, and the state already folded it.
- A handle's ``close`` syncs what is pending; the log closes with the store: it refuses new
  appends at once, waits for fsyncs in flight, syncs what is pending (shielded), and only then
  closes the descriptor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, Unpack

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._errors import StorageError
from ._events import HELD_LINE, MessageAppended
from ._fold import SessionState, apply, withheld
from ._writeapi import CompactionResult, Draft
from ._writerbase import LogArgs, LogBase, SessionIO, WriterBase


class LockableIO(SessionIO, Protocol):
    """A shared log the async writer locks itself, one write at a time."""

    def lock(self, blocking: bool) -> bool:
        """Take the log's lock (False: busy, when not ``blocking``)."""

    def catch_up(self, state: SessionState) -> None:
        """With the lock held: fold into ``state`` what others appended (may reload)."""

    def unlock(self) -> None:
        """Release the lock."""


class AsyncSessionLog(LogBase):
    """One session's write state in one async store, shared by its writer handles."""

    #: fsync in a worker thread (False: on the loop, for a store whose I/O is offloaded).
    sync_in_thread = True

    def __init__(self, **args: Unpack[LogArgs]) -> None:
        super().__init__(**args)
        io = self.io
        lockable = all(hasattr(io, name) for name in ("lock", "catch_up", "unlock"))
        self._lockable: LockableIO | None = io if lockable else None  # type: ignore[assignment]
        # Tasks waiting for the lock (the first waits in a thread, the rest on ``_turn``).
        self._waiting = 0
        self._turn: anyio.Lock | None = None
        # Set when the group-commit leader in flight finishes.
        self._leader_done: anyio.Event | None = None
        # fsyncs running in worker threads, and an event set when the count drops to zero.
        self._in_flight = 0
        self._idle: anyio.Event | None = None

    def abandon(self) -> None:
        """Close a poisoned log without syncing (its writers' appends then raise)."""
        if not self.closed and not self._in_flight:
            self.closed = True
            self.io.close()

    async def submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        """Stage, write and fold ``draft`` under the log's lock; wait for durability."""
        # The cancel point before the write: a cancelled append writes nothing. With
        # "none" it also yields (the append has no other await); with durability it does not,
        # so a task woken by a finished fsync writes its next line before a new leader starts.
        if self.durability == "none":
            await anyio.lowlevel.checkpoint()
        else:
            await anyio.lowlevel.checkpoint_if_cancelled()
        seq = await self._write(draft, expected_seq, event_id)
        if self.settle is not None:
            self.settle(self.state)
        if self.durability != "none":
            with anyio.CancelScope(shield=True):
                if self.durability == "batch":
                    await self.make_durable(seq)
                else:
                    await self._sync_own(seq)
        return seq

    async def refresh(self) -> int:
        """Fold in what other writers appended (under the lock); return the last seq."""
        self.check_open()
        io = self._lockable
        if io is None:
            return self.state.seq
        await self._acquire(io)
        try:
            io.catch_up(self.state)
            self.rebase_if_reloaded()
        finally:
            io.unlock()
        return self.state.seq

    async def _write(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        io = self._lockable
        if io is None:
            return self._write_now(draft, expected_seq, event_id)
        await self._acquire(io)
        try:
            io.catch_up(self.state)
            self.rebase_if_reloaded()
            return self._write_now(draft, expected_seq, event_id)
        finally:
            io.unlock()

    async def _acquire(self, io: LockableIO) -> None:
        """Hold the log's lock on return, with no await between it and the caller's write."""
        self.check_open()
        if not self._waiting and io.lock(False):
            return
        if self._turn is None:
            self._turn = anyio.Lock()
        self._waiting += 1
        try:
            async with self._turn:
                self.check_open()
                taken = [False]

                def wait() -> None:
                    taken[0] = io.lock(True)

                try:
                    await anyio.to_thread.run_sync(wait)
                except BaseException:
                    if taken[0]:
                        io.unlock()
                    raise
        finally:
            self._waiting -= 1

    def _write_now(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        """Stage, write and fold one event with no await: the serialisation point."""
        self.check_open()
        staged = self.stage(draft, expected_seq, event_id)
        if isinstance(staged, int):
            return staged
        event = staged.event
        if (
            self.settle is not None
            and event.__class__ is MessageAppended
            and not withheld(self.state)
        ):
            event.__dict__[HELD_LINE] = staged.line  # what settling compares (see ``_writer``)
        self.io.append(staged.line)
        apply(self.state, event)
        self.commit.wrote(event.seq)
        return event.seq

    async def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        self.check_open()
        await self.make_durable(self.commit.written)

    async def sync_pending(self) -> None:
        """Make this log's own lines durable (shielded; nothing to do with ``"none"``)."""
        if self.durability != "none" and self.commit.pending and not self.closed:
            with anyio.CancelScope(shield=True):
                await self.make_durable(self.commit.written)

    async def close(self) -> None:
        """Sync what is pending, then release the I/O; shielded from cancellation."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            try:
                if self.durability != "none":
                    await self.make_durable(self.commit.written)
            finally:
                await self._wait_idle()
                self.io.close()

    async def _sync(self) -> None:
        if not self.sync_in_thread:
            self.io.sync()
            return
        self._in_flight += 1
        try:
            await anyio.to_thread.run_sync(self.io.sync)
        finally:
            self._in_flight -= 1
            if not self._in_flight and self._idle is not None:
                self._idle.set()
                self._idle = None

    async def _wait_idle(self) -> None:
        while self._in_flight:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    async def _sync_own(self, seq: int) -> None:
        """``"always"``: an fsync of this append's own, started after its line was written."""
        if self.commit.is_durable(seq):
            return
        target = self.commit.written
        try:
            await self._sync()
        except StorageError as exc:
            self.commit.record(target, exc)
            self.commit.check()
            raise
        self.commit.record(target, None)

    async def make_durable(self, seq: int) -> None:
        """Group commit: return once an fsync covering the line of ``seq`` has finished."""
        commit = self.commit
        while not commit.is_durable(seq):
            if commit.syncing:
                assert self._leader_done is not None
                await self._leader_done.wait()
                continue
            await self._lead()

    async def _lead(self) -> None:
        commit = self.commit
        commit.begin()
        done = self._leader_done = anyio.Event()
        target = commit.written
        try:
            # Let the tasks that are ready (woken by the last fsync) write their lines first.
            await anyio.lowlevel.cancel_shielded_checkpoint()
            if self.batch_window > 0:
                await anyio.sleep(self.batch_window)
            target = commit.written
            await self._sync()
        except StorageError as exc:
            commit.end(target, exc)
        except BaseException:
            commit.abandon()
            raise
        else:
            commit.end(target, None)
        finally:
            done.set()


class AsyncSessionWriter(
    WriterBase[Coroutine[Any, Any, int], Coroutine[Any, Any, CompactionResult], AsyncSessionLog]
):
    """Appends events to one session from async code; from ``await store.session(key)``.

    Same methods as :class:`SessionWriter`; each write is awaited and resolves to its seq.
    Share it between the tasks of one event loop, or give each task its own (not between
    threads: use ``anyio.from_thread.run`` from a worker thread).
    """

    _log_type = AsyncSessionLog

    def __init__(
        self,
        log: AsyncSessionLog,
        *,
        on_close: Callable[[AsyncSessionWriter], Awaitable[None]] | None = None,
        owns_log: bool = False,
    ) -> None:
        super().__init__(log, owns_log=owns_log)
        self._on_close = on_close

    @property
    def durable_seq(self) -> int:
        """The last seq known durable (-1 when nothing is known, with ``"none"``)."""
        return self._log.commit.synced

    async def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        self._check_open()
        await self._log.flush()

    async def refresh(self) -> int:
        """Fold in events other writers appended since this log last looked; return the seq."""
        self._check_open()
        return await self._log.refresh()

    async def close(self) -> None:
        """Sync what is pending and close this writer; shielded from cancellation.

        The session's log stays open for the store's other writers.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                if self._owns_log:
                    await self._log.close()
                else:
                    await self._log.sync_pending()
            finally:
                if self._on_close is not None:
                    await self._on_close(self)

    async def __aenter__(self) -> AsyncSessionWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ---------------------------------------------------------------------------

    async def _then(
        self, result: Coroutine[Any, Any, int], make: Callable[[int], CompactionResult]
    ) -> CompactionResult:
        return make(await result)

    async def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        self._check_open()
        return await self._log.submit(draft, expected_seq, event_id)

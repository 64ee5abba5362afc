"""The async session writer: the shared write API over anyio (runs on asyncio and trio).

No thread hop per append: a line is one ``os.write`` to the page cache, made on the event loop
(a few microseconds); only fsync runs in a worker thread (``anyio.to_thread.run_sync``), once per
batch of appends. The methods are those of the sync writer: ``await writer.append_message(...)``.

Invariants:
- An append checks for cancellation once before anything is staged: cancelling it there (or
  before) writes nothing.
- Staging, writing the line and folding the event run with no await in between, so tasks on one
  event loop are serialised without a lock and never interleave lines; ``state`` always follows
  the log, line for line.
- Once its line is written, an append is shielded from (anyio) cancellation until the line is
  durable or its fsync failed (``StorageError(durable_unknown=True)``); a cancelled caller then
  sees the cancellation at its next checkpoint, with the line durable.
- ``"batch"``: at most one fsync in flight per writer; appends arriving meanwhile share the next
  one (``GroupCommit``); ``batch_window`` bounds how long a leader waits for more appends.
  ``"always"``: every append runs its own fsync after its line is written. ``"none"``: no fsync.
- A failed fsync poisons the writer (see ``_commit``); unlike the sync writer in ``"always"``
  mode, the line is not cut back, because the state already folded it.
- ``close`` refuses new appends at once, waits for fsyncs in flight, syncs what is pending
  (shielded), and only then closes the descriptor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel

from ._commit import GroupCommit
from ._errors import StorageError, StoreClosedError
from ._events import KnownEvent
from ._fold import SessionState, apply
from ._tokens import TokenCounter
from ._writeapi import CompactionResult, Draft, WriteAPI, stage
from ._writer import Durability, SessionIO


class AsyncSessionWriter(WriteAPI[Coroutine[Any, Any, int], Coroutine[Any, Any, CompactionResult]]):
    """Appends events to one session from async code; from ``await store.session(key)``.

    Same methods as :class:`SessionWriter`; each write is awaited and resolves to its seq.
    Share it between the tasks of one event loop (not between threads: use
    ``anyio.from_thread.run`` from a worker thread).
    """

    _io: SessionIO

    def __init__(
        self,
        *,
        key: str,
        io: SessionIO,
        state: SessionState,
        durability: Durability,
        hash_key: bytes,
        token_counter: TokenCounter,
        batch_window: float = 0.0,
        sync_in_thread: bool = True,
        on_close: Callable[[AsyncSessionWriter], Awaitable[None]] | None = None,
        on_append: Callable[[AsyncSessionWriter, KnownEvent], None] | None = None,
    ) -> None:
        self.key = key
        self._io = io
        self._state = state
        self._durability = durability
        self._hash_key = hash_key
        self._count_tokens = token_counter
        self._batch_window = batch_window
        self._sync_in_thread = sync_in_thread
        self._on_close = on_close
        self._on_append = on_append
        self._closed = False
        self._commit = GroupCommit(state.seq, durable=durability != "none")
        # Set when the group-commit leader in flight finishes.
        self._leader_done: anyio.Event | None = None
        # fsyncs running in worker threads, and an event set when the count drops to zero.
        self._in_flight = 0
        self._idle: anyio.Event | None = None

    # -- reading -----------------------------------------------------------------------------

    @property
    def durable_seq(self) -> int:
        """The last seq known durable (-1 when nothing is known, with ``"none"``)."""
        return self._commit.synced

    # -- flush and close ---------------------------------------------------------------------

    async def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        self._check_open()
        await self._make_durable(self._commit.written)

    async def close(self) -> None:
        """Sync what is pending, release the writer lock; later appends raise.

        Shielded from cancellation: the descriptor is closed only after every fsync in flight.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                if self._durability != "none":
                    await self._make_durable(self._commit.written)
            finally:
                await self._wait_idle()
                self._io.close()
                if self._on_close is not None:
                    await self._on_close(self)

    async def __aenter__(self) -> AsyncSessionWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the writer for session {self.key!r} is closed")

    async def _then(
        self, result: Coroutine[Any, Any, int], make: Callable[[int], CompactionResult]
    ) -> CompactionResult:
        return make(await result)

    async def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        # The cancel point before the write: a cancelled append writes nothing. With
        # "none" it also yields (the append has no other await); with durability it does not,
        # so a task woken by a finished fsync writes its next line before a new leader starts.
        if self._durability == "none":
            await anyio.lowlevel.checkpoint()
        else:
            await anyio.lowlevel.checkpoint_if_cancelled()
        seq = self._write_now(draft, expected_seq, event_id)
        if self._durability != "none":
            with anyio.CancelScope(shield=True):
                if self._durability == "batch":
                    await self._make_durable(seq)
                else:
                    await self._sync_own(seq)
        return seq

    def _write_now(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        """Stage, write and fold one event with no await: the serialisation point."""
        self._check_open()
        self._commit.check()
        staged = stage(
            self._state,
            draft,
            key=self.key,
            hash_key=self._hash_key,
            expected_seq=expected_seq,
            event_id=event_id,
            seal=self._seal,
        )
        if isinstance(staged, int):
            return staged
        event = staged.event
        self._io.append(staged.line)
        apply(self._state, event)
        self._commit.wrote(event.seq)
        if self._on_append is not None:
            self._on_append(self, event)
        return event.seq

    async def _sync(self) -> None:
        if not self._sync_in_thread:
            self._io.sync()
            return
        self._in_flight += 1
        try:
            await anyio.to_thread.run_sync(self._io.sync)
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
        if self._commit.is_durable(seq):
            return
        target = self._commit.written
        try:
            await self._sync()
        except StorageError as exc:
            self._commit.record(target, exc)
            self._commit.check()
            raise
        self._commit.record(target, None)

    async def _make_durable(self, seq: int) -> None:
        """Group commit: return once an fsync covering the line of ``seq`` has finished."""
        commit = self._commit
        while not commit.is_durable(seq):
            if commit.syncing:
                assert self._leader_done is not None
                await self._leader_done.wait()
                continue
            await self._lead()

    async def _lead(self) -> None:
        commit = self._commit
        commit.begin()
        done = self._leader_done = anyio.Event()
        target = commit.written
        try:
            # Let the tasks that are ready (woken by the last fsync) write their lines first.
            await anyio.lowlevel.cancel_shielded_checkpoint()
            if self._batch_window > 0:
                await anyio.sleep(self._batch_window)
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

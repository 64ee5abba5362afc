"""The async PostgreSQL store: ``AsyncPostgresStore``, the twin of :class:`PostgresStore`.

Each append (and each open, read, list) runs the sync store's transaction in a worker thread,
so the logic is the sync store's, unchanged, and the same code runs under asyncio and trio.
psycopg's own async connections need an asyncio loop (under trio they fail with "no running
event loop"), so they are not used: one thread hop per append (about 0.3 ms here) is the price
of trio support, small beside the round trips of a transaction.

Invariants:
- The async writer shares its sync writer's state object: what one shows, the other shows.
- Cancelling an append before its thread starts writes nothing; once started, the transaction
  finishes (committed or rolled back) before the cancellation is delivered, so the caller never
  leaves a transaction half done.
- A :meth:`AsyncPostgresStore.batch` runs on one thread of its own from start to end (the sync
  batch's transaction belongs to the thread that opened it): its start, every append in it and
  its commit or rollback.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager
from functools import partial
from typing import Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from ._async_store import AsyncBaseStore, WriterOpening
from ._async_writer import AsyncSessionLog, AsyncSessionWriter
from ._fold import SessionState
from ._pg_common import CatalogRecord
from ._pg_notify import NotifyWaker
from ._postgres import PostgresStore
from ._store_types import OpenReport
from ._writeapi import Draft
from ._writer import SessionWriter

_T = TypeVar("_T")
#: Runs a blocking call off the event loop and awaits its result.
Runner = Callable[[Callable[[], _T]], Awaitable[_T]]


class _BatchThread:
    """One thread that runs every call given to :meth:`run`, in order (a batch's thread)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, name="sessionledger-pg-batch", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    async def run(self, call: Callable[[], _T]) -> _T:
        """``call()`` on this thread; its result or its exception (waited for, shielded)."""
        token = anyio.lowlevel.current_token()
        done = anyio.Event()
        outcome: list[tuple[bool, Any]] = []

        def job() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as exc:  # handed to the awaiting task
                outcome.append((False, exc))
            anyio.from_thread.run_sync(done.set, token=token)

        self._jobs.put(job)
        with anyio.CancelScope(shield=True):  # a started call finishes before cancellation
            await done.wait()
        ok, value = outcome[0]
        if not ok:
            raise value
        return cast(_T, value)

    def stop(self) -> None:
        """End the thread once the calls given so far are done."""
        self._jobs.put(None)


class AsyncPostgresSessionWriter(AsyncSessionWriter):
    """An async writer whose appends run the sync writer's transaction in a worker thread."""

    def __init__(
        self,
        writer: SessionWriter,
        *,
        on_close: Callable[[AsyncSessionWriter], Awaitable[None]] | None = None,
        run: Runner[Any] | None = None,
    ) -> None:
        log = AsyncSessionLog(
            key=writer.key,
            io=writer._io,
            state=writer.state,
            durability="none",
            hash_key=writer.log.hash_key,
            token_counter=writer._count_tokens,
        )
        super().__init__(log, on_close=on_close)
        self._writer = writer
        #: How a blocking call runs: a worker thread, or (in a batch) the batch's thread.
        self._run: Runner[Any] = run or anyio.to_thread.run_sync

    @property
    def state(self) -> SessionState:
        """The folded state as of this writer's last append or refresh."""
        return self._writer.state

    @property
    def seq(self) -> int:
        """The seq of the last event this writer knows of."""
        return self._writer.seq

    @property
    def closed(self) -> bool:
        """True once this writer, its sync writer or the session's log was closed."""
        return self._closed or self._writer.closed

    @property
    def durable_seq(self) -> int:
        """Every event this writer appended is committed (durable) when its append returns."""
        return self._writer.seq

    async def refresh(self) -> int:
        """Fold in events other writers appended; return the last seq."""
        self._check_open()
        return cast(int, await self._run(self._writer.refresh))

    async def flush(self) -> None:
        """Nothing to do: each append returned after its commit."""
        self._check_open()

    async def close(self) -> None:
        """Close the writer; later appends raise :class:`StoreClosedError`."""
        if self._closed:
            return
        self._closed = True
        self._log.closed = True
        with anyio.CancelScope(shield=True):
            await self._run(self._writer.close)
            if self._on_close is not None:
                await self._on_close(self)

    async def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        return cast(
            int, await self._run(partial(self._writer._submit, draft, expected_seq, event_id))
        )


class AsyncPostgresStore(AsyncBaseStore):
    """Sessions in PostgreSQL from async code (asyncio or trio): the twin of PostgresStore.

    Takes the same arguments as :class:`PostgresStore`. The constructor connects (bounded by
    ``connect_timeout``); :meth:`connect` does that in a worker thread instead. The schema is
    created or migrated with the store's first statement (or by :meth:`ensure_schema`).
    """

    def __init__(self, dsn: str, **kwargs: Any) -> None:
        self._pg = PostgresStore(dsn, **kwargs)
        super().__init__(self._pg, offload=True)

    @classmethod
    async def connect(cls, dsn: str, **kwargs: Any) -> AsyncPostgresStore:
        """Build the store without blocking the event loop."""
        return await anyio.to_thread.run_sync(partial(cls, dsn, **kwargs))

    def __repr__(self) -> str:
        return f"AsyncPostgresStore({self._pg.target.where!r}, durability={self.durability!r})"

    @property
    def postgres(self) -> PostgresStore:
        """The sync store underneath (same database)."""
        return self._pg

    def session(
        self, key: str, *, metadata: Mapping[str, Any] | None = None
    ) -> WriterOpening[AsyncPostgresSessionWriter]:
        """A writer for ``key``, creating the session on first use: await it or ``async with``."""
        return cast(
            WriterOpening[AsyncPostgresSessionWriter], super().session(key, metadata=metadata)
        )

    def open(self, key: str) -> WriterOpening[AsyncPostgresSessionWriter]:
        """A writer for an existing session (:class:`SessionNotFoundError` for a new key)."""
        return cast(WriterOpening[AsyncPostgresSessionWriter], super().open(key))

    async def _make_writer(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[AsyncSessionWriter, OpenReport | None]:
        opener: Callable[[], SessionWriter] = (
            partial(self._pg.session, key, metadata=metadata)
            if create
            else partial(self._pg.open, key)
        )
        sync_writer = await anyio.to_thread.run_sync(opener)
        writer = AsyncPostgresSessionWriter(sync_writer, on_close=self._forget)
        return writer, self._pg.open_report(key)

    @asynccontextmanager
    async def batch(self, key: str) -> AsyncIterator[AsyncPostgresSessionWriter]:
        """Group the appends made in the block into one transaction (one lock, one commit).

        The twin of :meth:`PostgresStore.batch`: yields a writer of the session whose appends
        join the transaction; other writers' appends to it wait until the block ends. If the
        block raises (or is cancelled), nothing of it is written.
        """
        thread = _BatchThread()
        try:
            block: AbstractContextManager[SessionWriter] = self._pg.batch(key)
            sync_writer = await thread.run(block.__enter__)
            try:
                yield AsyncPostgresSessionWriter(sync_writer, run=thread.run)
            except BaseException as exc:
                await thread.run(partial(block.__exit__, type(exc), exc, exc.__traceback__))
                raise
            await thread.run(partial(block.__exit__, None, None, None))
        finally:
            thread.stop()

    async def state(self, key: str) -> SessionState:
        """The current folded state of ``key`` (what every writer has committed)."""
        return await anyio.to_thread.run_sync(partial(self._pg.state, key))

    async def query_catalog_records(self, filter: Any) -> list[CatalogRecord]:
        """The catalog rows ``filter`` selects (see :meth:`PostgresStore.query_catalog_records`)."""
        return await anyio.to_thread.run_sync(partial(self._pg.query_catalog_records, filter))

    async def ensure_schema(self) -> None:
        """Create or migrate the schema now (see :meth:`PostgresStore.ensure_schema`)."""
        await anyio.to_thread.run_sync(self._pg.ensure_schema)

    def follow_waker(self, key: str) -> NotifyWaker:
        """A waker for ``replay.follow`` (see :meth:`PostgresStore.follow_waker`)."""
        return self._pg.follow_waker(key)

    async def committed(self, key: str, event_id: str) -> int | None:
        """The seq ``event_id`` was committed at, or None (see :meth:`PostgresStore.committed`)."""
        return await anyio.to_thread.run_sync(partial(self._pg.committed, key, event_id))

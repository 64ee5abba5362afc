"""The async stores: ``AsyncFileStore`` and ``AsyncMemoryStore``, twins of the sync stores.

An async store wraps a private sync store of the same backend and reuses its logic unchanged
(opening, checking and folding a log, cutting a torn tail, reading, listing, deleting); only the
writers differ (:class:`AsyncSessionWriter`). Blocking work that is not per append (opening a
session, waiting for another process's lock, reading a whole log, listing, deleting) runs in a
worker thread for the file store; the memory store runs it inline.

Invariants:
- One writer per key per store: concurrent ``session(key)`` calls return the same writer
  (opens are serialised by one lock per store).
- ``close()`` (and ``async with store:``) closes every writer, each syncing what is pending,
  shielded from cancellation; later calls raise :class:`StoreClosedError`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Self, TypeVar

import anyio
import anyio.lowlevel

from ._async_writer import AsyncSessionWriter
from ._errors import StoreClosedError
from ._events import Event
from ._filestore import FileStore
from ._fold import SessionState
from ._keystore import KeyProvider, KeyStore
from ._memstore import MemoryStore
from ._names import check_key
from ._store import BaseStore
from ._store_types import LoadedLog, OpenReport
from ._tokens import TokenCounter
from ._values import encode_checked
from ._writer import Durability

_T = TypeVar("_T")


class _EventStream:
    """Async iterator over a session's events, read when first awaited."""

    def __init__(self, store: AsyncBaseStore, key: str) -> None:
        self._store = store
        self._key = key
        self._events: Iterator[Event] | None = None

    def __aiter__(self) -> _EventStream:
        return self

    async def __anext__(self) -> Event:
        if self._events is None:
            self._events = iter((await self._store.load(self._key)).events)
        try:
            return next(self._events)
        except StopIteration:
            raise StopAsyncIteration from None


class AsyncBaseStore:
    """Shared logic of the async stores over a sync store (``self.sync``)."""

    def __init__(self, sync: BaseStore, *, offload: bool) -> None:
        self._sync = sync
        self._offload = offload
        self._writers: dict[str, AsyncSessionWriter] = {}
        self._reports: dict[str, OpenReport] = {}
        self._opening: anyio.Lock | None = None
        self._closed = False

    @property
    def sync(self) -> BaseStore:
        """The sync store underneath (same backend, same files); for tools and reads."""
        return self._sync

    @property
    def durability(self) -> Durability:
        """``"always"``, ``"batch"`` or ``"none"``."""
        return self._sync.durability

    @property
    def hash_key(self) -> bytes:
        """The secret the chain is keyed with (empty: unkeyed)."""
        return self._sync.hash_key

    async def _run(self, func: Callable[[], _T]) -> _T:
        if self._offload:
            return await anyio.to_thread.run_sync(func)
        await anyio.lowlevel.checkpoint()
        return func()

    # -- writers -----------------------------------------------------------------------------

    async def session(
        self, key: str, *, metadata: Mapping[str, Any] | None = None
    ) -> AsyncSessionWriter:
        """Return this store's writer for ``key``, creating the session on first use.

        Waits up to the store's ``lock_timeout`` for another process's writer lock, then raises
        :class:`LockedError`.
        """
        key = check_key(key)
        if metadata:
            encode_checked(metadata, "metadata")
        return await self._session(key, create=True, metadata=metadata)

    async def open(self, key: str) -> AsyncSessionWriter:
        """Like :meth:`session`, but raise :class:`SessionNotFoundError` for a new key."""
        return await self._session(check_key(key), create=False, metadata=None)

    def open_report(self, key: str) -> OpenReport | None:
        """What opening ``key`` found in this store (torn tail, quarantine), if opened."""
        return self._reports.get(key)

    async def _session(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> AsyncSessionWriter:
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._closed:
                raise StoreClosedError("the store is closed")
            writer = self._writers.get(key)
            if writer is not None and not writer.closed:
                return writer
            writer, report = await self._make_writer(key, create=create, metadata=metadata)
            self._writers[key] = writer
            if report is not None:
                self._reports[key] = report
            return writer

    async def _make_writer(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[AsyncSessionWriter, OpenReport | None]:
        """Open ``key`` (under the store's opening lock) and wrap it in an async writer."""
        opener = partial(self._sync._open_checked, key, create=create, metadata=metadata)
        raw, state, report = await self._run(opener)
        writer = AsyncSessionWriter(
            key=key,
            io=raw.io,
            state=state,
            durability=self._sync.durability,
            hash_key=self._sync.hash_key,
            token_counter=self._sync.token_counter,
            batch_window=self._sync.batch_window,
            sync_in_thread=self._offload,
            on_close=self._forget,
        )
        self._sync._arm_writer(writer)
        return writer, report

    async def _forget(self, writer: AsyncSessionWriter) -> None:
        if self._writers.get(writer.key) is writer:
            del self._writers[writer.key]
        # The sync store's snapshot policy (a snapshot once enough events were written); it
        # reads only the writer's key and state, and writes nothing when there is no policy.
        snapshot_on_close = getattr(self._sync, "_snapshot_on_close", None)
        if snapshot_on_close is not None:
            await self._run(partial(snapshot_on_close, writer))

    # -- reading -----------------------------------------------------------------------------

    async def load(self, key: str, *, prefix: bool = False) -> LoadedLog:
        """Read and fold a session without its writer lock (see :meth:`BaseStore.load`)."""
        return await self._run(partial(self._sync.load, key, prefix=prefix))

    async def state(self, key: str) -> SessionState:
        """The current folded state of ``key`` (from this store's writer when one is open)."""
        writer = self._writers.get(key)
        if writer is not None and not writer.closed:
            return writer.state
        return (await self.load(key)).state

    def events(self, key: str) -> AsyncIterator[Event]:
        """Iterate over a session's events, oldest first: ``async for e in store.events(k)``."""
        return _EventStream(self, check_key(key))

    async def read_bytes(self, key: str) -> bytes:
        """Return a session's log bytes exactly as stored."""
        return await self._run(partial(self._sync.read_bytes, key))

    async def keys(self) -> list[str]:
        """Every session key in the store, sorted."""
        return await self._run(self._sync.keys)

    async def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists."""
        return await self._run(partial(self._sync.exists, key))

    # -- removal and shutdown ----------------------------------------------------------------

    async def delete(self, key: str) -> bool:
        """Remove a session for good (closing this store's writer first); True if it existed."""
        key = check_key(key)
        writer = self._writers.pop(key, None)
        if writer is not None:
            await writer.close()
        self._reports.pop(key, None)
        return await self._run(partial(self._sync.delete, key))

    # -- privacy (see the sync store's methods) -----------------------------------------------

    async def _privately(self, key: str, func: Callable[[], _T]) -> _T:
        # The sync store appends the event with its own writer: close ours first, and its own
        # after, so the next async open takes the lock again.
        key = check_key(key)
        writer = self._writers.pop(key, None)
        if writer is not None:
            await writer.close()

        def run() -> _T:
            try:
                return func()
            finally:
                self._sync._close_writer(key)

        return await self._run(run)

    async def erase(self, key: str, *, by: str | None = None, reason: str | None = None) -> int:
        """Erase a session's content by destroying its keys (see :meth:`BaseStore.erase`)."""
        return await self._privately(key, partial(self._sync.erase, key, by=by, reason=reason))

    async def redact(
        self, key: str, seq: int, *, by: str | None = None, reason: str | None = None
    ) -> int:
        """Redact one message by destroying its key (see :meth:`BaseStore.redact`)."""
        return await self._privately(
            key, partial(self._sync.redact, key, seq, by=by, reason=reason)
        )

    async def rotate_master_key(self, *, retire: bool = True) -> int:
        """Rewrap every session key under a new master key (see the sync store)."""
        return await self._run(partial(self._sync.rotate_master_key, retire=retire))

    async def close(self) -> None:
        """Sync and close every open writer (graceful shutdown); shielded from cancellation."""
        self._closed = True
        writers = list(self._writers.values())
        self._writers.clear()
        errors: list[Exception] = []
        with anyio.CancelScope(shield=True):
            for writer in writers:
                try:
                    await writer.close()
                except Exception as exc:  # close the others, then report the first
                    errors.append(exc)
            try:
                await self._run(self._sync.close)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncFileStore(AsyncBaseStore):
    """Sessions as JSONL files in ``root``: the async twin of :class:`FileStore`.

    Takes the same arguments as :class:`FileStore`. Appends write on the event loop; fsyncs,
    opens and whole-log reads run in worker threads.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durability: Durability | str = "batch",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        lock_timeout: float = 0.0,
        batch_window: float = 0.0,
        key_provider: KeyProvider | None = None,
        key_store: KeyStore | None = None,
    ) -> None:
        self._files = FileStore(
            root,
            durability=durability,
            hash_key=hash_key,
            token_counter=token_counter,
            lock_timeout=lock_timeout,
            batch_window=batch_window,
            key_provider=key_provider,
            key_store=key_store,
        )
        super().__init__(self._files, offload=True)

    def __repr__(self) -> str:
        return f"AsyncFileStore({str(self.root)!r}, durability={self.durability!r})"

    @property
    def root(self) -> Path:
        """The store's directory."""
        return self._files.root

    def path_for(self, key: str) -> Path:
        """The log file of ``key`` (it may not exist yet)."""
        return self._files.path_for(key)


class AsyncMemoryStore(AsyncBaseStore):
    """Sessions held in memory: the async twin of :class:`MemoryStore` (no threads at all)."""

    def __init__(
        self,
        *,
        durability: Durability | str = "none",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        key_provider: KeyProvider | None = None,
        key_store: KeyStore | None = None,
    ) -> None:
        self._memory = MemoryStore(
            durability=durability,
            hash_key=hash_key,
            token_counter=token_counter,
            key_provider=key_provider,
            key_store=key_store,
        )
        super().__init__(self._memory, offload=False)

    def __repr__(self) -> str:
        return f"AsyncMemoryStore({len(self._memory.keys())} sessions)"

    def put_bytes(self, key: str, data: bytes) -> None:
        """Replace a session's raw bytes (for tests and imports that build logs by hand)."""
        self._memory.put_bytes(key, data)

"""The async stores: ``AsyncFileStore`` and ``AsyncMemoryStore``, twins of the sync stores.

An async store wraps a private sync store of the same backend and reuses its logic unchanged
(opening, checking and folding a log, cutting a torn tail, reading, listing, deleting,
lifecycle, the trash, snapshots); only the writers differ (:class:`AsyncSessionWriter`).
Blocking work that is not per append runs in a worker thread for the file store; the memory
store runs it inline. Every public method of the sync store has its twin here: an ``async``
method of the same name for anything that does I/O, the same plain attribute otherwise.

Invariants:
- One log per key per store (concurrent ``session(key)`` calls share it; opens are serialised
  by one lock per store); each call returns its own writer handle. The sync store underneath
  writes through its own logs (lifecycle operations do): both are writers of one log, each
  folding in the other's events on its next write.
- ``close()`` (and ``async with store:``) closes every log, each syncing what is pending,
  shielded from cancellation; later calls raise :class:`StoreClosedError`.
"""

from __future__ import annotations

import os
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, Unpack

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._async_writer import AsyncSessionLog, AsyncSessionWriter
from ._catchup import catch_up
from ._crypto import Keyring
from ._errors import StoreClosedError
from ._events import Event, Header
from ._filestore import FileStore, FileStoreArgs
from ._fold import SessionState
from ._lifecycle import CleanupReport, EndHook, TrashEntry
from ._memstore import MemoryStore, MemoryStoreArgs
from ._names import check_key
from ._store import BaseStore
from ._store_types import CutReport, LoadedLog, OpenReport
from ._tokens import TokenCounter
from ._values import encode_checked
from ._views import SnapshotStatus
from ._writer import Durability

_T = TypeVar("_T")
_W = TypeVar("_W", bound=AsyncSessionWriter, covariant=True)


class WriterOpening(Generic[_W]):
    """What ``store.session(key)`` returns: await it for a writer, or ``async with`` it.

    ``async with store.session(key) as w:`` closes the writer (syncing what is pending) when the
    block ends; the session's log stays open for the store's other writers.
    """

    def __init__(self, opener: Callable[[], Awaitable[_W]]) -> None:
        self._opener = opener
        self._writer: _W | None = None

    def __await__(self) -> Generator[Any, None, _W]:
        return self._opener().__await__()

    async def __aenter__(self) -> _W:
        self._writer = await self._opener()
        return self._writer

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            await self._writer.close()


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
        self._logs: dict[str, AsyncSessionLog] = {}
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

    @property
    def token_counter(self) -> TokenCounter:
        """Counts a message's tokens at write time."""
        return self._sync.token_counter

    @property
    def snapshot_every(self) -> int:
        """Events past the last snapshot that make a closing writer write a new one."""
        return self._sync.snapshot_every

    @property
    def settle_every(self) -> int:
        """Events a writer holds in memory before it indexes them (see the sync store)."""
        return self._sync.settle_every

    @property
    def trash_ttl(self) -> timedelta:
        """How long a trashed session stays restorable."""
        return self._sync.trash_ttl

    async def _run(self, func: Callable[[], _T]) -> _T:
        if self._offload:
            return await anyio.to_thread.run_sync(func)
        await anyio.lowlevel.checkpoint()
        return func()

    # -- writers -----------------------------------------------------------------------------

    def session(
        self, key: str, *, metadata: Mapping[str, Any] | None = None
    ) -> WriterOpening[AsyncSessionWriter]:
        """A writer for ``key``, creating the session on first use: await it or ``async with``.

        Each call gives a new writer over the store's one log of the session (see
        :meth:`BaseStore.session`); other stores and processes may write it at the same time.
        """
        key = check_key(key)
        if metadata:
            encode_checked(metadata, "metadata")
        return WriterOpening(partial(self._session, key, create=True, metadata=metadata))

    def open(self, key: str) -> WriterOpening[AsyncSessionWriter]:
        """A writer for an existing session: :meth:`session` that never creates one.

        Raises :class:`SessionNotFoundError` for a new key. To read, use :meth:`load` or
        :meth:`state` (they never lock).
        """
        key = check_key(key)
        return WriterOpening(partial(self._session, key, create=False, metadata=None))

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
            writer, report = await self._make_writer(key, create=create, metadata=metadata)
            if report is not None:
                self._reports[key] = report
            return writer

    async def _make_writer(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[AsyncSessionWriter, OpenReport | None]:
        """A new writer over ``key``'s log, opened (under the store's opening lock) if needed."""
        log = self._logs.get(key)
        report = None
        if log is not None and log.poisoned:  # reopen from what is really on disk
            log.abandon()
            log = None
        if log is None or log.closed:
            sync = self._sync
            opened = partial(sync._open_log, key, create=create, metadata=metadata)
            args, report = await self._run(opened)
            log = AsyncSessionLog(**args)
            log.sync_in_thread = self._offload
            log.settle = sync._views.settler(key)
            writer = AsyncSessionWriter(log, on_close=self._forget)
            # an encrypted store's sealer, and erasures a crash left unfinished
            await self._run(partial(sync._privacy.arm_writer, writer))
            self._logs[key] = log
            return writer, report
        return AsyncSessionWriter(log, on_close=self._forget), report

    async def _forget(self, writer: AsyncSessionWriter) -> None:
        # The sync store's snapshot policy (a snapshot once enough events were written); it
        # reads only the writer's key and state, and writes nothing when there is no policy.
        # A copy taken here, between awaits: the session's other writers may append while the
        # snapshot is written in a worker thread.
        state = writer.state.copy()
        await self._run(partial(self._sync._views.on_close, writer, state))

    # -- reading -----------------------------------------------------------------------------

    async def load(self, key: str, *, prefix: bool = False, snapshot: bool = True) -> LoadedLog:
        """Read and fold a session without locking it (see :meth:`BaseStore.load`)."""
        return await self._run(partial(self._sync.load, key, prefix=prefix, snapshot=snapshot))

    async def state(self, key: str) -> SessionState:
        """The current folded state of ``key``, with what every writer has appended (no lock)."""
        key = check_key(key)
        log = self._logs.get(key)
        if log is not None and not log.closed:
            io: Any = log.io
            if hasattr(io, "observe") and catch_up(self._sync, key, io, log.state, locked=False):
                return log.state
        return (await self.load(key)).state

    def events(self, key: str) -> AsyncIterator[Event]:
        """Iterate over a session's events, oldest first: ``async for e in store.events(k)``."""
        return _EventStream(self, check_key(key))

    async def read_bytes(self, key: str) -> bytes:
        """Return a session's log bytes exactly as stored."""
        return await self._run(partial(self._sync.read_bytes, key))

    async def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on (for followers)."""
        return await self._run(partial(self._sync.read_tail, key, offset))

    async def keys(self) -> list[str]:
        """Every session key in the store, sorted."""
        return await self._run(self._sync.keys)

    async def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists."""
        return await self._run(partial(self._sync.exists, key))

    async def writer_lock_held(self, key: str) -> bool:
        """Whether another writer is writing ``key`` at this moment."""
        return await self._run(partial(self._sync.writer_lock_held, key))

    # -- lifecycle (run by the sync store; this store's writers fold its events in) ----------

    def on_end(self, hook: EndHook) -> EndHook:
        """Register ``hook(final_state, reason)``, called once whenever a session ends.

        Hooks run where the ending runs: in a worker thread for the file store.
        """
        return self._sync.on_end(hook)

    def on_close(self, hook: Callable[[], object]) -> Callable[[], object]:
        """Register ``hook()``, called once when the store closes (see :meth:`BaseStore.on_close`)."""
        return self._sync.on_close(hook)

    async def archive(self, key: str) -> bool:
        """End ``key`` as archived; False if it already was (see :meth:`BaseStore.archive`)."""
        return await self._run(partial(self._sync.archive, key))

    async def reset(
        self, key: str, *, keep_metadata: Iterable[str] = (), keep_system: bool = True
    ) -> int:
        """Clear ``key``'s messages but its system prompt (see :meth:`BaseStore.reset`)."""
        call = partial(self._sync.reset, key, keep_metadata=keep_metadata, keep_system=keep_system)
        return await self._run(call)

    async def new_session(self, key: str) -> int:
        """``/new``: end the current conversation and start a fresh one; return its seq."""
        return await self._run(partial(self._sync.new_session, key))

    async def resume(
        self, key: str, start_seq: int, *, by: str | None = None, id: str | None = None
    ) -> int:
        """Make an ended conversation of ``key`` current again (see :meth:`BaseStore.resume`)."""
        return await self._run(partial(self._sync.resume, key, start_seq, by=by, id=id))

    async def mark_idle(
        self, older_than: timedelta | float, *, now: datetime | None = None
    ) -> list[str]:
        """Set ``idle`` on active sessions with no event for ``older_than``; return their keys."""
        return await self._run(partial(self._sync.mark_idle, older_than, now=now))

    async def latest_session(self, prefix: str) -> str | None:
        """The key starting with ``prefix`` whose last event is newest (None if none)."""
        return await self._run(partial(self._sync.latest_session, prefix))

    async def cleanup(
        self,
        older_than: timedelta | float,
        *,
        state: str | None = None,
        now: datetime | None = None,
    ) -> CleanupReport:
        """Move sessions idle for longer than ``older_than`` to the trash; purge expired trash."""
        call = partial(self._sync.cleanup, older_than, state=state, now=now)
        report = await self._run(call)
        for key in report.trashed:
            await self._drop_log(key)
        return report

    async def trash(self) -> list[TrashEntry]:
        """Sessions in the trash, oldest first."""
        return await self._run(self._sync.trash)

    async def restore(self, entry: TrashEntry | str) -> str:
        """Bring a trashed session back (by entry or id); return its key."""
        return await self._run(partial(self._sync.restore, entry))

    async def purge_trash(self, *, now: datetime | None = None) -> list[TrashEntry]:
        """Remove for good the trash entries older than ``trash_ttl``; return them."""
        return await self._run(partial(self._sync.purge_trash, now=now))

    # -- replay support and derived views ------------------------------------------------------

    async def cut(
        self, key: str, offset: int, *, reason: str, expect_length: int | None = None
    ) -> CutReport | None:
        """Move the bytes after ``offset`` into quarantine (see :meth:`BaseStore.cut`)."""
        call = partial(self._sync.cut, key, offset, reason=reason, expect_length=expect_length)
        return await self._run(call)

    async def import_bytes(
        self, key: str, data: bytes, *, rejected: Sequence[tuple[str, int, int, bytes]] = ()
    ) -> str:
        """Install a whole, valid log built elsewhere (see :meth:`BaseStore.import_bytes`)."""
        return await self._run(partial(self._sync.import_bytes, key, data, rejected=rejected))

    async def snapshot_status(self, key: str) -> SnapshotStatus:
        """Check ``key``'s snapshot against its log."""
        return await self._run(partial(self._sync.snapshot_status, key))

    async def write_snapshot(self, key: str, *, rebuild: bool = False) -> SnapshotStatus:
        """Bring ``key``'s snapshot up to the end of its log."""
        return await self._run(partial(self._sync.write_snapshot, key, rebuild=rebuild))

    async def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None: none kept)."""
        return await self._run(partial(self._sync.snapshot_bytes, key))

    async def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Store (or with None, remove) the snapshot of ``key``, atomically."""
        await self._run(partial(self._sync.put_snapshot, key, data))

    # -- removal and shutdown ----------------------------------------------------------------

    async def _drop_log(self, key: str) -> None:
        log = self._logs.pop(key, None)
        self._reports.pop(key, None)
        if log is not None:
            await log.close()

    async def delete(self, key: str) -> bool:
        """Remove a session for good (closing this store's writers first); True if it existed."""
        key = check_key(key)
        await self._drop_log(key)
        return await self._run(partial(self._sync.delete, key))

    # -- privacy (see the sync store's methods) -----------------------------------------------

    async def _privately(self, key: str, func: Callable[[], _T]) -> _T:
        # The sync store appends the event with its own writer: close ours first, and its own
        # after, so the next async open takes the lock again.
        key = check_key(key)
        await self._drop_log(key)

        def run() -> _T:
            try:
                return func()
            finally:
                self._sync._close_writer(key)

        return await self._run(run)

    @property
    def encrypted(self) -> bool:
        """Whether this store seals the sessions it creates (it has a key provider)."""
        return self._sync.encrypted

    @property
    def keyring(self) -> Keyring | None:
        """The store's key provider and key store (None: no encryption)."""
        return self._sync.keyring

    async def open_header(self, key: str, header: Header) -> Header:
        """A header read by hand, its sealed values opened (see :meth:`BaseStore.open_header`)."""
        return await self._run(partial(self._sync.open_header, key, header))

    async def open_events(self, key: str, header: Header, events: list[Event]) -> list[Event]:
        """Events read by hand, opened as ``load`` opens them (see the sync store)."""
        return await self._run(partial(self._sync.open_events, key, header, events))

    async def finish_erasures(self, key: str) -> bool:
        """Destroy keys an interrupted erase or redact left; True if any (see the sync store)."""
        return await self._run(partial(self._sync.finish_erasures, key))

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
        logs = list(self._logs.values())
        self._logs.clear()
        errors: list[Exception] = []
        with anyio.CancelScope(shield=True):
            for log in logs:
                try:
                    await log.close()
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
    opens, waits for a busy lock and whole-log reads run in worker threads.
    """

    def __init__(self, root: str | os.PathLike[str], **args: Unpack[FileStoreArgs]) -> None:
        self._files = FileStore(root, **args)
        super().__init__(self._files, offload=True)

    def __repr__(self) -> str:
        return f"AsyncFileStore({str(self.root)!r}, durability={self.durability!r})"

    @property
    def root(self) -> Path:
        """The store's directory."""
        return self._files.root

    @property
    def max_open_files(self) -> int:
        """Most log descriptors this store keeps open for its writers."""
        return self._files.max_open_files

    def open_files(self) -> int:
        """Log descriptors open for writers right now."""
        return self._files.open_files()

    def path_for(self, key: str) -> Path:
        """The log file of ``key`` (it may not exist yet)."""
        return self._files.path_for(key)

    def quarantine_path(self, key: str) -> Path:
        """Where bytes cut from ``key``'s log are kept."""
        return self._files.quarantine_path(key)

    def snapshot_path(self, key: str) -> Path:
        """Where ``key``'s snapshot is kept."""
        return self._files.snapshot_path(key)

    async def compress_segments(self, key: str) -> list[Path]:
        """Gzip the closed segments of ``key``'s log (see :meth:`FileStore.compress_segments`)."""
        return await self._run(lambda: self._files.compress_segments(key))

    async def stray_segments(self) -> list[tuple[Path, str]]:
        """Closed-segment files no log reads (see :meth:`FileStore.stray_segments`)."""
        return await self._run(self._files.stray_segments)

    async def clean_leftovers(self) -> list[str]:
        """Remove what crashed processes left (see :meth:`FileStore.clean_leftovers`)."""
        return await self._run(self._files.clean_leftovers)


class AsyncMemoryStore(AsyncBaseStore):
    """Sessions held in memory: the async twin of :class:`MemoryStore` (no threads at all)."""

    def __init__(self, **args: Unpack[MemoryStoreArgs]) -> None:
        self._memory = MemoryStore(**args)
        super().__init__(self._memory, offload=False)

    def __repr__(self) -> str:
        return f"AsyncMemoryStore({len(self._memory.keys())} sessions)"

    @property
    def quarantined(self) -> dict[str, list[tuple[str, int, int, bytes]]]:
        """Bytes cut from logs, per key: (reason, line, offset, data)."""
        return self._memory.quarantined

    def peer(self) -> AsyncMemoryStore:
        """Another async store over the same sessions (like a second process)."""
        other = AsyncMemoryStore(durability=self.durability, hash_key=self.hash_key or None)
        other._memory = self._memory.peer()
        other._sync = other._memory
        return other

    async def put_bytes(self, key: str, data: bytes) -> None:
        """Replace a session's raw bytes (for tests and imports that build logs by hand)."""
        await self._run(partial(self._memory.put_bytes, key, data))

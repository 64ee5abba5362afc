"""The in-memory store: the reference backend, the same bytes as the file store, no files.

Useful in tests and for agents that need no persistence. Quarantined bytes are kept in
:attr:`MemoryStore.quarantined`. :meth:`MemoryStore.peer` gives a second store object over the
same sessions, as a second process opening the same directory would: both write every session,
each write under one lock shared by the peers, folding in what the other appended.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType
from typing import TypedDict

from ._backend import Backend, CatchUp, KeyScan, LogStat, TrashBin, TrashEntry
from ._errors import SessionNotFoundError
from ._fold import SessionState
from ._indexsnap import IndexMeta
from ._keystore import KeyProvider, KeyStore, MemoryKeyStore
from ._snapshot import Snapshot
from ._store import BaseStore
from ._store_types import RawSession
from ._tokens import TokenCounter
from ._writer import Durability, SessionIO


class _Sessions:
    """What peers share: the logs, their lock, the trash and the derived views."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.logs: dict[str, bytearray] = {}
        self.trashed: dict[str, tuple[TrashEntry, bytearray]] = {}
        self.quarantined: dict[str, list[tuple[str, int, int, bytes]]] = {}
        self.snapshots: dict[str, bytes] = {}
        self.catalog: bytes | None = None
        self.cuts: dict[str, int] = {}


class _MemoryIO:
    def __init__(
        self, shared: _Sessions, catch_up: CatchUp, key: str, log: bytearray, *, locked: bool
    ) -> None:
        self.name = f"memory:{key}"
        self.stale = False
        self._shared = shared
        self._catch_up = catch_up
        self._key = key
        self._log = log
        self._size = len(log)
        self._locked = locked
        self._depth = 0
        self._state: SessionState | None = None

    def append(self, data: bytes) -> None:
        self._log += data
        self._size += len(data)

    def sync(self) -> None:
        return None

    def truncate(self, size: int) -> None:
        del self._log[size:]
        self._size = size
        cuts = self._shared.cuts
        cuts[self._key] = cuts.get(self._key, 0) + 1

    def size(self) -> int:
        return self._size

    def set_size(self, size: int) -> None:
        self._size = size

    def close(self) -> None:
        if self._locked:
            self._locked = False
            self._shared.lock.release()

    def release(self) -> None:
        """Opened under the lock; from now on each write takes it."""
        self.close()

    def observe(self) -> int:
        if self._shared.logs.get(self._key) is not self._log:
            raise SessionNotFoundError(self._key)
        return len(self._log)

    def read_from(self, offset: int) -> bytes:
        return bytes(self._log[offset:])

    @contextlib.contextmanager
    def pinned(self) -> Iterator[bool]:
        with self._shared.lock:
            yield True

    def lock(self, blocking: bool) -> bool:
        """Take the peers' lock for one write."""
        if self._shared.lock.acquire(blocking):
            self._depth = 1
            return True
        return False

    def catch_up(self, state: SessionState) -> None:
        """With the lock held: fold in what peers appended."""
        self._catch_up(self._key, self, state, locked=True)

    def unlock(self) -> None:
        """Release the lock taken by :meth:`lock`."""
        self._depth = 0
        self._shared.lock.release()

    def transaction(self, state: SessionState) -> _MemoryIO:
        self._state = state
        return self

    def __enter__(self) -> None:
        if self._depth:
            self._depth += 1
            return
        lock = self._shared.lock
        lock.acquire()
        self._depth = 1
        try:
            assert self._state is not None
            self._catch_up(self._key, self, self._state, locked=True)
        except BaseException:
            self._depth = 0
            lock.release()
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if not self._depth:
            self._shared.lock.release()


class _Raw:
    __slots__ = ("created", "data", "io")

    def __init__(self, io: _MemoryIO, data: bytes, created: bool) -> None:
        self.io = io
        self.data = data
        self.created = created


class MemoryBackend(Backend):
    """Logs as byte arrays in :class:`_Sessions` (shared by peers)."""

    def __init__(self) -> None:
        #: What this backend's peers share (a peer's backend is given the same).
        self.shared = _Sessions()
        self._trash = _MemoryTrash(self)
        self._catalog = _MemoryCatalog(self)

    def describe(self, key: str) -> str:
        """``memory:`` and the key."""
        return f"memory:{key}"

    def open_raw(
        self, key: str, create: bool, snap: Snapshot | IndexMeta | None = None
    ) -> _Raw | None:
        """The log's bytes, with the peers' lock held."""
        shared = self.shared
        shared.lock.acquire()
        try:
            log = shared.logs.get(key)
            created = log is None
            if log is None:
                if not create:
                    shared.lock.release()
                    return None
                log = shared.logs[key] = bytearray()
            io = _MemoryIO(shared, self.catch_up, key, log, locked=True)
            return _Raw(io, bytes(log), created)
        except BaseException:
            shared.lock.release()
            raise

    def release(self, io: SessionIO) -> None:
        """Drop the lock taken to open; each write takes it from now on."""
        assert isinstance(io, _MemoryIO)
        io.release()

    def discard_new(self, key: str, io: SessionIO) -> None:
        """Forget a log this open created and never started (the peers' lock is held)."""
        log = self.shared.logs.get(key)
        if log is not None and not log:
            del self.shared.logs[key]

    def discard_import(self, key: str, raw: RawSession) -> None:
        """Forget a log a failed import created (the peers' lock is still held)."""
        self.remove(key)

    def read(self, key: str) -> bytes | None:
        """A copy of the log."""
        with self.shared.lock:
            log = self.shared.logs.get(key)
            return None if log is None else bytes(log)

    def quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        """Kept in :attr:`MemoryStore.quarantined`."""
        self.shared.quarantined.setdefault(key, []).append((reason, line, offset, data))
        return f"memory-quarantine:{key}"

    def list_keys(self) -> list[str]:
        """Every key."""
        with self.shared.lock:
            return list(self.shared.logs)

    def remove(self, key: str) -> bool:
        """Drop the log, its snapshot and its quarantine."""
        shared = self.shared
        with shared.lock:
            shared.quarantined.pop(key, None)
            shared.snapshots.pop(key, None)
            return shared.logs.pop(key, None) is not None

    def trash(self) -> _MemoryTrash:
        """Trashed logs, kept in memory."""
        return self._trash

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None when there is none)."""
        return self.shared.snapshots.get(key)

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Replace (or with None, remove) ``key``'s snapshot."""
        if data is None:
            self.shared.snapshots.pop(key, None)
        else:
            self.shared.snapshots[key] = bytes(data)

    def catalog_source(self) -> _MemoryCatalog:
        """The logs by key, with their buffer identity and truncation count."""
        return self._catalog


class _MemoryCatalog(KeyScan):
    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__(backend)
        self._memory = backend

    @property
    def _shared(self) -> _Sessions:
        return self._memory.shared

    def scan_logs(self) -> list[LogStat]:
        """Every log: its key as name, length, buffer identity and truncation count."""
        with self._shared.lock:
            cuts = self._shared.cuts
            return [LogStat(k, len(v), id(v), cuts.get(k, 0)) for k, v in self._shared.logs.items()]

    def log_names(self) -> list[str]:
        """Every key."""
        return [st.name for st in self.scan_logs()]

    def stat_log(self, name: str) -> LogStat | None:
        """The log of key ``name`` as :meth:`scan_logs` sees it."""
        with self._shared.lock:
            log = self._shared.logs.get(name)
            cuts = self._shared.cuts.get(name, 0)
            return None if log is None else LogStat(name, len(log), id(log), cuts)

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """The log of key ``name``: its length and bytes from ``offset`` on."""
        with self._shared.lock:
            log = self._shared.logs.get(name)
            return None if log is None else (len(log), bytes(log[offset:]))

    def catalog_bytes(self) -> bytes | None:
        """The stored session catalog (None when there is none)."""
        return self._shared.catalog

    def put_catalog(self, data: bytes) -> None:
        """Replace the session catalog."""
        self._shared.catalog = bytes(data)


class _MemoryTrash(TrashBin):
    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__()
        self._memory = backend

    @property
    def _shared(self) -> _Sessions:
        return self._memory.shared

    def put(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        """Move the log aside."""
        shared = self._shared
        with shared.lock:
            if key not in shared.logs:
                raise SessionNotFoundError(key)
            entry = TrashEntry(entry_id, key, when, reason, f"memory-trash:{entry_id}")
            shared.trashed[entry_id] = (entry, shared.logs.pop(key))
            return entry.location

    def take_back(self, entry: TrashEntry) -> None:
        """Put the log back under its key."""
        shared = self._shared
        with shared.lock:
            _, data = shared.trashed.pop(entry.id)
            shared.logs[entry.key] = data

    def purge(self, entry: TrashEntry) -> None:
        """Forget the entry."""
        with self._shared.lock:
            del self._shared.trashed[entry.id]

    def entries(self) -> list[TrashEntry]:
        """Every trashed log's entry."""
        with self._shared.lock:
            return [entry for entry, _ in self._shared.trashed.values()]


class MemoryStoreArgs(TypedDict, total=False):
    """The keyword arguments of :class:`MemoryStore`, which its async twin passes on."""

    durability: Durability | str
    hash_key: bytes | str | None
    token_counter: TokenCounter | None
    key_provider: KeyProvider | None
    key_store: KeyStore | None


class MemoryStore(BaseStore):
    """Sessions held in memory as log bytes, with the same contract as :class:`FileStore`."""

    def __init__(
        self,
        *,
        durability: Durability | str = "none",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        key_provider: KeyProvider | None = None,
        key_store: KeyStore | None = None,
    ) -> None:
        self._memory = MemoryBackend()
        super().__init__(
            self._memory, durability=durability, hash_key=hash_key, token_counter=token_counter
        )
        if key_provider is not None and key_store is None:
            key_store = MemoryKeyStore()
        self._privacy.use_keys(key_provider, key_store)

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._memory.shared.logs)} sessions)"

    def peer(self) -> MemoryStore:
        """Another store object over the same sessions (like a second process on one directory)."""
        other = MemoryStore(
            durability=self.durability,
            hash_key=self._hash_key or None,
            token_counter=self.token_counter,
        )
        other._memory.shared = self._memory.shared
        other._privacy.keyring = (
            self._privacy.keyring
        )  # the same keys, as a second process would use
        return other

    @property
    def quarantined(self) -> dict[str, list[tuple[str, int, int, bytes]]]:
        """Bytes cut from logs, per key: (reason, line, offset, data)."""
        return self._memory.shared.quarantined

    def put_bytes(self, key: str, data: bytes) -> None:
        """Replace a session's raw bytes (for tests and imports that build logs by hand).

        Writers of the session find it replaced on their next append and raise
        :class:`SessionNotFoundError`; open it again to write the new bytes.
        """
        with self._memory.shared.lock:
            self._memory.shared.logs[key] = bytearray(data)

"""The in-memory store: the reference backend, the same bytes as the file store, no files.

Useful in tests and for agents that need no persistence. Quarantined bytes are kept in
:attr:`MemoryStore.quarantined`. :meth:`MemoryStore.peer` gives a second store object over the
same sessions, as a second process opening the same directory would: both write every session,
each write under one lock shared by the peers, folding in what the other appended.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType

from ._errors import SessionNotFoundError
from ._fold import SessionState
from ._keystore import KeyProvider, KeyStore, MemoryKeyStore
from ._lifecycle import TrashEntry
from ._store import BaseStore
from ._tokens import TokenCounter
from ._views import LogStat
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
    def __init__(self, store: MemoryStore, key: str, log: bytearray, *, locked: bool) -> None:
        self.name = f"memory:{key}"
        self.stale = False
        self._store = weakref.proxy(store)  # the store owns this; no cycle to keep it alive
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
        cuts = self._store._shared.cuts
        cuts[self._key] = cuts.get(self._key, 0) + 1

    def size(self) -> int:
        return self._size

    def set_size(self, size: int) -> None:
        self._size = size

    def close(self) -> None:
        if self._locked:
            self._locked = False
            self._store._shared.lock.release()

    def release(self) -> None:
        """Opened under the lock; from now on each write takes it."""
        self.close()

    def observe(self) -> int:
        if self._store._shared.logs.get(self._key) is not self._log:
            raise SessionNotFoundError(self._key)
        return len(self._log)

    def read_from(self, offset: int) -> bytes:
        return bytes(self._log[offset:])

    @contextlib.contextmanager
    def pinned(self) -> Iterator[bool]:
        with self._store._shared.lock:
            yield True

    def lock(self, blocking: bool) -> bool:
        """Take the peers' lock for one write."""
        if self._store._shared.lock.acquire(blocking):
            self._depth = 1
            return True
        return False

    def catch_up(self, state: SessionState) -> None:
        """With the lock held: fold in what peers appended."""
        self._store._catch_up(self._key, self, state, locked=True)

    def unlock(self) -> None:
        """Release the lock taken by :meth:`lock`."""
        self._depth = 0
        self._store._shared.lock.release()

    def transaction(self, state: SessionState) -> _MemoryIO:
        self._state = state
        return self

    def __enter__(self) -> None:
        if self._depth:
            self._depth += 1
            return
        lock = self._store._shared.lock
        lock.acquire()
        self._depth = 1
        try:
            assert self._state is not None
            self._store._catch_up(self._key, self, self._state, locked=True)
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
            self._store._shared.lock.release()


class _Raw:
    __slots__ = ("created", "data", "io")

    def __init__(self, io: _MemoryIO, data: bytes, created: bool) -> None:
        self.io = io
        self.data = data
        self.created = created


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
        super().__init__(durability=durability, hash_key=hash_key, token_counter=token_counter)
        if key_provider is not None and key_store is None:
            key_store = MemoryKeyStore()
        self._use_keys(key_provider, key_store)
        self._shared = _Sessions()

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._shared.logs)} sessions)"

    def peer(self) -> MemoryStore:
        """Another store object over the same sessions (like a second process on one directory)."""
        other = MemoryStore(
            durability=self.durability,
            hash_key=self._hash_key or None,
            token_counter=self.token_counter,
        )
        other._shared = self._shared
        other._keyring = self._keyring  # the same keys, as a second process would use
        return other

    @property
    def quarantined(self) -> dict[str, list[tuple[str, int, int, bytes]]]:
        """Bytes cut from logs, per key: (reason, line, offset, data)."""
        return self._shared.quarantined

    def _describe(self, key: str) -> str:
        return f"memory:{key}"

    def _open_raw(self, key: str, create: bool) -> _Raw | None:
        shared = self._shared
        shared.lock.acquire()
        try:
            log = shared.logs.get(key)
            created = log is None
            if log is None:
                if not create:
                    shared.lock.release()
                    return None
                log = shared.logs[key] = bytearray()
            return _Raw(_MemoryIO(self, key, log, locked=True), bytes(log), created)
        except BaseException:
            shared.lock.release()
            raise

    def _release(self, io: SessionIO) -> None:
        assert isinstance(io, _MemoryIO)
        io.release()

    def _read_raw(self, key: str) -> bytes | None:
        with self._shared.lock:
            log = self._shared.logs.get(key)
            return None if log is None else bytes(log)

    def _quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        self._shared.quarantined.setdefault(key, []).append((reason, line, offset, data))
        return f"memory-quarantine:{key}"

    def _list_keys(self) -> list[str]:
        with self._shared.lock:
            return list(self._shared.logs)

    def _remove(self, key: str) -> bool:
        shared = self._shared
        with shared.lock:
            shared.quarantined.pop(key, None)
            shared.snapshots.pop(key, None)
            return shared.logs.pop(key, None) is not None

    def _trash(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        shared = self._shared
        with shared.lock:
            if key not in shared.logs:
                raise SessionNotFoundError(key)
            entry = TrashEntry(entry_id, key, when, reason, f"memory-trash:{entry_id}")
            shared.trashed[entry_id] = (entry, shared.logs.pop(key))
            return entry.location

    def _untrash(self, entry: TrashEntry) -> None:
        shared = self._shared
        with shared.lock:
            _, data = shared.trashed.pop(entry.id)
            shared.logs[entry.key] = data

    def _purge(self, entry: TrashEntry) -> None:
        with self._shared.lock:
            del self._shared.trashed[entry.id]

    def _trash_entries(self) -> list[TrashEntry]:
        with self._shared.lock:
            return [entry for entry, _ in self._shared.trashed.values()]

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None when there is none)."""
        return self._shared.snapshots.get(key)

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Replace (or with None, remove) ``key``'s snapshot."""
        if data is None:
            self._shared.snapshots.pop(key, None)
        else:
            self._shared.snapshots[key] = bytes(data)

    def catalog_bytes(self) -> bytes | None:
        """The stored session catalog (None when there is none)."""
        return self._shared.catalog

    def put_catalog(self, data: bytes) -> None:
        """Replace the session catalog."""
        self._shared.catalog = bytes(data)

    def scan_logs(self) -> list[LogStat]:
        """Every log: its key as name, length, buffer identity and truncation count."""
        with self._shared.lock:
            cuts = self._shared.cuts
            return [LogStat(k, len(v), id(v), cuts.get(k, 0)) for k, v in self._shared.logs.items()]

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """The log of key ``name``: its length and bytes from ``offset`` on."""
        with self._shared.lock:
            log = self._shared.logs.get(name)
            return None if log is None else (len(log), bytes(log[offset:]))

    def put_bytes(self, key: str, data: bytes) -> None:
        """Replace a session's raw bytes (for tests and imports that build logs by hand).

        Writers of the session find it replaced on their next append and raise
        :class:`SessionNotFoundError`; open it again to write the new bytes.
        """
        with self._shared.lock:
            self._shared.logs[key] = bytearray(data)

"""The in-memory store: the reference backend, the same bytes as the file store, no files.

Useful in tests and for agents that need no persistence. Locks are per key within the store
object; quarantined bytes are kept in :attr:`MemoryStore.quarantined`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ._errors import LockedError
from ._keystore import KeyProvider, KeyStore, MemoryKeyStore
from ._lifecycle import TrashEntry
from ._store import BaseStore
from ._tokens import TokenCounter
from ._views import LogStat
from ._writer import Durability


class _MemoryIO:
    def __init__(self, store: MemoryStore, key: str) -> None:
        self.name = f"memory:{key}"
        self._store = store
        self._key = key

    def append(self, data: bytes) -> None:
        self._store._logs[self._key] += data

    def sync(self) -> None:
        return None

    def truncate(self, size: int) -> None:
        del self._store._logs[self._key][size:]
        self._store._cuts[self._key] = self._store._cuts.get(self._key, 0) + 1

    def size(self) -> int:
        return len(self._store._logs[self._key])

    def close(self) -> None:
        self._store._locked.discard(self._key)


@dataclass(slots=True)
class _Raw:
    io: _MemoryIO
    data: bytes
    created: bool


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
        self._logs: dict[str, bytearray] = {}
        self._locked: set[str] = set()
        self._trashed: dict[str, tuple[TrashEntry, bytearray]] = {}
        #: Bytes cut from logs, per key: (reason, line, offset, data).
        self.quarantined: dict[str, list[tuple[str, int, int, bytes]]] = {}
        #: Derived views: snapshots per key, the catalog, and truncations per key (for scans).
        self._snapshots: dict[str, bytes] = {}
        self._catalog: bytes | None = None
        self._cuts: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._logs)} sessions)"

    def _describe(self, key: str) -> str:
        return f"memory:{key}"

    def _open_raw(self, key: str, create: bool) -> _Raw | None:
        if key in self._locked:
            raise LockedError(key, self._describe(key))
        created = key not in self._logs
        if created:
            if not create:
                return None
            self._logs[key] = bytearray()
        self._locked.add(key)
        return _Raw(_MemoryIO(self, key), bytes(self._logs[key]), created)

    def _read_raw(self, key: str) -> bytes | None:
        log = self._logs.get(key)
        return None if log is None else bytes(log)

    def _quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        self.quarantined.setdefault(key, []).append((reason, line, offset, data))
        return f"memory-quarantine:{key}"

    def _list_keys(self) -> list[str]:
        return list(self._logs)

    def _remove(self, key: str) -> bool:
        if key in self._locked:
            raise LockedError(key, self._describe(key))
        self.quarantined.pop(key, None)
        self._snapshots.pop(key, None)
        return self._logs.pop(key, None) is not None

    def _trash(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        if key in self._locked:
            raise LockedError(key, self._describe(key))
        entry = TrashEntry(entry_id, key, when, reason, f"memory-trash:{entry_id}")
        self._trashed[entry_id] = (entry, self._logs.pop(key))
        return entry.location

    def _untrash(self, entry: TrashEntry) -> None:
        _, data = self._trashed.pop(entry.id)
        self._logs[entry.key] = data

    def _purge(self, entry: TrashEntry) -> None:
        del self._trashed[entry.id]

    def _trash_entries(self) -> list[TrashEntry]:
        return [entry for entry, _ in self._trashed.values()]

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None when there is none)."""
        return self._snapshots.get(key)

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Replace (or with None, remove) ``key``'s snapshot."""
        if data is None:
            self._snapshots.pop(key, None)
        else:
            self._snapshots[key] = bytes(data)

    def catalog_bytes(self) -> bytes | None:
        """The stored session catalog (None when there is none)."""
        return self._catalog

    def put_catalog(self, data: bytes) -> None:
        """Replace the session catalog."""
        self._catalog = bytes(data)

    def scan_logs(self) -> list[LogStat]:
        """Every log: its key as name, length, buffer identity and truncation count."""
        cuts = self._cuts
        return [LogStat(k, len(v), id(v), cuts.get(k, 0)) for k, v in self._logs.items()]

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """The log of key ``name``: its length and bytes from ``offset`` on."""
        log = self._logs.get(name)
        return None if log is None else (len(log), bytes(log[offset:]))

    def put_bytes(self, key: str, data: bytes) -> None:
        """Replace a session's raw bytes (for tests and imports that build logs by hand)."""
        if key in self._locked:
            raise LockedError(key, self._describe(key))
        self._logs[key] = bytearray(data)

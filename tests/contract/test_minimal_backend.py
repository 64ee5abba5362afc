"""A fourth backend, written here against the public backend protocol alone, passes the contract.

``DictBackend`` keeps each session's log as a ``bytearray`` in a dict shared by every store made
over the same ``tmp_path`` (as processes share a directory). It implements only what
:class:`sessionledger.eventlog.backend.Backend` asks (six operations), a trash bin and snapshot
bytes; its I/O takes one lock per write and calls :meth:`Backend.catch_up` under it, so two
store objects can write one session. Everything else (opening, catching up, the lifecycle,
snapshots, the catalog) is the shared store's. It imports nothing private.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from async_store_contract import AsyncStoreContract
from store_contract import KEY, StoreContract

from sessionledger import projections
from sessionledger.eventlog import (
    AsyncBaseStore,
    BaseStore,
    InvalidEventError,
    SessionNotFoundError,
    SessionState,
    StoreClosedError,
    TrashEntry,
)
from sessionledger.eventlog.backend import Backend, RawSession, SessionIO, TrashBin


class _Db:
    """What store objects over one ``tmp_path`` share."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.logs: dict[str, bytearray] = {}
        self.snapshots: dict[str, bytes] = {}
        self.quarantined: list[tuple[str, str, bytes]] = []
        self.trashed: dict[str, tuple[TrashEntry, bytearray]] = {}


_DBS: dict[Path, _Db] = {}


class _Raw:
    def __init__(self, io: DictIO, data: bytes, created: bool) -> None:
        self.io = io
        self.data = data
        self.created = created


class DictIO:
    """One session's log for one store: a lock per write, folding in what others appended."""

    def __init__(self, backend: DictBackend, key: str, log: bytearray) -> None:
        self.name = backend.describe(key)
        self.stale = False
        self._backend = backend
        self._db = backend.db
        self._key = key
        self._log = log
        self._size = len(log)
        self._held = 1  # opened under the lock
        self._state: SessionState | None = None

    # SessionIO
    def transaction(self, state: SessionState) -> DictIO:
        self._state = state
        return self

    def __enter__(self) -> None:
        self._db.lock.acquire()
        self._held += 1
        try:
            assert self._state is not None
            self._backend.catch_up(self._key, self, self._state, locked=True)
        except BaseException:
            self._held -= 1
            self._db.lock.release()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._held -= 1
        self._db.lock.release()

    def append(self, data: bytes) -> None:
        self._log += data
        self._size += len(data)

    def sync(self) -> None:
        return None

    def truncate(self, size: int) -> None:
        del self._log[size:]
        self._size = size

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        while self._held:
            self._held -= 1
            self._db.lock.release()

    # SharedIO: what catching up with other writers needs
    def observe(self) -> int:
        if self._db.logs.get(self._key) is not self._log:
            raise SessionNotFoundError(self._key)
        return len(self._log)

    def read_from(self, offset: int) -> bytes:
        return bytes(self._log[offset:])

    def set_size(self, size: int) -> None:
        self._size = size

    @contextmanager
    def pinned(self) -> Iterator[bool]:
        with self._db.lock:
            yield True


class DictTrash(TrashBin):
    def __init__(self, db: _Db) -> None:
        super().__init__()
        self._db = db

    def put(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        with self._db.lock:
            if key not in self._db.logs:
                raise SessionNotFoundError(key)
            entry = TrashEntry(entry_id, key, when, reason, f"dict-trash:{entry_id}")
            self._db.trashed[entry_id] = (entry, self._db.logs.pop(key))
            self._db.snapshots.pop(key, None)
            return entry.location

    def take_back(self, entry: TrashEntry) -> None:
        with self._db.lock:
            self._db.logs[entry.key] = self._db.trashed.pop(entry.id)[1]

    def purge(self, entry: TrashEntry) -> None:
        with self._db.lock:
            del self._db.trashed[entry.id]

    def entries(self) -> list[TrashEntry]:
        with self._db.lock:
            return [entry for entry, _ in self._db.trashed.values()]


class DictBackend(Backend):
    def __init__(self, db: _Db) -> None:
        self.db = db
        self._trash = DictTrash(db)

    def open_raw(self, key: str, create: bool, snap: object = None) -> RawSession | None:
        self.db.lock.acquire()
        log = self.db.logs.get(key)
        if log is None and not create:
            self.db.lock.release()
            return None
        created = log is None
        if log is None:
            log = self.db.logs[key] = bytearray()
        return _Raw(DictIO(self, key, log), bytes(log), created)

    def release(self, io: SessionIO) -> None:
        assert isinstance(io, DictIO)
        io.close()

    def read(self, key: str) -> bytes | None:
        with self.db.lock:
            log = self.db.logs.get(key)
            return None if log is None else bytes(log)

    def describe(self, key: str) -> str:
        return f"dict:{key}"

    def quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        self.db.quarantined.append((key, reason, data))
        return f"dict-quarantine:{key}"

    def list_keys(self) -> list[str]:
        with self.db.lock:
            return list(self.db.logs)

    def remove(self, key: str) -> bool:
        with self.db.lock:
            self.db.snapshots.pop(key, None)
            return self.db.logs.pop(key, None) is not None

    def trash(self) -> TrashBin | None:
        return self._trash

    def snapshot_bytes(self, key: str) -> bytes | None:
        return self.db.snapshots.get(key)

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        if data is None:
            self.db.snapshots.pop(key, None)
        else:
            self.db.snapshots[key] = bytes(data)


def make_dict_store(tmp_path: Path, **kwargs: Any) -> BaseStore:
    return BaseStore(DictBackend(_DBS.setdefault(tmp_path, _Db())), **kwargs)


class TestDictBackend(StoreContract):
    def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
        return make_dict_store(tmp_path, **kwargs)


class TestAsyncDictBackend(AsyncStoreContract):
    """The async contract too: the generic async store over the generic store of this backend
    (blocking calls offloaded to worker threads, as for a backend whose I/O may block)."""

    def make_store(self, tmp_path: Path, **kwargs: Any) -> AsyncBaseStore:
        return AsyncBaseStore(make_dict_store(tmp_path, **kwargs), offload=True)


def test_lifecycle_trash_snapshots_and_catalog_come_with_the_protocol(tmp_path: Path) -> None:
    store = make_dict_store(tmp_path, durability="none")
    ended: list[str] = []
    store.on_end(lambda state, reason: ended.append(reason))
    with store.session(KEY) as w:
        for i in range(5):
            w.append_message("user", f"m{i}")
    assert store.archive(KEY) and ended == ["archive"]
    # snapshots: written through the backend's bytes, used on the next load
    assert store.write_snapshot(KEY).health == "valid"
    assert store.snapshot_bytes(KEY) is not None
    assert store.load(KEY).snapshot_seq == store.state(KEY).seq
    assert store.snapshot_status(KEY).health == "valid"
    # the catalog, through the default key scan
    assert [row.key for row in projections.list_sessions(store)] == [KEY]
    # retention: to the trash, back again, then purged
    later = store.state(KEY).updated_at + timedelta(days=1)
    report = store.cleanup(timedelta(hours=1), now=later)
    assert report.trashed == [KEY] and not store.exists(KEY) and ended[-1] == "timeout"
    (entry,) = store.trash()
    assert store.restore(entry.id) == KEY
    assert [m.message["content"] for m in store.state(KEY).messages][-1] == "m4"
    store.cleanup(timedelta(hours=1), now=later)
    assert store.purge_trash(now=datetime.now(UTC) + store.trash_ttl * 2) != []
    assert store.trash() == [] and store.keys() == []
    store.close()


class NoTrashBackend(DictBackend):
    def trash(self) -> None:
        return None


def test_a_backend_without_a_trash_says_so_and_keeps_every_session(tmp_path: Path) -> None:
    store = BaseStore(NoTrashBackend(_Db()), durability="none")
    store.session(KEY).append_message("user", "stays")
    later = store.state(KEY).updated_at + timedelta(days=1)
    report = store.cleanup(timedelta(hours=1), now=later)
    assert report.trashed == [] and report.problems[KEY] == "BaseStore has no trash"
    assert store.exists(KEY) and store.trash() == [] and store.purge_trash(now=later) == []
    with pytest.raises(InvalidEventError, match="no trash"):
        store.restore("20260101T000000000000-00000000")
    store.close()


def test_a_backend_belongs_to_one_store(tmp_path: Path) -> None:
    backend = DictBackend(_Db())
    with pytest.raises(StoreClosedError, match="not held by a store"):
        backend.catch_up(KEY, None, None, locked=True)  # type: ignore[arg-type]
    store = BaseStore(backend)
    with pytest.raises(InvalidEventError, match="already belongs"):
        BaseStore(backend)
    store.close()

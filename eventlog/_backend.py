"""The backend protocol: the few operations that differ between the file, memory and PostgreSQL
stores. Everything else is written once on top of them.

Rule: a backend moves bytes and keeps nothing it could not give back byte for byte. Opening,
checking and folding a log, catching up with other writers, cutting a torn tail, the session
lifecycle and the trash's rules (:mod:`eventlog._lifecycle`), snapshots (:mod:`eventlog._views`)
and the catalog (``projections``) live above it, in the store that holds the backend.

A new backend subclasses :class:`Backend` and implements its six abstract methods; the rest have
defaults that keep nothing (no snapshots, no catalog cache, no trash) or derive what they need
from those six, which is always correct, only slower. A log that other store objects write at
the same time (another process, a peer) needs an I/O with :class:`SharedIO`'s methods, whose
writes call :meth:`Backend.catch_up` under the log's lock. A backend belongs to one store.
"""

from __future__ import annotations

import abc
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ._changes import ChangeView, slot_of
from ._errors import InvalidEventError, SessionNotFoundError, StoreClosedError
from ._fold import SessionState
from ._writer import SessionIO

if TYPE_CHECKING:
    from ._fileindex import IndexFiles
    from ._indexsnap import IndexMeta
    from ._snapshot import Snapshot
    from ._store import BaseStore
    from ._store_types import RawSession


@dataclass(frozen=True, slots=True)
class LogStat:
    """One log as a directory scan sees it: its name in the store, size, identity, mtime."""

    name: str
    size: int
    #: Changes when the log is replaced (a new file, or bytes put in place of others).
    ino: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class TrashEntry:
    """A session moved to the trash: restorable until ``deleted_at + ttl``."""

    id: str
    key: str
    deleted_at: datetime
    reason: str
    location: str


class SharedIO(SessionIO, Protocol):
    """A log other stores may write too: what catching up with them needs of its I/O."""

    stale: bool

    def observe(self) -> int:
        """The log's current length; raise SessionNotFoundError if it was removed."""

    def read_from(self, offset: int) -> bytes:
        """The log's bytes from ``offset`` on."""

    def set_size(self, size: int) -> None:
        """Record the valid length this writer now knows."""

    def pinned(self) -> AbstractContextManager[bool]:
        """Keep the log usable for a read without its lock (False: it is not open now)."""


class CatchUp(Protocol):
    """The store's catch-up: fold into ``state`` what other writers appended to ``key``'s log.

    ``locked``: the log's lock is held (a write follows); False means read the log instead.
    """

    def __call__(self, key: str, io: SharedIO, state: SessionState, *, locked: bool) -> bool: ...


class TrashBin(abc.ABC):
    """Where a backend keeps trashed sessions; the rules (what goes, when, hooks) are above it."""

    def __init__(self) -> None:
        self._mutex = threading.RLock()

    @abc.abstractmethod
    def put(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        """Move ``key``'s log (and what lies beside it) into the trash; return where it went."""

    @abc.abstractmethod
    def take_back(self, entry: TrashEntry) -> None:
        """Put a trashed session back in the store."""

    @abc.abstractmethod
    def purge(self, entry: TrashEntry) -> None:
        """Remove a trash entry for good."""

    @abc.abstractmethod
    def entries(self) -> list[TrashEntry]:
        """Every entry in the trash."""

    def lock(self) -> AbstractContextManager[object]:
        """The lock that serialises trash, restore, purge and cleanup (this process only)."""
        return self._mutex

    def restored_meanwhile(self, entry_id: str) -> str | None:
        """The key of a restore of ``entry_id`` that was completed after a crash, if any."""
        return None


class CatalogSource(Protocol):
    """What the session catalog (``projections``) reads of a store: its logs as scans see them.

    Reached with :func:`eventlog.backend.catalog_source`; not part of the application API.
    """

    def scan_logs(self) -> list[LogStat]:
        """Every log, as one directory scan sees it."""

    def log_names(self) -> list[str]:
        """The names :meth:`scan_logs` gives (without a stat each, where a backend can)."""

    def stat_log(self, name: str) -> LogStat | None:
        """One log as :meth:`scan_logs` would see it (None: there is no such log)."""

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """A log named as :meth:`scan_logs` names it: its length and bytes from ``offset``."""

    def read_changes(self) -> ChangeView | None:
        """A copy of the store's change table (see :mod:`eventlog._changes`); None: none kept."""

    def log_slot(self, name: str) -> int:
        """The change-table slot of a log named as :meth:`scan_logs` names it."""

    def catalog_bytes(self) -> bytes | None:
        """The stored session catalog (None: none kept)."""

    def put_catalog(self, data: bytes) -> None:
        """Store the session catalog, atomically."""


class Backend(abc.ABC):
    """The operations that differ between stores; a store holds one and builds on it."""

    _held_by: CatchUp | None = None

    def attach(self, catch_up: CatchUp) -> None:
        """Called once by the store that holds this backend, with that store's catch-up."""
        if self._held_by is not None:
            raise InvalidEventError(f"{type(self).__name__} already belongs to a store")
        self._held_by = catch_up

    def catch_up(self, key: str, io: SharedIO, state: SessionState, *, locked: bool) -> bool:
        """Fold into ``state`` what other writers appended to ``key``'s log (see
        :class:`CatchUp`): what a :class:`SharedIO` calls around each write."""
        if self._held_by is None:
            raise StoreClosedError(f"{type(self).__name__} is not held by a store")
        return self._held_by(key, io, state, locked=locked)

    # -- what every backend implements ----------------------------------------------------

    @abc.abstractmethod
    def open_raw(
        self, key: str, create: bool, snap: Snapshot | IndexMeta | None = None
    ) -> RawSession | None:
        """Open ``key`` with its lock held (None if absent and not ``create``).

        A backend may read the log only from the line ``snap`` was taken at; its raw session
        then has ``base`` (that line's offset) and ``snapshot`` (``snap``).
        """

    @abc.abstractmethod
    def read(self, key: str) -> bytes | None:
        """Read ``key``'s whole log without its lock (None if absent)."""

    @abc.abstractmethod
    def describe(self, key: str) -> str:
        """Where ``key`` lives, for messages."""

    @abc.abstractmethod
    def quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        """Keep ``data`` cut from ``key``'s log; return where it went."""

    @abc.abstractmethod
    def list_keys(self) -> list[str]:
        """Keys of every session, in any order."""

    @abc.abstractmethod
    def remove(self, key: str) -> bool:
        """Remove a session's log and everything beside it (its writers were closed)."""

    # -- defaults a backend may do better ---------------------------------------------------

    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on."""
        data = self.read(key)
        if data is None:
            raise SessionNotFoundError(key)
        return len(data), data[offset:]

    def exists(self, key: str) -> bool:
        """Whether ``key`` has a log."""
        return self.read(key) is not None

    def release(self, io: SessionIO) -> None:
        """A log opened by :meth:`open_raw` becomes a writer's: drop the lock taken to open it."""
        return None

    def discard_new(self, key: str, io: SessionIO) -> None:
        """A log :meth:`open_raw` created could not be started (its header was not written):
        remove it if it is still empty, lock held, so that no session without a header is
        left to list. A backend whose create is undone otherwise (a transaction) does nothing."""
        return None

    def probe_lock(self, key: str) -> bool:
        """Whether another writer holds ``key``'s lock right now."""
        return False

    def trash(self) -> TrashBin | None:
        """The backend's trash (None: it has none, and cleanup cannot run)."""
        return None

    def discard_import(self, key: str, raw: RawSession) -> None:
        """An import into the log :meth:`open_raw` created as ``raw`` failed: remove the log
        and what was written beside it. A backend that can should do it with the lock still
        held (a writer that gets the lock next then creates the session anew, and nothing
        removes it). Default: let go of the lock, then :meth:`remove`."""
        raw.io.close()
        self.remove(key)

    def write_import(self, key: str, raw: RawSession, data: bytes, *, sync: bool) -> None:
        """Write what ``data`` adds to the log opened as ``raw`` (``data`` starts with
        ``raw.data``, which is empty or ends a line), synced when ``sync``: the last step of
        :meth:`BaseStore.import_bytes`, under the log's lock. Default: append it."""
        raw.io.append(data[len(raw.data) :])
        if sync:
            raw.io.sync()

    # -- derived views: bytes kept beside the logs (defaults keep nothing) -----------------

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None: none kept)."""
        return None

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Store (or with None, remove) the snapshot of ``key``, atomically."""
        return None

    def index_files(self, key: str) -> IndexFiles | None:
        """Where ``key``'s message and id records live (None: format-2 snapshots only)."""
        return None

    def catalog_source(self) -> CatalogSource:
        """The logs as the session catalog reads them (default: through :meth:`list_keys`)."""
        return KeyScan(self)


class KeyScan:
    """A catalog source over any backend: a log's name is its key, its size read in full."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._catalog: bytes | None = None

    def scan_logs(self) -> list[LogStat]:
        """Every log's length (reads every log)."""
        stats: list[LogStat] = []
        for key in self._backend.list_keys():
            st = self.stat_log(key)
            if st is not None:
                stats.append(st)
        return stats

    def log_names(self) -> list[str]:
        """Every session key."""
        return self._backend.list_keys()

    def stat_log(self, name: str) -> LogStat | None:
        """The log of key ``name`` (None: absent)."""
        got = self.read_log(name, 1 << 62)
        return None if got is None else LogStat(name, got[0], 0, 0)

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """The log of key ``name``: its length and bytes from ``offset`` on."""
        try:
            return self._backend.read_tail(name, offset)
        except SessionNotFoundError:
            return None

    def read_changes(self) -> ChangeView | None:
        """None: no change table is kept."""
        return None

    def log_slot(self, name: str) -> int:
        """The change-table slot of ``name``."""
        return slot_of(name)

    def catalog_bytes(self) -> bytes | None:
        """None: no catalog is kept."""
        return None

    def put_catalog(self, data: bytes) -> None:
        """Keeps nothing."""
        return None


def catalog_source(store: BaseStore) -> CatalogSource:
    """How the session catalog reads ``store``'s logs (scans, stats, the change table, the
    stored catalog). Not on the store itself: applications never need it."""
    return store._backend.catalog_source()

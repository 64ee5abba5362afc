"""The file store's backend: one JSONL log per session in one directory, and files beside it.

Invariants (the store's, kept here where the bytes move):
- The directory is 0700 and every file 0600, whatever the umask; no path is ever followed
  through a symlink (``O_NOFOLLOW``), and a non-regular file where a log should be is refused.
- Many writers per session, across processes: ``flock`` on the log's own descriptor for one
  write at a time (see :mod:`eventlog._fileio`), released by the kernel when a holder dies.
  After an open locks, the path is checked to still be the locked file, so a concurrent delete
  cannot leave a writer on an unlinked inode; later writes notice a removal (link count 0, or
  the trash's cleared owner-write bit) and raise :class:`SessionNotFoundError`.
- Descriptors are bounded (:class:`FdPool`); ``EMFILE``/``ENFILE`` become StorageError.
- New files get their directory fsynced (unless the store is not durable).
- Every append, truncate, writer open, create and delete of a log is followed by a bump of the
  store's change table (``.changes``, see :mod:`eventlog._changes`), which lets a listing stat
  only the logs whose slot changed; the bump is one store into shared memory.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import itertools
import os
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ._backend import Backend, LogStat, TrashBin, TrashEntry
from ._changes import ChangeTable, ChangeView, slot_of
from ._errors import (
    EventLogError,
    InvalidEventError,
    NotALogError,
    SessionNotFoundError,
    StorageError,
    UnsafePathError,
)
from ._fileindex import FileIndexFiles
from ._fileio import (
    LIVE_BIT,
    OPEN_FLAGS,
    READ_FLAGS,
    FdPool,
    FileIO,
    flock_within,
    lock_fd,
    open_nofollow,
    read_log_file,
    unlock_fd,
)
from ._filetrash import TrashLock, list_entries, move_to_trash, purge_entry, restore_entry
from ._fileviews import list_log_names, read_from, read_view, remove_file, scan_logs, stat_log
from ._indexsnap import IndexMeta
from ._lease import LEASES, PROBE_PATIENCE, mark_waiting, unmark_waiting
from ._names import key_to_stem, stem_to_key
from ._safeio import (
    append_private,
    fsync_dir,
    read_fd,
    read_first_line,
    remove,
    storage_error,
    write_atomic,
    write_new,
)
from ._seal import seal, unseal
from ._segfiles import all_closed, closed_parts, has_segments, read_live_start, read_whole
from ._segments import parse_segment_name, segment_name, segment_starts
from ._snapshot import Snapshot
from ._store_types import RawSession
from ._writer import SessionIO

LOG_SUFFIX = ".jsonl"
QUARANTINE_SUFFIX = ".quarantine"
SNAPSHOT_SUFFIX = ".snapshot"
#: The session catalog, in the store root (a leading dot: never a log's name).
CATALOG_NAME = ".catalog"


@dataclass(slots=True)
class _Raw:
    io: FileIO
    #: The log from byte ``base`` on (the whole log when ``base`` is 0).
    data: bytes
    created: bool
    base: int = 0
    #: The snapshot whose line ``base`` is.
    snapshot: Snapshot | IndexMeta | None = None


class FileBackend(Backend):
    """Logs as files in ``root`` (which must exist); see the module's invariants."""

    def __init__(
        self,
        root: Path,
        *,
        durable: bool,
        lock_timeout: float,
        max_open_files: int,
        hash_key: bytes,
        segment_bytes: int,
    ) -> None:
        self.root = root
        #: The root as a string, and as the prefix of its files' paths ("" for "."): a hot
        #: path builds a file's path (``str(root / name)``) with one concatenation.
        self.root_text = str(root)
        self._prefix = "" if self.root_text == "." else os.path.join(self.root_text, "")
        #: The last key whose stem was asked for, and its stem (a load asks several times).
        self._last_stem: tuple[str | None, str] = (None, "")
        self.hash_key = hash_key
        self.segment_bytes = segment_bytes
        self.durable = durable
        self.lock_timeout = lock_timeout
        self.changes = ChangeTable(self.root_text)
        self.pool = FdPool(max_open_files)
        self._trash: FileTrash | None = None
        self._catalog = FileCatalog(self, hash_key)

    # -- paths -------------------------------------------------------------------------------

    def _stem(self, key: str) -> str:
        """:func:`key_to_stem` of ``key`` (the same key object as last time: its stem kept)."""
        last = self._last_stem
        if last[0] is key:
            return last[1]
        stem = key_to_stem(key)
        self._last_stem = (key, stem)
        return stem

    def _file(self, key: str, suffix: str) -> str:
        """``str(self.root / (stem + suffix))`` of ``key``'s stem, built as a string."""
        return self._prefix + self._stem(key) + suffix

    def path_for(self, key: str) -> Path:
        """The log file of ``key`` (it may not exist yet)."""
        return self.root / (key_to_stem(key) + LOG_SUFFIX)

    def quarantine_path(self, key: str) -> Path:
        """Where bytes cut from ``key``'s log are kept."""
        return self.root / (key_to_stem(key) + QUARANTINE_SUFFIX)

    def snapshot_path(self, key: str) -> Path:
        """Where ``key``'s snapshot is kept."""
        return self.root / (key_to_stem(key) + SNAPSHOT_SUFFIX)

    def index_files(self, key: str) -> FileIndexFiles:
        """``key``'s message and id records, beside its log (in segments or not: record
        offsets are whole-log offsets, resolved through the segments' headers)."""
        return self.index_paths(key)

    def index_paths(self, key: str) -> FileIndexFiles:
        """Where ``key``'s index records would be."""
        stem = self._file(key, "")
        return FileIndexFiles(stem + LOG_SUFFIX, stem, stem + LOG_SUFFIX)

    def segment_paths(self, key: str) -> list[Path]:
        """The closed segments of ``key``'s log on disk, oldest first (the live one is
        :meth:`path_for`)."""
        return [Path(p) for p in all_closed(str(self.root), key_to_stem(key))]

    def describe(self, key: str) -> str:
        """The log's path."""
        return self._file(key, LOG_SUFFIX)

    def bump(self, key: str, *, membership: bool) -> None:
        """Announce a change of ``key``'s log in the change table."""
        self.changes.bump(slot_of(self.path_for(key).name), membership=membership)

    # -- logs --------------------------------------------------------------------------------

    def open_raw(
        self, key: str, create: bool, snap: Snapshot | IndexMeta | None = None
    ) -> _Raw | None:
        """Open and lock ``key``'s log; read it from ``snap``'s line when it is that long."""
        start = snap.line_start if snap is not None else 0
        path = self._file(key, LOG_SUFFIX)
        deadline = time.monotonic() + self.lock_timeout
        pool = self.pool
        while True:
            created = False
            try:
                fd = open_nofollow(path, OPEN_FLAGS, evict=pool.evict_idle)
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    fd = open_nofollow(
                        path, OPEN_FLAGS | os.O_CREAT | os.O_EXCL, evict=pool.evict_idle
                    )
                    created = True
                except FileExistsError:
                    continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise UnsafePathError(path, "not a regular file")
                if created:
                    os.fchmod(fd, 0o600)
                lock_fd(fd, key, path, max(0.0, deadline - time.monotonic()))
                # The file may have been deleted (or replaced) while we waited for the lock.
                try:
                    now = os.stat(path, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                    os.close(fd)
                    continue
                if not now.st_mode & LIVE_BIT:
                    os.fchmod(fd, 0o600)  # a log restored from the trash, or made read-only
                if created and self.durable:
                    fsync_dir(str(self.root))
                live = read_live_start(fd)
                size = live.base + os.fstat(fd).st_size
                base = start if 0 < start <= size else 0
                data = read_fd(fd, max(0, base - live.base))
                if base < live.base:
                    parts = closed_parts(str(self.root), key_to_stem(key), live, base)
                    data = b"".join([*parts, data])
            except OSError as exc:
                os.close(fd)
                raise storage_error(path, "open", exc) from exc
            except BaseException:
                os.close(fd)
                raise
            # Every open bumps: a line a crashed writer wrote but never announced shows.
            self.changes.bump(slot_of(os.path.basename(path)), membership=created)
            io = FileIO(
                self.catch_up,
                key,
                path,
                fd,
                base + len(data),
                (st.st_dev, st.st_ino),
                changes=self.changes,
                lock_timeout=self.lock_timeout,
            )
            io.seg = live
            io.segment_bytes = self.segment_bytes
            io.hash_key = self.hash_key
            io.sync_roll = self.durable
            return _Raw(io, data, created, base, snap if base else None)

    def release(self, io: SessionIO) -> None:
        """The descriptor goes to the pool; each write takes the lock from now on."""
        assert isinstance(io, FileIO)
        io.release(self.pool)

    def discard_new(self, key: str, io: SessionIO) -> None:
        """Unlink a log this open created, lock held, while it is still empty and still the
        file at its path (a writer waiting for the lock then finds it gone and creates it)."""
        assert isinstance(io, FileIO)
        path = str(self.path_for(key))
        with contextlib.suppress(OSError, StorageError):
            st = os.fstat(io.fd)
            now = os.stat(path, follow_symlinks=False)
            if st.st_size == 0 and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.unlink(path)
                self.changes.bump(slot_of(os.path.basename(path)), membership=True)
                if self.durable:  # its creation was synced into the directory: so is this
                    fsync_dir(str(self.root))

    def read(self, key: str) -> bytes | None:
        """The whole log, never through a symlink (None: absent); closed segments (immutable
        once closed) are read after the live one."""
        root, stem = self.root_text, self._stem(key)
        got = read_log_file(self._file(key, LOG_SUFFIX), lambda fd: read_whole(root, stem, fd))
        return None if got is None else got[1]

    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The whole log's length and its bytes from ``offset`` on (through its closed segments
        when it has some)."""
        root, stem = self.root_text, self._stem(key)
        got = read_log_file(
            self._file(key, LOG_SUFFIX), lambda fd: read_whole(root, stem, fd, offset)
        )
        if got is None:
            raise SessionNotFoundError(key)
        return got

    def exists(self, key: str) -> bool:
        """One ``stat`` of the log, nothing read."""
        path = self._file(key, LOG_SUFFIX)
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise storage_error(path, "stat", exc) from exc
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(path, "it is a symlink")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(path, "not a regular file")
        return True

    def probe_lock(self, key: str) -> bool:
        """Take and drop the flock on a read-only descriptor (no read of the log)."""
        try:
            fd = open_nofollow(str(self.path_for(key)), READ_FLAGS)
        except FileNotFoundError:
            return False
        try:
            # A lease (see ``_lease``) keeps a lock across a burst of appends: end ours, and
            # give another process's the time it takes to lapse before calling the lock held.
            # (Marked as a waiter, so that the lease ends at its reaper's next look.)
            # Mark and lock are undone before the close: a child forked meanwhile by another
            # thread shares this open file description, and would keep both while it lives.
            st = os.fstat(fd)
            LEASES.end_all((st.st_dev, st.st_ino))
            marked = mark_waiting(fd)
            got = False
            try:
                got = flock_within(fd, PROBE_PATIENCE, pause=0.0002, max_pause=0.0002)
            finally:
                if got:
                    with contextlib.suppress(OSError):  # (then the close drops it)
                        unlock_fd(fd)
                if marked:
                    unmark_waiting(fd)
            return not got
        finally:
            os.close(fd)

    def write_import(self, key: str, raw: RawSession, data: bytes, *, sync: bool) -> None:
        """A log in segments is installed as its segment files (closed ones first, read-only,
        then the live one), byte for byte; extending a log with one is refused (nothing
        written). Any failure removes the segment files this call wrote."""
        starts = segment_starts(data)
        if not starts:
            super().write_import(key, raw, data, sync=sync)
            return
        if raw.data:
            raise InvalidEventError(
                f"cannot extend {raw.io.name} with lines that cross a segment "
                "boundary (nothing written); import into a new key"
            )
        stem = key_to_stem(key)
        written: list[str] = []
        try:
            for n, (lo, hi) in enumerate(itertools.pairwise([0, *starts]), start=1):
                path = str(self.root / segment_name(stem, n))
                try:
                    write_new(path, data[lo:hi], sync=sync, action="import a segment")
                except FileExistsError as exc:
                    raise UnsafePathError(path, f"a file is in the way of segment {n}") from exc
                written.append(path)
                os.chmod(path, 0o400, follow_symlinks=False)
            raw.io.append(data[starts[-1] :])
            if sync:
                raw.io.sync()
                fsync_dir(str(self.root))
        except BaseException:
            for path in written:
                remove(path)
            raise

    def quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        """Append a JSON record of the cut bytes to ``key``'s quarantine file."""
        path = str(self.quarantine_path(key))
        record: dict[str, Any] = {
            "at": datetime.now(UTC).isoformat(),
            "key": key,
            "log": self.path_for(key).name,
            "reason": reason,
            "line": line,
            "offset": offset,
            "bytes": len(data),
        }
        try:
            record["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            record["base64"] = base64.b64encode(data).decode("ascii")
        append_private(path, msgspec.json.encode(record) + b"\n", sync=self.durable)
        return path

    def list_keys(self) -> list[str]:
        """Keys of the log files at their key's own path."""
        keys: list[str] = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError as exc:
            raise NotALogError(str(self.root), "the store directory is gone") from exc
        except OSError as exc:
            raise storage_error(str(self.root), "list", exc) from exc
        for entry in entries:
            name = entry.name
            if not name.endswith(LOG_SUFFIX) or name.startswith("."):
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            stem = name[: -len(LOG_SUFFIX)]
            key = stem_to_key(stem)
            if key is None:
                key = _key_from_header(entry.path)
                # A file not at its key's own path is never opened for that key: not listed.
                if key is not None and (not key or key_to_stem(key) != stem):
                    key = None
            if key is not None:
                keys.append(key)
        return keys

    def remove(self, key: str) -> bool:
        """Remove the log and its snapshot, index records and quarantine, under its lock."""
        raw = self.open_raw(key, create=False)
        if raw is None:
            return False
        try:
            self._remove_locked(key)
        finally:
            raw.io.close()
        return True

    def _remove_locked(self, key: str) -> None:
        """:meth:`remove` with ``key``'s lock held (the log is the one at its path)."""
        try:
            self.index_paths(key).remove()
            closed = self.segment_paths(key)
            for path in (self.snapshot_path(key), self.quarantine_path(key), self.path_for(key)):
                remove(str(path))
            for path in closed:
                remove(str(path))
            if self.durable:
                fsync_dir(str(self.root))
        finally:
            self.bump(key, membership=True)

    def discard_import(self, key: str, raw: RawSession) -> None:
        """Remove the log a failed import created, and what is beside it, lock held, while
        it is still the file at its path (a writer waiting for the lock then finds it gone)."""
        io = raw.io
        assert isinstance(io, FileIO)
        try:
            st = os.fstat(io.fd)
            now = os.stat(self.path_for(key), follow_symlinks=False)
        except OSError:
            return
        if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            self._remove_locked(key)

    def trash(self) -> FileTrash:
        """The ``.trash`` folder in the store root."""
        if self._trash is None:
            self._trash = FileTrash(self)
        return self._trash

    # -- derived views -------------------------------------------------------------------------

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The snapshot file's bytes (None when there is none)."""
        return read_view(self._file(key, SNAPSHOT_SUFFIX))

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Replace (or with None, remove) the snapshot file atomically."""
        if data is None:
            remove_file(str(self.snapshot_path(key)))
        else:
            write_atomic(str(self.root), self.snapshot_path(key).name, data)

    def catalog_source(self) -> FileCatalog:
        """The directory as the catalog scans it."""
        return self._catalog

    def close(self) -> None:
        """Close every descriptor and unmap the change table."""
        try:
            self.pool.close_all()
        finally:
            self.changes.close()


def _key_from_header(path: str) -> str | None:
    try:
        first = read_first_line(path)
    except EventLogError:
        return None
    if first is None:
        return None
    try:
        header = msgspec.json.decode(first, type=dict[str, Any])
    except msgspec.DecodeError:
        return None
    key = header.get("key")
    return key if header.get("type") == "header" and isinstance(key, str) else None


class FileCatalog:
    """The store directory as the session catalog reads it: scans, stats, the change table."""

    def __init__(self, backend: FileBackend, hash_key: bytes) -> None:
        self._backend = backend
        #: The chain's key: a keyed store seals its catalog with it.
        self.hash_key = hash_key

    def scan_logs(self) -> list[LogStat]:
        """Every log file (name, size, inode, mtime) from one directory scan; the size of a log
        in segments is the whole log's (segments end to end)."""
        root = str(self._backend.root)
        found = scan_logs(root, LOG_SUFFIX)
        stems = {
            parsed[0]
            for name in list_log_names(root, ".seg") + list_log_names(root, ".seg.gz")
            if (parsed := parse_segment_name(name)) is not None
        }
        if not stems:
            return found
        return [
            self._whole_size(st) if st.name[: -len(LOG_SUFFIX)] in stems else st for st in found
        ]

    def log_names(self) -> list[str]:
        """Every log file's name, from one directory scan without a stat per file."""
        return list_log_names(str(self._backend.root), LOG_SUFFIX)

    def stat_log(self, name: str) -> LogStat | None:
        """One log file's size, inode and mtime (None: absent or not a regular file); the size
        of a log in segments is the whole log's."""
        root = str(self._backend.root)
        st = stat_log(root, name)
        if st is None or not has_segments(root, name[: -len(LOG_SUFFIX)]):
            return st
        return self._whole_size(st)

    def _whole_size(self, st: LogStat) -> LogStat:
        """``st`` of a live segment, with the size of the whole log."""
        path = str(self._backend.root / st.name)
        try:
            live = read_log_file(path, read_live_start)
        except EventLogError:  # not a file we can read: the live segment's size stands
            return st
        return st if live is None else dataclasses.replace(st, size=live.base + st.size)

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """A log file named by :meth:`scan_logs`: its length and bytes from ``offset`` on."""
        if "/" in name or name.startswith(".") or not name.endswith(LOG_SUFFIX):
            raise UnsafePathError(name, "not a log file name of this store")
        root = self._backend.root
        stem = name[: -len(LOG_SUFFIX)]
        if not has_segments(str(root), stem):
            return read_from(str(root / name), offset)
        # A log in segments: the whole log's length and bytes (offsets are of the whole log).
        return read_log_file(
            str(root / name),
            lambda fd: read_whole(str(root), stem, fd, offset),
            absent=(FileNotFoundError, UnsafePathError),
        )

    def read_changes(self) -> ChangeView | None:
        """A copy of the store's change table (None: none can be kept here)."""
        return self._backend.changes.read()

    def log_slot(self, name: str) -> int:
        """The change-table slot of a log file's name."""
        return slot_of(name)

    def catalog_bytes(self) -> bytes | None:
        """The stored catalog (None when there is none, or, keyed, its seal is bad)."""
        return unseal(read_view(str(self._backend.root / CATALOG_NAME)), self.hash_key)

    def put_catalog(self, data: bytes) -> None:
        """Replace the catalog atomically (sealed with the key of a keyed store)."""
        write_atomic(str(self._backend.root), CATALOG_NAME, seal(data, self.hash_key))


class FileTrash(TrashBin):
    """The ``.trash`` folder: a move there is a rename, undone by restore (see ``_filetrash``)."""

    def __init__(self, backend: FileBackend) -> None:
        super().__init__()
        self._backend = backend
        self._lock = TrashLock(backend.root, sync=backend.durable)

    def lock(self) -> TrashLock:
        """The trash lock: this process's mutex and a ``flock`` other processes respect."""
        return self._lock

    def put(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        """Retire the log read-only under its lock, then move it and its files to the trash."""
        backend = self._backend
        with self._lock:  # always before a writer lock: one order, no deadlock
            raw = backend.open_raw(key, create=False)
            if raw is None:
                raise SessionNotFoundError(key)
            fd = raw.io.fd
            try:
                backend.index_paths(key).remove()  # derived: a restored log rebuilds them
                # Writers holding the log notice the cleared bit on their next write (under the
                # lock) and find the path gone: nothing is appended to a log in the trash.
                os.fchmod(fd, 0o400)
                files = [
                    backend.path_for(key),
                    backend.snapshot_path(key),
                    backend.quarantine_path(key),
                    *backend.segment_paths(key),
                ]
                try:
                    return move_to_trash(
                        backend.root, key, files, entry_id, reason, when, sync=backend.durable
                    )
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.fchmod(fd, 0o600)
                    raise
            finally:
                backend.bump(key, membership=True)
                raw.io.close()

    def take_back(self, entry: TrashEntry) -> None:
        """Move the entry's files back, then make the log writable again."""
        backend = self._backend
        try:
            with self._lock:
                restore_entry(backend.root, entry.id, sync=backend.durable)
            # It was retired read-only in the trash.
            with contextlib.suppress(OSError, EventLogError):
                fd = open_nofollow(str(backend.path_for(entry.key)), READ_FLAGS)
                try:
                    os.fchmod(fd, 0o600)
                finally:
                    os.close(fd)
        finally:
            backend.bump(entry.key, membership=True)

    def purge(self, entry: TrashEntry) -> None:
        """Remove the entry's folder."""
        with self._lock:
            purge_entry(self._backend.root, entry.id)

    def entries(self) -> list[TrashEntry]:
        """The entries in ``.trash``."""
        return list_entries(self._backend.root)

    def restored_meanwhile(self, entry_id: str) -> str | None:
        """A restore a crash interrupted and the trash lock finished."""
        return self._lock.completed.pop(entry_id, None)

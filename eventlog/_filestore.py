"""The embedded file store: one JSONL log per session in one directory.

Invariants:
- The directory is 0700 and every file 0600, whatever the umask; no path is ever followed
  through a symlink (``O_NOFOLLOW``), and a non-regular file where a log should be is refused.
- Many writers per session, across processes: ``flock`` on the log's own descriptor for one
  write at a time (see :mod:`eventlog._fileio`), released by the kernel when a holder dies.
  After an open locks, the path is checked to still be the locked file, so a concurrent delete
  cannot leave a writer on an unlinked inode; later writes notice a removal (link count 0, or
  the trash's cleared owner-write bit) and raise :class:`SessionNotFoundError`.
- An append is one ``write`` of whole lines; a failed or short write is cut back with
  ``ftruncate`` so no partial line is left for a later append to glue onto.
- Descriptors are bounded (``max_open_files``); ``EMFILE``/``ENFILE`` become StorageError;
  a store dropped without ``close()`` closes its descriptors when it is collected.
- New files get their directory fsynced (unless durability is ``"none"``).
- Every append, truncate, writer open, create and delete of a log is followed by a bump of the
  store's change table (``.changes``, see :mod:`eventlog._changes`), which lets a listing stat
  only the logs whose slot changed; the bump is one store into shared memory.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import gzip
import itertools
import os
import stat
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ._changes import ChangeTable, ChangeView, slot_of
from ._errors import (
    CorruptLogError,
    EventLogError,
    InvalidEventError,
    NotALogError,
    SessionNotFoundError,
    StoreClosedError,
    UnsafePathError,
)
from ._fileindex import FileIndexFiles
from ._fileio import (
    LIVE_BIT,
    OPEN_FLAGS,
    READ_FLAGS,
    FdPool,
    FileIO,
    lock_fd,
    open_nofollow,
)
from ._filetrash import TrashLock, list_entries, move_to_trash, purge_entry, restore_entry
from ._fileviews import (
    list_log_names,
    read_from,
    read_view,
    remove_file,
    scan_logs,
    stat_log,
)
from ._indexsnap import IndexMeta
from ._keystore import FileKeyStore, KeyProvider, KeyStore
from ._lifecycle import TrashEntry
from ._names import check_key, key_to_stem, stem_to_key
from ._safeio import (
    append_private,
    fsync_dir,
    read_bytes,
    read_fd,
    read_first_line,
    remove,
    storage_error,
    sweep_temps,
    write_atomic,
    write_new,
)
from ._seal import seal, unseal
from ._segfiles import (
    all_closed,
    closed_parts,
    has_segments,
    read_live_start,
    read_segment,
    read_whole,
)
from ._segments import (
    DEFAULT_SEGMENT_BYTES,
    parse_segment_name,
    segment_name,
    segment_starts,
)
from ._snapshot import Snapshot
from ._store import BaseStore
from ._store_types import CutReport
from ._tokens import TokenCounter
from ._views import LogStat
from ._writer import Durability, SessionIO

LOG_SUFFIX = ".jsonl"
QUARANTINE_SUFFIX = ".quarantine"
SNAPSHOT_SUFFIX = ".snapshot"
#: The session catalog, in the store root (a leading dot: never a log's name).
CATALOG_NAME = ".catalog"
#: The key store of an encrypted file store, in the store root.
KEYS_DIR = ".keys"
_OPEN_FLAGS = OPEN_FLAGS
_READ_FLAGS = READ_FLAGS
#: Descriptors a store keeps open for its writers by default (least recently used out).
DEFAULT_MAX_OPEN_FILES = 128


def _open_nofollow(path: str, flags: int, mode: int = 0o600) -> int:
    return open_nofollow(path, flags, mode)


def read_file(path: str) -> bytes | None:
    """Read a whole regular file without following a symlink (None if it does not exist)."""
    return read_bytes(path)


@dataclass(slots=True)
class _Raw:
    io: FileIO
    #: The log from byte ``base`` on (the whole log when ``base`` is 0).
    data: bytes
    created: bool
    base: int = 0
    #: The snapshot whose line ``base`` is.
    snapshot: Snapshot | IndexMeta | None = None


class FileStore(BaseStore):
    """Sessions as JSONL files in ``root`` (created 0700 if missing).

    Args:
        root: the store's directory (``~`` is expanded).
        durability: ``"always"`` (fsync before each append returns), ``"batch"`` (group
            commit: one fsync covers the appends that arrive together; each append returns
            after its fsync), or ``"none"`` (page cache only; a power loss can lose the tail).
        hash_key: a secret to key the hash chain with; only key holders can forge a valid log.
        token_counter: counts a message's tokens at write time (default: a byte heuristic).
        lock_timeout: seconds a write waits for the log's lock (held by another writer for
            one write at a time) before :class:`LockedError`.
        batch_window: seconds a group-commit leader waits for more appends before its fsync.
        key_provider: encrypt the sessions this store creates, with data keys wrapped by this
            provider's master key (e.g. :class:`LocalKeyFile`); see docs/privacy.md.
        key_store: where the wrapped data keys live (default: ``root/.keys``).
        max_open_files: most log descriptors kept open for writers, and never more than half
            the process's limit (least recently used are closed, and reopened on next append).
        segment_bytes: a log whose live segment reaches this many bytes continues in a new
            segment file (docs/FORMAT.md, "Segments"); 0 never starts one.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durability: Durability | str = "batch",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        lock_timeout: float = 10.0,
        batch_window: float = 0.0,
        key_provider: KeyProvider | None = None,
        key_store: KeyStore | None = None,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int):
            raise InvalidEventError(f"segment_bytes must be an int, not {segment_bytes!r}")
        if segment_bytes < 0:
            raise InvalidEventError(f"segment_bytes must not be negative, not {segment_bytes}")
        self.segment_bytes = segment_bytes
        if isinstance(max_open_files, bool) or not isinstance(max_open_files, int):
            raise InvalidEventError(f"max_open_files must be an int, not {max_open_files!r}")
        if max_open_files < 1:
            raise InvalidEventError(f"max_open_files must be at least 1, not {max_open_files}")
        super().__init__(
            durability=durability,
            hash_key=hash_key,
            token_counter=token_counter,
            batch_window=batch_window,
        )
        self.root = Path(root).expanduser()
        self.lock_timeout = lock_timeout
        self._ensure_root()
        if key_provider is not None and key_store is None:
            key_store = FileKeyStore(self.root / KEYS_DIR, durable=self.durability != "none")
        self._use_keys(key_provider, key_store)
        self._changes = ChangeTable(str(self.root))
        self._pool = FdPool(max_open_files)
        # A store dropped without close(): its descriptors go with it.
        self._finalizer = weakref.finalize(self, _release_all, self._pool, self._changes)

    def __repr__(self) -> str:
        return f"FileStore({str(self.root)!r}, durability={self.durability!r})"

    def close(self) -> None:
        """Sync and close every open writer, then unmap the change table."""
        try:
            super().close()
        finally:
            self._finalizer()

    @property
    def max_open_files(self) -> int:
        """Most log descriptors this store keeps open for its writers."""
        return self._pool.limit

    def open_files(self) -> int:
        """Log descriptors open for writers right now."""
        return len(self._pool)

    def _ensure_root(self) -> None:
        root = str(self.root)
        if os.path.islink(root):
            raise UnsafePathError(root, "the store directory is a symlink")
        if os.path.exists(root) and not os.path.isdir(root):
            raise NotALogError(root, "it is a file, not a store directory")
        created = not os.path.exists(root)
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
            if created:
                os.chmod(root, 0o700)
        except OSError as exc:
            raise storage_error(root, "create the store directory", exc) from exc
        if created and self.durability != "none":
            fsync_dir(str(self.root.parent))

    # -- paths ---------------------------------------------------------------------------

    def path_for(self, key: str) -> Path:
        """The log file of ``key`` (it may not exist yet)."""
        return self.root / (key_to_stem(key) + LOG_SUFFIX)

    def quarantine_path(self, key: str) -> Path:
        """Where bytes cut from ``key``'s log are kept."""
        return self.root / (key_to_stem(key) + QUARANTINE_SUFFIX)

    def snapshot_path(self, key: str) -> Path:
        """Where ``key``'s snapshot is kept."""
        return self.root / (key_to_stem(key) + SNAPSHOT_SUFFIX)

    def _index_files(self, key: str) -> FileIndexFiles | None:
        # Index records hold offsets into one file: a log in segments keeps format-2 snapshots.
        if has_segments(str(self.root), key_to_stem(key)):
            return None
        return self._index_paths(key)

    def _index_paths(self, key: str) -> FileIndexFiles:
        stem = str(self.root / key_to_stem(key))
        return FileIndexFiles(stem + LOG_SUFFIX, stem, stem + LOG_SUFFIX)

    def compress_segments(self, key: str) -> list[Path]:
        """Gzip the closed segments of ``key``'s log (``<stem>.<n>.seg.gz``); readers and
        ``verify`` read them as before. Returns the files written. The live segment is left
        alone; a crash leaves both forms of one segment, and the next call finishes."""
        done: list[Path] = []
        for path in self._segment_paths(key):
            if path.name.endswith(".gz"):
                continue
            data = read_segment(str(path), False)
            target = path.with_name(path.name + ".gz")
            write_atomic(str(self.root), target.name, gzip.compress(data, mtime=0))
            remove(str(path))
            done.append(target)
        if done and self.durability != "none":
            fsync_dir(str(self.root))
        return done

    def _segment_paths(self, key: str) -> list[Path]:
        """The closed segments of ``key``'s log on disk, oldest first (the live one is
        :meth:`path_for`)."""
        return [Path(p) for p in all_closed(str(self.root), key_to_stem(check_key(key)))]

    def _open_raw_from(
        self, key: str, create: bool, snap: Snapshot | IndexMeta | None
    ) -> _Raw | None:
        raw = self._open_raw(key, create, snap.line_start if snap is not None else 0)
        if raw is not None:
            raw.snapshot = snap
        return raw

    def _describe(self, key: str) -> str:
        return str(self.path_for(key))

    # -- backend hooks -------------------------------------------------------------------

    def _open_raw(self, key: str, create: bool, start: int = 0) -> _Raw | None:
        # ``start``: read the log from there (a snapshot's line) when it is that long.
        path = str(self.path_for(key))
        deadline = time.monotonic() + self.lock_timeout
        pool = self._pool
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
                if created and self.durability != "none":
                    fsync_dir(str(self.root))
                live = read_live_start(fd)
                size = live.base + os.fstat(fd).st_size
                base = start if 0 < start <= size else 0
                data = self._read_fd(fd, max(0, base - live.base))
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
            self._changes.bump(slot_of(os.path.basename(path)), membership=created)
            io = FileIO(
                self,
                key,
                path,
                fd,
                base + len(data),
                (st.st_dev, st.st_ino),
                changes=self._changes,
                lock_timeout=self.lock_timeout,
            )
            io.seg = live
            io.segment_bytes = self.segment_bytes
            io.hash_key = self.hash_key
            io.sync_roll = self.durability != "none"
            return _Raw(io, data, created, base)

    @staticmethod
    def _read_fd(fd: int, offset: int = 0) -> bytes:
        return read_fd(fd, offset)

    def _release(self, io: SessionIO) -> None:
        assert isinstance(io, FileIO)
        io.release(self._pool)

    def _read_raw(self, key: str) -> bytes | None:
        # The whole log: closed segments (immutable once closed) read after the live one.
        path = str(self.path_for(key))
        try:
            fd = _open_nofollow(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        try:
            return read_whole(str(self.root), key_to_stem(key), fd)[1]
        except OSError as exc:
            raise storage_error(path, "read", exc) from exc
        finally:
            os.close(fd)

    def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists: one ``stat`` of its log, nothing read."""
        path = str(self.path_for(check_key(key)))
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

    def _probe_lock(self, key: str) -> bool:
        # A cheap probe: take and drop the flock on a read-only descriptor (no read of the log).
        try:
            fd = _open_nofollow(str(self.path_for(key)), _READ_FLAGS)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on, read with one ``pread``."""
        path = str(self.path_for(key))
        try:
            fd = _open_nofollow(path, _READ_FLAGS)
        except FileNotFoundError as exc:
            raise SessionNotFoundError(key) from exc
        try:
            return read_whole(str(self.root), key_to_stem(key), fd, offset)
        except OSError as exc:
            raise storage_error(path, "read", exc) from exc
        finally:
            os.close(fd)

    def import_bytes(
        self, key: str, data: bytes, *, rejected: Sequence[tuple[str, int, int, bytes]] = ()
    ) -> str:
        """See :meth:`BaseStore.import_bytes`; a log in segments is installed as its segment
        files (closed ones first, then the live one), byte for byte."""
        key = check_key(key)
        starts = segment_starts(data)
        if not starts:
            return super().import_bytes(key, data, rejected=rejected)
        decoded = self._decode(key, data)
        problem = decoded.bad or decoded.torn
        if problem is not None:
            raise CorruptLogError(self._describe(key), problem.line, problem.reason)
        with self._mutex:
            if self._closed:
                raise StoreClosedError("the store is closed")
            raw = self._open_raw(key, True)
            assert raw is not None
            written: list[str] = []
            try:
                existing = raw.data
                if existing == data:
                    return "unchanged"
                if existing:
                    if not data.startswith(existing):
                        return "clash"
                    raise InvalidEventError(
                        f"cannot extend {raw.io.name} with lines that cross a segment "
                        "boundary (nothing written); import into a new key"
                    )
                stem = key_to_stem(key)
                sync = self.durability != "none"
                bounds = [0, *starts]
                for n, (lo, hi) in enumerate(itertools.pairwise(bounds), start=1):
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
                for why, line, offset, text in rejected:
                    self._quarantine(key, text, reason=why, line=line, offset=offset)
                return "created"
            except BaseException:
                raw.io.close()
                for path in written:
                    remove(path)
                if raw.created:
                    self._remove(key)
                raise
            finally:
                raw.io.close()

    def cut(
        self, key: str, offset: int, *, reason: str, expect_length: int | None = None
    ) -> CutReport | None:
        """See :meth:`BaseStore.cut`; a closed segment is never cut (InvalidEventError)."""
        key = check_key(key)
        path = str(self.path_for(key))
        try:
            fd = open_nofollow(path, READ_FLAGS)
        except FileNotFoundError as exc:
            raise SessionNotFoundError(key) from exc
        try:
            live = read_live_start(fd)
        except OSError as exc:
            raise storage_error(path, "read", exc) from exc
        finally:
            os.close(fd)
        if 0 <= offset < live.base:
            raise InvalidEventError(
                f"byte {offset} of {path} is in a closed segment (segment {live.segment} starts "
                f"at {live.base}): closed segments are never cut; restore the segment from a copy"
            )
        return super().cut(key, offset, reason=reason, expect_length=expect_length)

    def _quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
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
        append_private(path, msgspec.json.encode(record) + b"\n", sync=self.durability != "none")
        return path

    def _list_keys(self) -> list[str]:
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
                key = self._key_from_header(entry.path)
                # A file not at its key's own path is never opened for that key: not listed.
                if key is not None and (not key or key_to_stem(key) != stem):
                    key = None
            if key is not None:
                keys.append(key)
        return keys

    @staticmethod
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

    def _remove(self, key: str) -> bool:
        raw = self._open_raw(key, create=False)
        if raw is None:
            return False
        try:
            self._index_paths(key).remove()
            closed = self._segment_paths(key)
            for path in (self.snapshot_path(key), self.quarantine_path(key), self.path_for(key)):
                remove(str(path))
            for path in closed:
                remove(str(path))
            if self.durability != "none":
                fsync_dir(str(self.root))
        finally:
            self._changes.bump(slot_of(self.path_for(key).name), membership=True)
            raw.io.close()
        return True

    def _trash(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        with self._trash_lock():  # always before a writer lock: one order, no deadlock
            raw = self._open_raw(key, create=False)
            if raw is None:
                raise SessionNotFoundError(key)
            assert isinstance(raw.io, FileIO)
            fd = raw.io.fd
            try:
                self._index_paths(key).remove()  # derived: a restored log rebuilds them
                # Writers holding the log notice the cleared bit on their next write (under the
                # lock) and find the path gone: nothing is appended to a log in the trash.
                os.fchmod(fd, 0o400)
                files = [self.path_for(key), self.snapshot_path(key), self.quarantine_path(key)]
                files += self._segment_paths(key)
                try:
                    return move_to_trash(
                        self.root,
                        key,
                        files,
                        entry_id,
                        reason,
                        when,
                        sync=self.durability != "none",
                    )
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.fchmod(fd, 0o600)
                    raise
            finally:
                self._changes.bump(slot_of(self.path_for(key).name), membership=True)
                raw.io.close()

    def _untrash(self, entry: TrashEntry) -> None:
        try:
            with self._trash_lock():
                restore_entry(self.root, entry.id, sync=self.durability != "none")
            self._revive(entry.key)
        finally:
            self._changes.bump(slot_of(self.path_for(entry.key).name), membership=True)

    def _purge(self, entry: TrashEntry) -> None:
        with self._trash_lock():
            purge_entry(self.root, entry.id)

    def _trash_entries(self) -> list[TrashEntry]:
        return list_entries(self.root)

    def _revive(self, key: str) -> None:
        """A log back from the trash is writable again (it was retired read-only there)."""
        with contextlib.suppress(OSError, EventLogError):
            fd = open_nofollow(str(self.path_for(key)), READ_FLAGS)
            try:
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)

    def _trash_lock(self) -> TrashLock:
        lock = self.__dict__.get("_trash_mutex")
        if lock is None:
            made = TrashLock(self.root, sync=self.durability != "none")
            lock = self.__dict__.setdefault("_trash_mutex", made)
        assert isinstance(lock, TrashLock)
        return lock

    def clean_leftovers(self) -> list[str]:
        """Remove what crashed processes left (view temporaries, half-done trash moves).

        Temporaries of live processes are left alone. Returns what was done, one sentence each.
        """
        done = [f"removed the temporary {path}" for path in sweep_temps(str(self.root))]
        trash = self.root / ".trash"
        if trash.is_dir() and not trash.is_symlink():
            lock = self._trash_lock()
            with lock:
                done += lock.settled
        return done

    def _restored_meanwhile(self, entry_id: str) -> str | None:
        return self._trash_lock().completed.pop(entry_id, None)

    # -- derived views (snapshots, catalog) ----------------------------------------------------

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The stored snapshot of ``key`` (None when there is none)."""
        return read_view(str(self.snapshot_path(key)))

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Replace (or with None, remove) ``key``'s snapshot atomically."""
        if data is None:
            remove_file(str(self.snapshot_path(key)))
        else:
            write_atomic(str(self.root), self.snapshot_path(key).name, data)

    def catalog_bytes(self) -> bytes | None:
        """The stored session catalog (None when there is none, or, keyed, its seal is bad)."""
        return unseal(read_view(str(self.root / CATALOG_NAME)), self.hash_key)

    def put_catalog(self, data: bytes) -> None:
        """Replace the session catalog atomically (sealed with the key of a keyed store)."""
        write_atomic(str(self.root), CATALOG_NAME, seal(data, self.hash_key))

    def scan_logs(self) -> list[LogStat]:
        """Every log file (name, size, inode, mtime) from one directory scan; the size of a log
        in segments is the whole log's (segments end to end)."""
        found = scan_logs(str(self.root), LOG_SUFFIX)
        stems = {
            parsed[0]
            for name in list_log_names(str(self.root), ".seg")
            + list_log_names(str(self.root), ".seg.gz")
            if (parsed := parse_segment_name(name)) is not None
        }
        if not stems:
            return found
        return [
            self._whole_size(st) if st.name[: -len(LOG_SUFFIX)] in stems else st for st in found
        ]

    def log_names(self) -> list[str]:
        """Every log file's name, from one directory scan without a stat per file."""
        return list_log_names(str(self.root), LOG_SUFFIX)

    def stat_log(self, name: str) -> LogStat | None:
        """One log file's size, inode and mtime (None: absent or not a regular file); the size
        of a log in segments is the whole log's."""
        st = stat_log(str(self.root), name)
        if st is None or not has_segments(str(self.root), name[: -len(LOG_SUFFIX)]):
            return st
        return self._whole_size(st)

    def _whole_size(self, st: LogStat) -> LogStat:
        """``st`` of a live segment, with the size of the whole log."""
        try:
            fd = open_nofollow(str(self.root / st.name), READ_FLAGS)
        except (FileNotFoundError, EventLogError):
            return st
        try:
            return dataclasses.replace(st, size=read_live_start(fd).base + st.size)
        except OSError:
            return st
        finally:
            os.close(fd)

    def read_changes(self) -> ChangeView | None:
        """A copy of the store's change table (None: none can be kept here)."""
        return self._changes.read()

    def read_log(self, name: str, offset: int = 0) -> tuple[int, bytes] | None:
        """A log file named by :meth:`scan_logs`: its length and bytes from ``offset`` on."""
        if "/" in name or name.startswith(".") or not name.endswith(LOG_SUFFIX):
            raise UnsafePathError(name, "not a log file name of this store")
        stem = name[: -len(LOG_SUFFIX)]
        if not has_segments(str(self.root), stem):
            return read_from(str(self.root / name), offset)
        # A log in segments: the whole log's length and bytes (offsets are of the whole log).
        try:
            fd = open_nofollow(str(self.root / name), READ_FLAGS)
        except (FileNotFoundError, UnsafePathError):
            return None
        try:
            return read_whole(str(self.root), stem, fd, offset)
        except OSError as exc:
            raise storage_error(str(self.root / name), "read", exc) from exc
        finally:
            os.close(fd)


def _release_all(pool: FdPool, changes: ChangeTable) -> None:
    """Close a store's descriptors and its change table (at close, or when it is collected)."""
    try:
        pool.close_all()
    finally:
        changes.close()

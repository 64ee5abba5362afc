"""The file store's trash: ``<root>/.trash/<entry id>/`` holds a trashed session's files.

Each entry directory (0700) holds ``entry.json`` (the key, when and why, the file names) and the
log, snapshot and quarantine as they were.

Rules:
- Nothing read from disk is trusted: an entry id is one path component, and every name in
  ``entry.json`` must be exactly the key's own log, snapshot or quarantine name
  (``key_to_stem(key)`` + suffix). Anything else is an :class:`UnsafePathError`, and the entry
  is left alone and not listed.
- Trash, restore, purge and retention cleanup run under the store's trash lock
  (:class:`TrashLock`: ``flock`` on ``.trash/.lock`` across processes, reentrant in a process).
- Restore never replaces a file: each file is hard-linked into the store (or, where hard links
  are refused, renamed with ``RENAME_NOREPLACE``), so a log another process created meanwhile
  makes the restore fail cleanly instead of being overwritten.
- Every step can be resumed. Trash writes ``entry.json`` (complete, by rename) before it moves
  the log, then the side files; restore links the log, then the side files, then removes the
  entry. Whoever next takes the trash lock settles what a crash left (:func:`settle`): an entry
  without its log, or whose log is the store's own (same inode), is a restore that stopped
  half-way and is completed; a complete entry whose side files are still in the store gets
  them. :func:`list_entries` never lists such a ghost.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import stat
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import msgspec

from ._errors import (
    EventLogError,
    InvalidEventError,
    SessionNotFoundError,
    StorageError,
    UnsafePathError,
)
from ._fileio import flock_within
from ._lifecycle import TrashEntry
from ._names import check_key, key_to_stem
from ._safeio import (
    append_private,
    fsync_dir,
    open_regular,
    read_bytes,
    remove,
    storage_error,
    write_new,
)
from ._segments import parse_segment_name

logger = logging.getLogger("sessionledger.eventlog.trash")

TRASH_DIR: Final = ".trash"
ENTRY_FILE: Final = "entry.json"
LOCK_FILE: Final = ".lock"
LOG: Final = ".jsonl"
SIDE: Final = (".snapshot", ".quarantine")
_RENAME_NOREPLACE: Final = 1
_AT_FDCWD: Final = -100


class _EntryRecord(msgspec.Struct, frozen=True):
    key: str
    deleted_at: datetime
    reason: str
    files: list[str]


@dataclass(frozen=True, slots=True)
class _Entry:
    """A trash entry read from disk, its names checked."""

    id: str
    path: str
    record: _EntryRecord
    log: str
    sides: tuple[str, ...]


def trash_root(root: Path) -> Path:
    """The trash folder of a store root."""
    return root / TRASH_DIR


# -- the lock ---------------------------------------------------------------------------------


class TrashLock:
    """The store-wide lock of trash, restore, purge and cleanup (reentrant per thread)."""

    def __init__(self, root: Path, *, timeout: float = 30.0, sync: bool = True) -> None:
        self._root = root
        self._timeout = timeout
        self._sync = sync
        self._mutex = threading.RLock()
        self._depth = 0
        self._fd = -1
        #: Restores that :func:`settle` completed: entry id -> key.
        self.completed: dict[str, str] = {}
        #: What the last :func:`settle` (on taking the lock) did.
        self.settled: list[str] = []

    def __enter__(self) -> TrashLock:
        self._mutex.acquire()
        try:
            if self._depth == 0:
                self._fd = self._take()
                try:
                    self.settled = settle(self._root, sync=self._sync, completed=self.completed)
                except BaseException:
                    os.close(self._fd)
                    self._fd = -1
                    raise
            self._depth += 1
        except BaseException:
            self._mutex.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._depth -= 1
            if self._depth == 0:
                fd, self._fd = self._fd, -1
                os.close(fd)  # releases the flock
        finally:
            self._mutex.release()

    def _take(self) -> int:
        base = _ensure_trash(self._root)
        path = str(base / LOCK_FILE)
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, action="lock trash")
        except FileExistsError:  # pragma: no cover - O_CREAT without O_EXCL
            raise
        try:
            taken = flock_within(fd, self._timeout, pause=0.001, max_pause=0.05)
        except OSError as exc:
            os.close(fd)
            raise storage_error(path, "lock trash", exc) from exc
        if not taken:
            os.close(fd)
            raise StorageError(path, "lock trash", f"held by another process for {self._timeout} s")
        return fd


def _ensure_trash(root: Path) -> Path:
    base = trash_root(root)
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise storage_error(str(base), "create trash", exc) from exc
    st = _lstat(str(base))
    if st is None or not stat.S_ISDIR(st.st_mode):  # a symlink must not carry files away
        raise UnsafePathError(str(base), "the trash is not a directory of this store")
    return base


# -- small file operations ------------------------------------------------------------------


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(path, "stat", exc) from exc


def _same(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    return a is not None and b is not None and (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


def _regular(path: str) -> os.stat_result | None:
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(path, "not a regular file in the trash")
    return st


_renameat2 = None
with contextlib.suppress(OSError, AttributeError):
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _renameat2 = _libc.renameat2


def _rename_noreplace(src: str, dst: str) -> None:
    """``rename`` that fails with FileExistsError instead of replacing ``dst``."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    done = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
    if done != 0:
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            raise FileExistsError(code, os.strerror(code), dst)
        raise OSError(code, os.strerror(code), dst)


def place(src: str, dst: str) -> bool:
    """Put the file ``src`` at ``dst`` unless something is there; False if something else is.

    True also when ``dst`` already is ``src`` (a step done before a crash). Never replaces.
    """
    try:
        os.link(src, dst, follow_symlinks=False)
        return True
    except FileExistsError:
        return _same(_lstat(src), _lstat(dst))
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise storage_error(dst, "restore", exc) from exc
    try:  # a filesystem without hard links
        _rename_noreplace(src, dst)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        raise storage_error(dst, "restore", exc) from exc


def _rename(src: str, dst: str) -> None:
    try:
        os.rename(src, dst)
    except OSError as exc:
        raise storage_error(src, "move to trash", exc) from exc


# -- reading entries --------------------------------------------------------------------------


def check_entry_id(entry_id: str) -> str:
    """``entry_id`` if it is one path component a trash entry can have, else UnsafePathError."""
    if (
        not isinstance(entry_id, str)
        or not entry_id
        or entry_id.startswith(".")
        or "/" in entry_id
        or "\x00" in entry_id
        or len(entry_id) > 255
    ):
        raise UnsafePathError(repr(entry_id), "not a trash entry id")
    return entry_id


def _read_entry(base: Path, entry_id: str) -> _Entry:
    """Read and check one entry (UnsafePathError, NotALogError-like StorageError if bad)."""
    path = str(base / check_entry_id(entry_id))
    where = os.path.join(path, ENTRY_FILE)
    data = read_bytes(where)
    if data is None:
        raise SessionNotFoundError(f"trash entry {entry_id}")
    try:
        record = msgspec.json.decode(data, type=_EntryRecord)
        key = check_key(record.key)
    except (msgspec.DecodeError, InvalidEventError) as exc:
        raise UnsafePathError(where, f"not a trash entry: {exc}") from exc
    stem = key_to_stem(key)
    allowed = {stem + suffix for suffix in (LOG, *SIDE)}
    for name in record.files:
        segment = parse_segment_name(name)
        if name not in allowed and (segment is None or segment[0] != stem):
            raise UnsafePathError(where, f"names {name!r}, not a file of session {key!r}")
    log = stem + LOG
    if log not in record.files:
        raise UnsafePathError(where, f"does not name the log of session {key!r}")
    sides = tuple(stem + s for s in SIDE if stem + s in record.files)
    sides += tuple(n for n in record.files if (p := parse_segment_name(n)) and p[0] == stem)
    return _Entry(entry_id, path, record, log, sides)


def _entry_ids(base: Path) -> list[str]:
    try:
        with os.scandir(base) as entries:
            return [
                e.name
                for e in entries
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            ]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise storage_error(str(base), "list trash", exc) from exc


def list_entries(root: Path) -> list[TrashEntry]:
    """Every restorable trash entry (bad or half-done entries are logged and left out)."""
    base = trash_root(root)
    st = _lstat(str(base))
    if st is None or not stat.S_ISDIR(st.st_mode):
        return []
    out = []
    for entry_id in _entry_ids(base):
        try:
            entry = _read_entry(base, entry_id)
            log = _regular(os.path.join(entry.path, entry.log))
            if log is None or _same(log, _lstat(str(root / entry.log))):
                continue  # a restore that stopped half-way: settled under the lock
        except SessionNotFoundError:
            continue  # being created (or a crash before its entry.json): settled
        except EventLogError as exc:
            logger.warning("trash entry %s skipped: %s", entry_id, exc)
            continue
        record = entry.record
        out.append(TrashEntry(entry_id, record.key, record.deleted_at, record.reason, entry.path))
    return out


# -- moving -----------------------------------------------------------------------------------


def move_to_trash(
    root: Path,
    key: str,
    files: list[Path],
    entry_id: str,
    reason: str,
    deleted_at: datetime,
    *,
    sync: bool = True,
) -> str:
    """Move ``files`` (the key's log first, then those side files that exist) into a new entry.

    Atomic for the caller: on failure the session is back in the store (or, if even that
    fails, the next holder of the trash lock completes the move) and a StorageError is raised.
    """
    base = _ensure_trash(root)
    entry_dir = str(base / check_entry_id(entry_id))
    log, *sides = files
    present = [log, *(f for f in sides if _lstat(str(f)) is not None)]
    record = _EntryRecord(
        key=key, deleted_at=deleted_at, reason=reason, files=[f.name for f in present]
    )
    try:
        os.mkdir(entry_dir, 0o700)
    except OSError as exc:
        raise storage_error(entry_dir, "create trash entry", exc) from exc
    try:
        tmp = os.path.join(entry_dir, "." + ENTRY_FILE)
        write_new(tmp, msgspec.json.encode(record), sync=sync, action="write trash entry")
        _rename(tmp, os.path.join(entry_dir, ENTRY_FILE))
        if sync:
            fsync_dir(entry_dir)
        _rename(str(log), os.path.join(entry_dir, log.name))
    except BaseException:
        shutil.rmtree(entry_dir, ignore_errors=True)
        raise
    try:
        for f in present[1:]:
            _rename(str(f), os.path.join(entry_dir, f.name))
        if sync:
            fsync_dir(entry_dir)
            fsync_dir(str(root))
    except StorageError as exc:
        try:
            _finish_restore(root, _read_entry(base, entry_id), sync=sync)
        except EventLogError as again:
            raise StorageError(
                entry_dir, "move to trash", f"{exc.cause}; moving back failed too: {again}"
            ) from exc
        raise
    return entry_dir


def restore_entry(root: Path, entry_id: str, *, sync: bool = True) -> str:
    """Move an entry's files back into the store (never over a file); return the key.

    Raises:
        InvalidEventError: a session with the key exists again (nothing changed).
        UnsafePathError: the entry names files that are not its key's own.
        SessionNotFoundError: no such entry.
        StorageError: the storage refused a step (the next holder of the lock resumes it).
    """
    base = trash_root(root)
    entry = _read_entry(base, entry_id)
    src = os.path.join(entry.path, entry.log)
    if _regular(src) is None:
        raise SessionNotFoundError(f"trash entry {entry_id}")
    if _lstat(str(root / entry.log)) is None:
        # A log in segments: its closed segments are back before the live one is.
        for name in entry.sides:
            inside = os.path.join(entry.path, name)
            if parse_segment_name(name) is not None and _regular(inside) is not None:
                place(inside, str(root / name))
    if not place(src, str(root / entry.log)):
        raise InvalidEventError(
            f"cannot restore {entry.record.key!r}: a session with that key exists again"
        )
    _finish_restore(root, entry, sync=sync)
    return entry.record.key


def _finish_restore(root: Path, entry: _Entry, *, sync: bool) -> None:
    """After the log is in the store (or gone from the entry): side files back, entry removed."""
    for name in entry.sides:
        src = os.path.join(entry.path, name)
        if _regular(src) is None:
            continue
        dst = str(root / name)
        if place(src, dst):
            continue
        if name.endswith(".quarantine"):
            # Cut bytes are never dropped: add them to the quarantine the store has now.
            data = read_bytes(src) or b""
            append_private(dst, data, sync=sync, action="restore quarantine")
        # A snapshot is derived: the store's own is checked against the log (and rebuilt).
    if sync:
        fsync_dir(str(root))
    for name in (*entry.sides, entry.log):
        remove(os.path.join(entry.path, name))
    remove(os.path.join(entry.path, ENTRY_FILE))
    try:
        shutil.rmtree(entry.path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise storage_error(entry.path, "remove trash entry", exc) from exc
    if sync:
        fsync_dir(str(trash_root(root)))


def purge_entry(root: Path, entry_id: str) -> None:
    """Remove a trash entry for good (rmtree never follows symlinks)."""
    path = str(trash_root(root) / check_entry_id(entry_id))
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise storage_error(path, "purge trash entry", exc) from exc


def settle(root: Path, *, sync: bool = True, completed: dict[str, str] | None = None) -> list[str]:
    """Complete what a crash left half-done in the trash (call under the lock); say what.

    Restores it completes are added to ``completed`` (entry id -> key).
    """
    base = trash_root(root)
    done: list[str] = []
    for entry_id in _entry_ids(base):
        try:
            entry = _read_entry(base, entry_id)
        except SessionNotFoundError:
            # No entry.json: a trash that stopped before moving anything.
            path = str(base / entry_id)
            with contextlib.suppress(OSError):
                names = os.listdir(path)
                if all(n.startswith(".") for n in names):
                    shutil.rmtree(path)
                    done.append(f"removed the unfinished trash entry {entry_id}")
            continue
        except EventLogError as exc:
            logger.warning("trash entry %s left alone: %s", entry_id, exc)
            continue
        src = _lstat(os.path.join(entry.path, entry.log))
        dst = _lstat(str(root / entry.log))
        if src is None or _same(src, dst):
            _finish_restore(root, entry, sync=sync)
            done.append(f"completed the restore of {entry.record.key!r} ({entry_id})")
            if completed is not None:
                completed[entry_id] = entry.record.key
        elif dst is None:
            for name in entry.sides:
                inside = os.path.join(entry.path, name)
                if _lstat(inside) is None and _lstat(str(root / name)) is not None:
                    _rename(str(root / name), inside)
                    done.append(f"moved {name} into trash entry {entry_id}")
    return done

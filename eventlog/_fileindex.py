"""File-store side of the index snapshot: the two record files beside a log, and log reads.

Beside ``<stem>.jsonl`` and its ``<stem>.snapshot`` the file store keeps ``<stem>.index`` (one
64-byte record per message event, in log order) and ``<stem>.ids`` (16 bytes per event, in
seq order). Both are append-only in effect: a record's position is a function of the log
alone (the N-th message's record is always at ``N * 64``), so writers only ever write the
bytes that belong there, and two processes bringing the same snapshot up to date write the
same bytes to the same places.

Invariants:
- Files are created 0600 with ``O_NOFOLLOW``; a symlink or non-regular file is never read
  or written (reads return nothing, writes raise :class:`UnsafePathError`).
- Nothing here trusts what it reads: the caller checks every chunk against the digests of the
  snapshot, and every log line against the chain.
- Every call opens and closes its own descriptor: a state that reads bodies lazily holds no
  descriptor between reads, and a log replaced meanwhile is caught by those checks.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Final, Literal

from ._errors import UnsafePathError
from ._safeio import read_range, remove, storage_error

INDEX_SUFFIX: Final = ".index"
IDS_SUFFIX: Final = ".ids"
IndexName = Literal["index", "ids"]

# O_NONBLOCK: a FIFO planted at a record path must not hang the open (regular files ignore it).
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _pread(path: str, offset: int, length: int) -> bytes:
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            return b""
        raise storage_error(path, "open", exc) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return read_range(fd, offset, length)
    except OSError as exc:
        raise storage_error(path, "read", exc) from exc
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class FileIndexFiles:
    """The log of one session and its two record files."""

    log: str
    stem: str
    #: The log's path (for messages).
    where: str

    def path(self, name: IndexName) -> str:
        """The path of a record file."""
        return self.stem + (INDEX_SUFFIX if name == "index" else IDS_SUFFIX)

    def read_log(self, offset: int, length: int) -> bytes:
        """``length`` bytes of the log at ``offset`` (fewer when it is shorter)."""
        return _pread(self.log, offset, length)

    def read(self, name: IndexName, offset: int, length: int) -> bytes:
        """Bytes of a record file (fewer, or none, when it is shorter or missing)."""
        return _pread(self.path(name), offset, length)

    def size(self, name: IndexName) -> int:
        """A record file's length (0 when missing or not a regular file)."""
        path = self.path(name)
        try:
            st = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return 0
        except OSError as exc:
            raise storage_error(path, "stat", exc) from exc
        return st.st_size if stat.S_ISREG(st.st_mode) else 0

    def write(self, name: IndexName, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of a record file (created 0600)."""
        path = self.path(name)
        try:
            fd = os.open(path, _WRITE_FLAGS, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(path, "it is a symlink") from exc
            if exc.errno == errno.ENXIO:
                raise UnsafePathError(path, "not a regular file") from exc
            raise storage_error(path, "open", exc) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafePathError(path, "not a regular file")
            view = memoryview(data)
            while view:
                written = os.pwrite(fd, view, offset)
                view = view[written:]
                offset += written
        except OSError as exc:
            raise storage_error(path, "write", exc) from exc
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Remove both record files (derived: nothing is lost)."""
        names: tuple[IndexName, ...] = ("index", "ids")
        for name in names:
            remove(self.path(name))

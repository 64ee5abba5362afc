"""File-store side of the derived views: atomic private files, log listing and stats, tail reads.

Invariants:
- A view file is written whole to a temporary name starting with ``.`` (a name
  :func:`~eventlog.key_to_stem` never produces, so no temporary file is ever taken for a log),
  created 0600 with ``O_EXCL | O_NOFOLLOW``, then renamed over the target: a reader sees the old
  file or the new one, never a mix. Views are derived, so they are not fsynced; a view damaged
  by a power loss fails its own check and is rebuilt.
- Nothing is read through a symlink; a view path that is not a regular file is treated as
  absent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from ._views import LogStat

_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def write_atomic(directory: str, name: str, data: bytes) -> None:
    """Replace ``directory/name`` with ``data`` (0600, via a temporary file and a rename)."""
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, _CREATE_FLAGS, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(directory, name))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def remove_file(path: str) -> None:
    """Remove ``path`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_view(path: str) -> bytes | None:
    """A view file's bytes; None when absent, a symlink, or not a regular file."""
    got = read_from(path, 0)
    return None if got is None else got[1]


def read_from(path: str, offset: int) -> tuple[int, bytes] | None:
    """A regular file's length and its bytes from ``offset`` on (None if absent or unsafe)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        chunks: list[bytes] = []
        pos = offset
        while True:
            chunk = os.pread(fd, max(size - pos, 1 << 16), pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return max(size, pos), b"".join(chunks)
    finally:
        os.close(fd)


def scan_logs(directory: str, suffix: str) -> list[LogStat]:
    """Every regular ``*suffix`` file not starting with ``.`` in ``directory``, from one scan."""
    out: list[LogStat] = []
    append = out.append
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(suffix) or name[0] == ".":
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                append(LogStat(name, st.st_size, st.st_ino, st.st_mtime_ns))
    return out


def list_log_names(directory: str, suffix: str) -> list[str]:
    """The names :func:`scan_logs` would list, without a stat per file where the OS says the type.

    An entry whose type the directory does not record is stat-ed (``is_file`` does it).
    """
    with os.scandir(directory) as entries:
        return [
            entry.name
            for entry in entries
            if entry.name.endswith(suffix)
            and entry.name[0] != "."
            and entry.is_file(follow_symlinks=False)
        ]


def stat_log(directory: str, name: str) -> LogStat | None:
    """One regular file's :class:`LogStat` (None if absent, a symlink or not a regular file)."""
    try:
        st = os.stat(os.path.join(directory, name), follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return LogStat(name, st.st_size, st.st_ino, st.st_mtime_ns)

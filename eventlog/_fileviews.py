"""File-store side of the derived views: atomic private files, log listing and stats, tail reads.

Invariants:
- A view file is written whole to a temporary file in ``.staging/`` (see
  :func:`eventlog._safeio.write_atomic`), then renamed over the target: a reader sees the old
  file or the new one, never a mix. Views are derived, so they are not fsynced; a view damaged
  by a power loss fails its own check and is rebuilt.
- Nothing is read through a symlink; a view path that is not a regular file is treated as
  absent.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from ._errors import UnsafePathError
from ._safeio import read_regular, remove, storage_error
from ._views import LogStat


def remove_file(path: str) -> None:
    """Remove ``path`` if it exists."""
    remove(path)


def read_view(path: str) -> bytes | None:
    """A view file's bytes; None when absent, a symlink, or not a regular file."""
    got = read_from(path, 0)
    return None if got is None else got[1]


def read_from(path: str, offset: int) -> tuple[int, bytes] | None:
    """A regular file's length and its bytes from ``offset`` on (None if absent or unsafe)."""
    try:
        return read_regular(path, offset=offset)
    except UnsafePathError:
        return None


@contextlib.contextmanager
def _listing(directory: str) -> Iterator[Iterator[os.DirEntry[str]]]:
    """``os.scandir`` with its failures (but absence) as a StorageError naming the directory."""
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise storage_error(directory, "list", exc) from exc
    with entries:
        yield entries


def scan_logs(directory: str, suffix: str) -> list[LogStat]:
    """Every regular ``*suffix`` file not starting with ``.`` in ``directory``, from one scan."""
    out: list[LogStat] = []
    append = out.append
    with _listing(directory) as entries:
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
    with _listing(directory) as entries:
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

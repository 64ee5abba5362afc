"""Opening files safely: the one way the file store opens, reads and writes a file.

Rules (every file the library opens goes through :func:`open_regular`):
- Never through a symlink (``O_NOFOLLOW``): a symlink is an :class:`UnsafePathError`.
- Never blocking on a file that is not a file (``O_NONBLOCK`` at open): a FIFO, socket, device
  or directory where a log, snapshot, catalog, quarantine or trash entry should be is an
  :class:`UnsafePathError` saying what it is, found by ``fstat`` before any read or write.
- Every other ``OSError`` becomes a :class:`StorageError` naming the file and the action; only
  ``FileNotFoundError`` (and ``FileExistsError`` for exclusive creates) pass through, because
  callers decide what absence means.
- A write that fails leaves no new empty or partial file behind: a file this call created is
  removed, a file it appended to is cut back to its old length.
- View files are replaced atomically through a temporary file in ``<dir>/.staging/``; each write of
  a view first removes that view's temporaries left by dead processes (:func:`sweep_temps`
  removes them all, for ``recover``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ._errors import StorageError, UnsafePathError

_BASE = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
READ = os.O_RDONLY
APPEND = os.O_WRONLY | os.O_APPEND
TEMP_DIR = ".staging"
_TEMP_SUFFIX = ".tmp"
#: A temporary file older than this is abandoned even if its writer's pid is in use again.
_TEMP_MAX_AGE = 3600.0

# Indirection the fault-injection tests patch (disk full while writing a side file).
_write = os.write


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, for messages."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def storage_error(path: str, action: str, exc: OSError) -> StorageError:
    """``exc`` as a :class:`StorageError` naming ``path``."""
    cause = os.strerror(exc.errno) if exc.errno else str(exc)
    return StorageError(path, action, cause)


def _refuse(path: str, reason: str) -> UnsafePathError:
    return UnsafePathError(path, f"{reason}, not a regular file")


def _kind_at(path: str, dir_fd: int | None) -> str:
    try:
        return kind_of(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return "not a regular file"


def open_regular(
    path: str, flags: int, *, action: str, mode: int = 0o600, dir_fd: int | None = None
) -> int:
    """Open ``path`` as a regular file (see the module rules); return the descriptor.

    Raises:
        FileNotFoundError: it does not exist (and ``O_CREAT`` was not given).
        FileExistsError: ``O_CREAT | O_EXCL`` and it exists.
        UnsafePathError: a symlink, or not a regular file.
        StorageError: any other failure.
    """
    return open_regular_stat(path, flags, action=action, mode=mode, dir_fd=dir_fd)[0]


def open_regular_stat(
    path: str, flags: int, *, action: str, mode: int = 0o600, dir_fd: int | None = None
) -> tuple[int, os.stat_result]:
    """:func:`open_regular`, and the ``fstat`` of the file it opened (its size as opened:
    no second ``fstat`` for it)."""
    try:
        fd = os.open(path, flags | _BASE, mode, dir_fd=dir_fd)
    except (FileNotFoundError, FileExistsError):
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(path, "it is a symlink") from exc
        if exc.errno in (errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.ENOTDIR):
            raise _refuse(path, _kind_at(path, dir_fd)) from exc
        raise storage_error(path, action, exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, kind_of(st.st_mode))
        if flags & (os.O_WRONLY | os.O_RDWR):
            os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise storage_error(path, action, exc) from exc
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_fd(fd: int, offset: int = 0, size: int | None = None) -> bytes:
    """Every byte of an open regular file from ``offset`` on (it may grow while read);
    ``size``: its size, when the caller has just had it from ``fstat`` (else one is made)."""
    if size is None:
        size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    while True:
        chunk = os.pread(fd, max(size - offset, 1 << 16), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_range(fd: int, offset: int, length: int) -> bytes:
    """Up to ``length`` bytes of an open file from ``offset`` (fewer only at its end)."""
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


def read_regular(path: str, *, offset: int = 0, action: str = "read") -> tuple[int, bytes] | None:
    """A regular file's length and its bytes from ``offset`` on; None if it does not exist."""
    try:
        fd, st = open_regular_stat(path, READ, action=action)
    except FileNotFoundError:
        return None
    try:
        size = st.st_size
        data = read_fd(fd, offset, size) if size > offset else b""
        return max(size, offset + len(data)), data
    except OSError as exc:
        raise storage_error(path, action, exc) from exc
    finally:
        os.close(fd)


def read_bytes(path: str, *, action: str = "read") -> bytes | None:
    """A whole regular file's bytes; None if it does not exist."""
    got = read_regular(path, action=action)
    return None if got is None else got[1]


def read_regular_file(path: str | os.PathLike[str]) -> bytes | None:
    """A file's bytes read the store's one safe way (never through a symlink, never blocking on
    a FIFO, only a regular file); None if it does not exist.

    Raises:
        UnsafePathError: a symlink, or not a regular file.
        StorageError: the read failed.
    """
    return read_bytes(os.fspath(path))


def read_first_line(path: str, *, limit: int = 1 << 24) -> bytes | None:
    """The first line of a regular file (without its newline), at most ``limit`` bytes."""
    try:
        fd = open_regular(path, READ, action="read")
    except FileNotFoundError:
        return None
    try:
        chunks: list[bytes] = []
        total = 0
        while total < limit:  # a header line can be longer than one read (large metadata)
            chunk = os.read(fd, 1 << 16)
            chunks.append(chunk)
            total += len(chunk)
            if not chunk or b"\n" in chunk:
                break
        return b"".join(chunks).split(b"\n", 1)[0]
    except OSError as exc:
        raise storage_error(path, "read", exc) from exc
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (short writes continued; no progress is an OSError)."""
    view = memoryview(data)
    while view:
        written = _write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write returned no progress")
        view = view[written:]


def append_private(path: str, data: bytes, *, sync: bool, action: str = "append") -> None:
    """Append ``data`` to a 0600 side file (created if absent), all or nothing."""
    try:
        fd = open_regular(path, APPEND, action=action)
        created = False
    except FileNotFoundError:
        try:
            fd = open_regular(path, APPEND | os.O_CREAT | os.O_EXCL, action=action)
            created = True
        except FileExistsError:
            fd = open_regular(path, APPEND, action=action)
            created = False
    try:
        before = os.fstat(fd).st_size
        os.fchmod(fd, 0o600)
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            if created:
                os.unlink(path)
            else:
                os.ftruncate(fd, before)
        raise storage_error(path, action, exc) from exc
    finally:
        os.close(fd)


def write_new(path: str, data: bytes, *, sync: bool, action: str = "write") -> None:
    """Create ``path`` (0600, it must not exist) holding ``data``; on failure, no file is left."""
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, action=action)
    try:
        try:
            os.fchmod(fd, 0o600)
            write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise storage_error(path, action, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def fsync_dir(path: str) -> None:
    """Make a directory entry change (create, rename, unlink) durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise storage_error(path, "fsync directory", exc) from exc


def remove(path: str) -> bool:
    """Remove ``path`` if it exists (True if it did); other failures are a StorageError."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise storage_error(path, "remove", exc) from exc
    return True


@contextlib.contextmanager
def _temp_dir(directory: str) -> Iterator[int]:
    tmp = os.path.join(directory, TEMP_DIR)
    try:
        os.mkdir(tmp, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise storage_error(tmp, "create directory", exc) from exc
    try:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(tmp, "the temporary folder is not a directory") from exc
        raise storage_error(tmp, "open directory", exc) from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _abandoned(name: str, dir_fd: int, now: float) -> bool:
    """Whether ``<view>.<pid>.<random>.tmp`` was left by a process that is gone (or long ago)."""
    parts = name.rsplit(".", 3)
    if len(parts) != 4 or parts[3] != "tmp" or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False  # this process's own write, in another thread
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if now - st.st_mtime > _TEMP_MAX_AGE:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _sweep(directory: str, wanted: Callable[[str], bool], now: float) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if wanted(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise storage_error(directory, "list", exc) from exc
    if not names:
        return []
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return []
    removed: list[str] = []
    try:
        for name in names:
            if _abandoned(name, dir_fd, now):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
                removed.append(os.path.join(directory, name))
    finally:
        os.close(dir_fd)
    return removed


def sweep_temps(directory: str, view: str | None = None) -> list[str]:
    """Remove abandoned temporaries of ``view`` (of every view when None); return their paths.

    With ``view`` None this also removes those older versions left in ``directory`` itself
    (``.<view>.<pid>.<random>.tmp``).
    """
    now = time.time()
    tmp = os.path.join(directory, TEMP_DIR)
    if view is not None:
        prefix = view + "."
        return _sweep(tmp, lambda name: name.startswith(prefix), now)
    removed = _sweep(tmp, lambda name: name.endswith(_TEMP_SUFFIX), now)
    legacy = _sweep(
        directory, lambda name: name.startswith(".") and name.endswith(_TEMP_SUFFIX), now
    )
    return removed + legacy


def write_temp_beside(path: Path, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to a new private (0600) file beside ``path``, durable unless told not.

    Returns the file's path (``.<name>.<pid>.<random>.tmp``), for the caller to rename or link
    into place and then remove. Never opened through a symlink; on any failure nothing is left.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}{_TEMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def write_atomic(directory: str, name: str, data: bytes) -> None:
    """Replace ``directory/name`` with ``data`` (0600) via a temporary file and a rename.

    The target is never followed if it is a symlink (the rename replaces the link itself); a
    directory there is an :class:`UnsafePathError`; any failure leaves no temporary behind.
    """
    target = os.path.join(directory, name)
    sweep_temps(directory, name)
    with _temp_dir(directory) as dir_fd:
        tmp = f"{name}.{os.getpid()}.{os.urandom(4).hex()}{_TEMP_SUFFIX}"
        shown = os.path.join(directory, TEMP_DIR, tmp)
        try:
            fd = open_regular(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, action="write", dir_fd=dir_fd
            )
            try:
                os.fchmod(fd, 0o600)
                write_all(fd, data)
            finally:
                os.close(fd)
            os.rename(tmp, target, src_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, OSError) and not isinstance(exc, FileExistsError):
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise _refuse(target, _kind_at(target, None)) from exc
                raise storage_error(shown, "write", exc) from exc
            raise

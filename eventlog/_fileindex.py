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
import gzip
import os
import stat
import zlib
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import msgspec

from ._errors import CorruptLogError, UnsafePathError
from ._events import Header
from ._safeio import read_range, remove, storage_error
from ._segfiles import closed_path

INDEX_SUFFIX: Final = ".index"
IDS_SUFFIX: Final = ".ids"
IndexName = Literal["index", "ids"]

# O_NONBLOCK: a FIFO planted at a record path must not hang the open (regular files ignore it).
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _open_regular(path: str) -> int | None:
    """A read-only descriptor of ``path``; None when it is gone, a symlink, or not a regular
    file (a FIFO or a directory planted there). Any other failure is a StorageError."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            return None
        raise storage_error(path, "open", exc) from exc
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise storage_error(path, "read", exc) from exc
    if not regular:
        os.close(fd)
        return None
    return fd


def _pread(path: str, offset: int, length: int, *, head: bool = False) -> bytes:
    """``length`` bytes of ``path`` at ``offset``; with ``head``, the log's whole offset: the
    file's first line says where it starts when it is a later segment (then bytes before that
    start are not in it and nothing is returned)."""
    fd = _open_regular(path)
    if fd is None:
        return b""
    try:
        if head:
            start = _start_of(_first_line(fd))
            base = 0 if start is None else start[1]
            if offset < base:
                return b""
            offset -= base
        return read_range(fd, offset, length)
    except OSError as exc:
        raise storage_error(path, "read", exc) from exc
    finally:
        os.close(fd)


def _first_line(fd: int) -> bytes:
    """The start of a file, at least up to its first newline (or :data:`_HEAD_LIMIT` bytes)."""
    first = read_range(fd, 0, _HEAD)
    if len(first) == _HEAD and b"\n" not in first:  # a long header (metadata)
        first = read_range(fd, 0, _HEAD_LIMIT)
    return first


def _live_start(path: str) -> tuple[int, int] | None:
    """(segment number, whole-log offset) of the live segment ``path`` (None: unreadable)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _start_of(_first_line(fd))
    except OSError as exc:
        raise storage_error(path, "read", exc) from exc
    finally:
        os.close(fd)


def _gz_range(path: str, offset: int, length: int) -> bytes | None:
    """``length`` bytes at whole-log ``offset`` from the gzipped closed segment ``path``,
    decompressed only up to the end of that range (None: the segment starts after ``offset``;
    ``b""``: gone meanwhile, or ``offset`` is past its end).

    Why decompress on demand rather than give up the index for a compressed log: a reader
    touches a closed segment only for a window that reaches back into it, and then pays the
    decompression of that one segment up to the window (bounded by the segment size, memory
    bounded by the range read); falling back would decompress and decode every segment.
    """
    fd = _open_regular(path)
    if fd is None:
        return b""
    try:
        raw = os.fdopen(fd, "rb")
    except OSError as exc:
        os.close(fd)
        raise storage_error(path, "read", exc) from exc
    try:
        with raw, gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            first = unzipped.read(_HEAD)
            if len(first) == _HEAD and b"\n" not in first:
                first += unzipped.read(_HEAD_LIMIT - _HEAD)
            start = _start_of(first)
            base = 0 if start is None else start[1]
            if offset < base:
                return None
            rel = offset - base
            if rel + length <= len(first):
                return first[rel : rel + length]
            unzipped.seek(rel)  # forward: decompresses and drops what comes before
            return unzipped.read(length)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise CorruptLogError(
            path, 1, f"the compressed segment does not decompress: {exc}"
        ) from exc
    except OSError as exc:
        raise storage_error(path, "read", exc) from exc


_HEAD: Final = 4096
_HEAD_LIMIT: Final = 1 << 20
_header_decoder = msgspec.json.Decoder(Header)


def _start_of(data: bytes) -> tuple[int, int] | None:
    """(segment number, whole-log offset it starts at) from a segment's first line (a log's
    first segment, or a file that is not a later segment: (1, 0)); None: no readable header."""
    end = data.find(b"\n", 0, _HEAD_LIMIT)
    if end < 0:
        return (1, 0) if not data else None
    try:
        header = _header_decoder.decode(data[:end])
    except (msgspec.DecodeError, UnicodeDecodeError):
        return (1, 0)
    if header.segment < 2:
        return (1, 0)
    return header.segment, header.offset


class IndexFiles(Protocol):
    """Where an index snapshot's two record files and its log are read and written (files
    beside the log here; rows for the PostgreSQL store, see ``_pg_index``)."""

    @property
    def where(self) -> str:
        """Where the log lives (for messages)."""

    def path(self, name: IndexName) -> str:
        """Where a record file lives (for messages)."""

    def read_log(self, offset: int, length: int) -> bytes:
        """``length`` bytes of the log at ``offset`` (fewer when it is shorter)."""

    def read(self, name: IndexName, offset: int, length: int) -> bytes:
        """Bytes of a record file (fewer, or none, when it is shorter or missing)."""

    def size(self, name: IndexName) -> int:
        """A record file's length (0 when missing)."""

    def write(self, name: IndexName, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of a record file (as ``pwrite`` does)."""

    def remove(self) -> None:
        """Remove both record files."""


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
        """``length`` bytes of the log at ``offset`` (fewer when it is shorter).

        Offsets are the whole log's: once the log has continued in a new segment (a writer
        opened from the index may roll it), a range before the live segment is read from the
        closed segments that hold it. The caller checks every line against the chain.
        """
        parts: list[bytes] = []
        end = offset + length
        while offset < end:
            got = self._read_segmented(offset, end - offset)
            if not got:
                break
            parts.append(got)
            offset += len(got)
        return b"".join(parts)

    def _read_segmented(self, offset: int, length: int) -> bytes:
        """Bytes at whole-log ``offset`` from the one segment that holds it (fewer at its end)."""
        got = _pread(self.log, offset, length, head=True)
        if got or not length:
            return got
        live = _live_start(self.log)
        if live is None or offset >= live[1]:
            return b""  # past the end (or no readable header)
        directory, name = os.path.split(self.log)
        stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
        for n in range(live[0] - 1, 0, -1):
            found = closed_path(directory, stem, n)
            if found is None:
                return b""
            path, compressed = found
            if not compressed:
                got = _pread(path, offset, length, head=True)
                if got:
                    return got
                if os.path.lexists(path):
                    continue  # the segment starts after ``offset``: an older one holds it
                # compressed meanwhile (the plain file removed): read the compressed one
                found = closed_path(directory, stem, n)
                if found is None or not found[1]:
                    return b""
                path = found[0]
            ranged = _gz_range(path, offset, length)
            if ranged is not None:
                return ranged  # b"": gone meanwhile; the caller's checks report it
        return b""

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

"""The file store's segments on disk: closing the live segment (the roll) and reading them back.

The rules are :mod:`eventlog._segments`; this module moves the bytes.

Invariants:
- A roll runs under the live segment's lock, with the writer's state caught up. Its steps, and
  what a crash after each leaves:
  1. the new segment's header is written to ``.<stem>.roll`` and synced (a crash leaves that
     dot-named file, which no reader opens and the next roll replaces);
  2. the live segment's owner-write bit is cleared (writers holding it then check the path on
     their next write; a crash leaves a log that the next open makes writable again);
  3. the live segment gets its closed name ``<stem>.<n>.seg`` as a second link (a crash leaves
     that link beside the live file, same inode: readers read closed segments below the live
     one's number only, and the next roll removes it);
  4. ``.<stem>.roll`` is renamed over ``<stem>.jsonl``: the roll is done. The new file was
     locked before the rename, so nobody writes it before the roller's own line.
- A writer holding a closed segment notices on its next write (owner-write bit cleared, the
  path is another file, and ``<stem>.<n>.seg`` is its file) and follows onto the live one.
- Offsets are of the whole log (segments end to end): a later segment's header says where it
  starts (``offset``), so the live file's bytes start at that offset.
- Reading checks that the closed segments end exactly where the live one starts: a missing,
  cut, foreign or planted segment is a :class:`CorruptLogError` naming it, never a silent gap.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import os
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from ._codec import encode_line
from ._errors import CorruptLogError, StorageError, UnsafePathError
from ._events import Header
from ._safeio import (
    fsync_dir,
    open_regular,
    read_fd,
    read_regular,
    remove,
    storage_error,
    write_atomic,
)
from ._segments import next_header, parse_segment_name, segment_name, segment_number

_header_decoder = msgspec.json.Decoder(Header)


# Indirection the fault-injection tests patch (disk full while writing the new header).
_write = os.write


def _step(name: str) -> None:
    """Between the roll's steps: the crash tests patch this to kill the process there."""


_FIRST_LINE_LIMIT = 1 << 20


@dataclass(frozen=True, slots=True)
class LiveStart:
    """Where a live segment sits in its log: its number and the offset it starts at."""

    segment: int = 1
    base: int = 0
    header: Header | None = None


def read_live_start(fd: int) -> LiveStart:
    """The live segment's number and start, from its header line (a new file: segment 1)."""
    chunk = os.pread(fd, 4096, 0)
    end = chunk.find(b"\n")
    if end < 0 and len(chunk) == 4096:  # a long header (metadata): read up to its newline
        chunk = os.pread(fd, _FIRST_LINE_LIMIT, 0)
        end = chunk.find(b"\n")
    if end < 0:
        return LiveStart()
    try:
        header = _header_decoder.decode(chunk[:end])
    except (msgspec.DecodeError, UnicodeDecodeError):
        return LiveStart()
    if header.segment < 2:
        return LiveStart(header=header)
    return LiveStart(segment_number(header), header.offset, header)


def closed_path(root: str, stem: str, n: int) -> tuple[str, bool] | None:
    """The file of closed segment ``n`` and whether it is compressed (None: neither exists)."""
    for compressed in (False, True):
        path = os.path.join(root, segment_name(stem, n, compressed=compressed))
        if os.path.lexists(path):
            return path, compressed
    return None


def read_segment(path: str, compressed: bool) -> bytes:
    """A closed segment's bytes (decompressed); refuses a symlink or a non-regular file."""
    got = read_regular(path)
    if got is None:
        raise FileNotFoundError(errno.ENOENT, "vanished", path)
    data = got[1]
    if not compressed:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise CorruptLogError(
            path, 1, f"the compressed segment does not decompress: {exc}"
        ) from exc


def _read_closed_n(root: str, stem: str, n: int, of: int) -> bytes:
    """Closed segment ``n`` (of ``of``), plain or compressed; compressed meanwhile is fine."""
    for _ in range(3):
        found = closed_path(root, stem, n)
        if found is None:
            break
        try:
            return read_segment(*found)
        except FileNotFoundError:
            continue  # compressed (plain one removed) between the look and the read
    name = segment_name(stem, n)
    raise CorruptLogError(
        os.path.join(root, name),
        1,
        f"segment {n} of {of} is missing (neither {name} nor {name}.gz exists); the log cannot "
        "be read whole",
    )


def closed_parts(root: str, stem: str, live: LiveStart, offset: int = 0) -> list[bytes]:
    """The log's bytes from ``offset`` up to where the live segment starts, one part per
    closed segment (the caller joins them with the live bytes: one copy).

    Raises :class:`CorruptLogError` for a missing segment or segments that do not end where the
    live one starts (cut, foreign or planted).
    """
    if live.segment < 2 or offset >= live.base:
        return []
    parts: list[bytes] = []
    total = 0
    for n in range(1, live.segment):
        data = _read_closed_n(root, stem, n, live.segment)
        start = total
        total += len(data)
        if total > offset:
            parts.append(data[max(0, offset - start) :])
    if total != live.base:
        raise CorruptLogError(
            os.path.join(root, stem + ".jsonl"),
            1,
            f"the closed segments 1..{live.segment - 1} hold {total} bytes but segment "
            f"{live.segment} starts at byte {live.base} (a segment was cut, replaced or planted)",
        )
    return parts


def read_whole(root: str, stem: str, fd: int, offset: int = 0) -> tuple[int, bytes]:
    """The whole log's length and bytes from ``offset`` on, the live file open as ``fd``."""
    live = read_live_start(fd)
    length = os.fstat(fd).st_size
    size = live.base + length
    if offset >= size:
        return size, b""
    tail = read_fd(fd, max(0, offset - live.base), length)
    if offset >= live.base:
        return offset + len(tail), tail
    parts = closed_parts(root, stem, live, offset)
    parts.append(tail)
    return live.base + len(tail), b"".join(parts)  # one copy of the whole


def compress_closed(root: str, stem: str, *, sync: bool) -> list[str]:
    """Gzip the closed segments of ``stem``'s log (``<stem>.<n>.seg.gz``, written atomically,
    then the plain file removed); returns the files written. The live segment is left alone; a
    crash leaves both forms of one segment (readers take either), and the next call finishes."""
    done: list[str] = []
    for path in all_closed(root, stem):
        if path.endswith(".gz"):
            continue
        data = read_segment(path, False)
        name = os.path.basename(path) + ".gz"
        write_atomic(root, name, gzip.compress(data, mtime=0))
        remove(path)
        done.append(os.path.join(root, name))
    if done and sync:
        fsync_dir(root)
    return done


def has_segments(root: str, stem: str) -> bool:
    """Whether the log ``<stem>.jsonl`` has closed segments (one ``lstat``, or two)."""
    return closed_path(root, stem, 1) is not None


def all_closed(root: str, stem: str) -> list[str]:
    """The paths of every closed segment of ``<stem>.jsonl`` on disk, oldest first (not the
    second link to the live file that a roll which crashed before its rename leaves)."""
    try:
        live = os.lstat(os.path.join(root, stem + ".jsonl"))
        ident = (live.st_dev, live.st_ino)
    except FileNotFoundError:
        ident = None
    out: list[str] = []
    n = 1
    while (found := closed_path(root, stem, n)) is not None:
        try:
            st = os.lstat(found[0])
        except FileNotFoundError:
            continue  # compressed meanwhile: look again
        if (st.st_dev, st.st_ino) == ident:
            break
        out.append(found[0])
        n += 1
    return out


@dataclass(frozen=True, slots=True)
class Rolled:
    """A done roll: the new live segment's descriptor (locked), identity and first line."""

    fd: int
    ident: tuple[int, int]
    line: bytes
    head: str
    start: LiveStart


def roll(
    fd: int,
    *,
    root: str,
    stem: str,
    seq: int,
    head: str,
    size: int,
    hash_key: bytes,
    sync: bool,
) -> Rolled:
    """Close the live segment (open as ``fd``, locked, ``size`` bytes of log in all) and start
    the next; see the module's steps. The caller swaps to the returned descriptor."""
    live_path = os.path.join(root, stem + ".jsonl")
    current = read_live_start(fd)
    first = current.header
    if first is None:
        raise StorageError(live_path, "roll", "the live segment has no readable header")
    n = current.segment
    closed = os.path.join(root, segment_name(stem, n))
    st = os.fstat(fd)
    with contextlib.suppress(FileNotFoundError):
        there = os.lstat(closed)
        if (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino):
            raise UnsafePathError(closed, f"a file is in the way of closing segment {n}")
        os.unlink(closed)  # the link of a roll that crashed before its rename
    header = next_header(
        first,
        segment=n + 1,
        seq=seq,
        prev_h=head,
        offset=size,
        ts=datetime.now(UTC),
    )
    line, h = encode_line(header, head, hash_key)
    tmp = os.path.join(root, f".{stem}.roll")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a crashed roll's; we hold the lock, so nobody else's
    try:
        new = open_regular(
            tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, action="roll", mode=0o600
        )
    except FileExistsError as exc:
        raise StorageError(tmp, "roll", "created by someone else meanwhile") from exc
    try:
        fcntl.flock(new, fcntl.LOCK_EX)
        os.fchmod(new, 0o600)
        _step("created")
        if _write(new, line) != len(line):  # the disk filled up mid-line
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if sync:
            os.fsync(new)
            os.fsync(fd)  # the closed segment is whole on disk before it is named closed
        _step("header")
        os.fchmod(fd, 0o400)
        _step("retired")
        try:
            os.link(live_path, closed, follow_symlinks=False)
            _step("linked")
            os.rename(tmp, live_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o600)
            raise
        if sync:
            dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        nst = os.fstat(new)
        _step("renamed")
    except OSError as exc:
        os.close(new)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno == errno.EEXIST:
            raise UnsafePathError(closed, f"a file is in the way of closing segment {n}") from exc
        raise storage_error(live_path, "roll to a new segment", exc) from exc
    except BaseException:
        os.close(new)
        raise
    return Rolled(new, (nst.st_dev, nst.st_ino), line, h, LiveStart(n + 1, size, header))


def rolled_away(root: str, stem: str, segment: int, ident: tuple[int, int]) -> bool:
    """Whether the file ``ident`` (once live segment ``segment``) is now that closed segment."""
    try:
        st = os.lstat(os.path.join(root, segment_name(stem, segment)))
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == ident


def _lock_free(path: str) -> int | None:
    """A descriptor holding ``path``'s lock when nobody else holds it (None: busy or absent)."""
    try:
        fd = open_regular(path, os.O_RDONLY, action="open")
    except (FileNotFoundError, UnsafePathError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def clean_rolls(root: str) -> list[str]:
    """Remove what rolls that crashed left: ``.<stem>.roll`` files, and a closed segment's name
    that is a second link to the live file. Only under the live log's lock (a roll in progress
    holds it, so its files are never touched). Returns what was done, one sentence each."""
    done: list[str] = []
    with os.scandir(root) as listing:
        entries = list(listing)
    for entry in entries:
        name = entry.name
        if name.startswith(".") and name.endswith(".roll"):
            stem, leftover = name[1 : -len(".roll")], entry.path
            what = "the unfinished roll"
        elif (parsed := parse_segment_name(name)) is not None and not parsed[2]:
            stem, leftover = parsed[0], entry.path
            what = "the second link of a roll that crashed before its rename,"
        else:
            continue
        live = os.path.join(root, stem + ".jsonl")
        fd = _lock_free(live)
        if fd is None:
            if name.endswith(".roll") and not os.path.lexists(live):
                fd = -1  # no log: nobody can be rolling it
            else:
                continue
        try:
            if not name.endswith(".roll"):
                st, there = os.fstat(fd), os.lstat(leftover)
                if (st.st_dev, st.st_ino) != (there.st_dev, there.st_ino):
                    continue  # a real closed segment
            os.unlink(leftover)
            done.append(f"removed {what} {leftover}")
        except OSError:  # gone meanwhile, or not a file we may remove: leave it
            pass
        finally:
            if fd >= 0:
                os.close(fd)
    return done


def stray_segments(root: str) -> list[tuple[str, str]]:
    """Closed-segment names that no log reads, with why: (path, reason)."""
    out: list[tuple[str, str]] = []
    lives: dict[str, LiveStart | None] = {}
    with os.scandir(root) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        parsed = parse_segment_name(entry.name)
        if parsed is None:
            continue
        stem, n, _ = parsed
        if stem not in lives:
            try:
                fd = open_regular(os.path.join(root, stem + ".jsonl"), os.O_RDONLY, action="open")
            except (FileNotFoundError, UnsafePathError):
                lives[stem] = None
            else:
                try:
                    lives[stem] = read_live_start(fd)
                finally:
                    os.close(fd)
        live = lives[stem]
        if live is None:
            out.append((entry.path, "a segment of no log in this store (planted, or left)"))
        elif n >= live.segment:
            out.append(
                (
                    entry.path,
                    f"segment {n} of a log whose live segment is {live.segment}: no reader reads "
                    "it (left by a crashed roll, or planted)",
                )
            )
    return out

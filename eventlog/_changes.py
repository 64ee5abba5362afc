"""The change table: a small shared memory-mapped file that tells a listing which logs changed.

The file store keeps it as ``.changes`` in its root (a leading dot: never a log's name). Layout,
little-endian 64-bit words (:data:`TABLE_SIZE` bytes): word 0 the magic ``SLCHG1``, word 1 the
slot count, words 2-3 a random table id, word 4 the creation time (wall clock, ns), word 8 the
membership stamp, words 16 on one stamp per slot. A log's slot is :func:`slot_of` its file name.

Invariants:
- Writers STORE a fresh stamp, never increment: after every append, truncate, create, delete
  and writer open of a log, into its slot; after every create and delete (and trash, restore),
  also into the membership word. Stamps are unique (a random 63-bit start per process and table
  mapping, counted up by one ``itertools.count``, reseeded in a forked child), so a slot never
  goes back to a value a reader saw, even when two processes race on it (a lost
  read-modify-write increment could repeat one). The store is one mmap write: no syscall.
- Hence: a reader that copied the table at time t and later reads a slot equal to its copy knows
  no bump of that slot finished since t, so every log of that slot is as it was at t; the same
  for the membership word and the set of logs. Readers copy the table BEFORE they stat.
- Readers make the table (a store that is never listed has none): it is written whole under a
  temporary name and hard-linked into place, so it is never seen half made and an existing one
  is never replaced (except a corrupt one, by rename). A writer with no mapping looks for the
  table, and a writer with one checks that it is still the linked file, at most
  :data:`CHECK_INTERVAL` apart, each check AFTER its store; a writer whose table was deleted or
  replaced therefore stores into the orphan (or nowhere) for at most that long after the new
  table appeared. So a reader trusts a table only through a copy it saved at least
  :data:`SETTLE_NS` after the table's creation, and stats every log until then.
- The table is only ever replaced whole (rename) or deleted. Truncating or rewriting it IN
  PLACE while a process has it mapped can kill that process with SIGBUS (as with SQLite's
  ``-shm`` file): readers and writers check its size before they touch it, but a writer's bump
  between two checks does not. Delete it instead; nothing is lost.
- Nothing here is authoritative: with no table (missing, corrupt, unreadable, or a store written
  by an older version) readers stat every log, which is always correct, only slower.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import mmap
import os
import stat
import threading
import time
import weakref
import zlib
from dataclasses import dataclass
from typing import Final

#: The table's file name in the store root.
CHANGES_NAME: Final = ".changes"
SLOTS: Final = 4096
MAGIC: Final = b"SLCHG1\0\0"
_HEADER_WORDS: Final = 16
_MEMBERSHIP_WORD: Final = 8
TABLE_SIZE: Final = (_HEADER_WORDS + SLOTS) * 8
_SLOTS_START: Final = _HEADER_WORDS * 8
#: Seconds between a writer's checks that its mapping is still the table in the store.
CHECK_INTERVAL: Final = 0.25
#: A reader trusts a table through copies saved at least this long after its creation.
SETTLE_NS: Final = 1_000_000_000
_FUTURE_NS: Final = 60 * 1_000_000_000
_OPEN_FLAGS: Final = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
_CREATE_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW


def slot_of(name: str) -> int:
    """The slot of a log file name (stable across processes and runs)."""
    return zlib.crc32(os.fsencode(name)) % SLOTS


def new_table_bytes(created_ns: int) -> bytes:
    """The initial contents of a table created at ``created_ns`` (pure but for its random id)."""
    head = bytearray(_SLOTS_START)
    head[0:8] = MAGIC
    head[8:16] = SLOTS.to_bytes(8, "little")
    head[16:32] = os.urandom(16)
    head[32:40] = created_ns.to_bytes(8, "little")
    return bytes(head) + bytes(SLOTS * 8)


def valid_table(data: bytes | mmap.mmap) -> bool:
    """Whether ``data`` is a table of this format (magic, slot count and size)."""
    return (
        len(data) == TABLE_SIZE
        and data[0:8] == MAGIC
        and int.from_bytes(data[8:16], "little") == SLOTS
    )


@dataclass(frozen=True, slots=True)
class ChangeView:
    """A reader's copy of the table: its id, creation time, membership stamp and slot stamps."""

    ident: bytes
    created_ns: int
    membership: int
    #: ``SLOTS`` little-endian u64 stamps.
    slots: bytes

    @property
    def settled_ns(self) -> int:
        """A copy saved at or after this wall-clock time may be trusted (see the module rules)."""
        return self.created_ns + SETTLE_NS

    def changed_since(self, slots: bytes) -> list[int]:
        """The slots whose stamps differ from an earlier copy's ``slots``."""
        return changed_slots(slots, self.slots)


def view_of(data: bytes | mmap.mmap) -> ChangeView:
    """Copy a mapped (or read) table into a :class:`ChangeView` (pure)."""
    member = _MEMBERSHIP_WORD * 8
    return ChangeView(
        ident=bytes(data[16:32]),
        created_ns=int.from_bytes(data[32:40], "little"),
        membership=int.from_bytes(data[member : member + 8], "little"),
        slots=bytes(data[_SLOTS_START:TABLE_SIZE]),
    )


_BLOCK: Final = 512


def changed_slots(old: bytes, new: bytes) -> list[int]:
    """The slots whose stamps differ between two copies (all of them if the sizes differ)."""
    if len(old) != len(new):
        return list(range(len(new) // 8))
    out: list[int] = []
    for start in range(0, len(new), _BLOCK):
        end = start + _BLOCK
        if old[start:end] == new[start:end]:
            continue
        a = memoryview(old)[start:end].cast("Q")
        b = memoryview(new)[start:end].cast("Q")
        base = start // 8
        out.extend(base + i for i in range(len(b)) if a[i] != b[i])
    return out


_tables: weakref.WeakSet[ChangeTable] = weakref.WeakSet()


def _reseed_after_fork() -> None:
    for table in list(_tables):
        table._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_after_fork)


class ChangeTable:
    """One process's handle on a store's change table (writers bump it, readers copy it)."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, CHANGES_NAME)
        self._root = root
        self._lock = threading.Lock()
        #: (inode, device) of the mapped file: the path must still name it.
        self._ident: tuple[int, int] | None = None
        self._map: mmap.mmap | None = None
        self._words: memoryview | None = None
        #: Monotonic time at or before which the mapping was last known to be the linked table.
        self._checked = -1e18
        self._stamps = itertools.count(1)
        self._reseed()
        _tables.add(self)

    def _reseed(self) -> None:
        self._stamps = itertools.count(int.from_bytes(os.urandom(8), "little") >> 1)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._reseed()

    # -- writers ---------------------------------------------------------------------------

    def bump(self, slot: int, *, membership: bool = False) -> None:
        """Store fresh stamps for a log's slot (and the membership word): after the change."""
        words = self._words
        if words is not None:
            words[_HEADER_WORDS + slot] = next(self._stamps)
            if membership:
                words[_MEMBERSHIP_WORD] = next(self._stamps)
        # The check time is read BEFORE the mapping is compared: a time set by a check of some
        # other mapping (another thread remapped) then never vouches for the one stored into.
        while time.monotonic() - self._checked >= CHECK_INTERVAL or self._words is not words:
            words = self._recheck(words, slot, membership)

    def _recheck(self, stored: memoryview | None, slot: int, membership: bool) -> memoryview | None:
        """Check the mapping if due; store again if it is not the one stored into. Returns it."""
        if time.monotonic() - self._checked >= CHECK_INTERVAL:
            self._ensure(create=False)
        words = self._words
        if words is not None and words is not stored:
            words[_HEADER_WORDS + slot] = next(self._stamps)
            if membership:
                words[_MEMBERSHIP_WORD] = next(self._stamps)
        return words

    # -- readers ---------------------------------------------------------------------------

    def read(self) -> ChangeView | None:
        """A copy of the current table (None: there is none and it cannot be made).

        A table created in the future (the clock went back) would never settle: it is replaced.
        """
        self._ensure(create=True)
        table = self._map
        if table is None:
            return None
        view = view_of(table)
        if view.created_ns > time.time_ns() + _FUTURE_NS:
            with contextlib.suppress(OSError):
                self._replace_corrupt()
            self._ensure(create=True)
            table = self._map
            return None if table is None else view_of(table)
        return view

    # -- the mapping -----------------------------------------------------------------------

    def _ensure(self, *, create: bool) -> bool:
        """Make the mapping the linked table; True if it already was (no remap).

        Only readers (``create``) make a missing table or replace a corrupt one: a store that
        is never listed gets no table, and its writers only look for one every interval.
        """
        with self._lock:
            now = time.monotonic()
            if self._map is not None:
                try:
                    st = os.stat(self.path, follow_symlinks=False)
                except OSError:
                    usable = False
                else:  # the size first: touching a mapping past the file's end is a SIGBUS
                    usable = (
                        (st.st_ino, st.st_dev) == self._ident
                        and st.st_size == TABLE_SIZE
                        and valid_table(self._map)
                    )
                if usable:
                    self._checked = now
                    return True
            self._unmap()
            try:
                self._map_table(create)
            except OSError:
                self._unmap()
            self._checked = now
            return False

    def _unmap(self) -> None:
        # The old map is dropped, not closed: another thread may still hold its memoryview.
        # With the last reference gone, the mmap object unmaps and closes its descriptor.
        self._words = None
        self._map = None
        self._ident = None

    def _map_table(self, create: bool) -> None:
        for _ in range(3):
            try:
                fd = os.open(self.path, _OPEN_FLAGS)
            except FileNotFoundError:
                if not create:
                    return
                self._create()
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(errno.EINVAL, "the change table is not a regular file")
                table = mmap.mmap(fd, st.st_size) if st.st_size == TABLE_SIZE else None
                if table is None or not valid_table(table):
                    head = os.pread(fd, len(MAGIC), 0)
                    if not create or (head[:5] == MAGIC[:5] and head != MAGIC):
                        raise OSError(errno.EINVAL, "a corrupt change table, or another version")
                    self._replace_corrupt()
                    continue
            finally:
                os.close(fd)  # the mmap keeps its own descriptor while it lives
            self._map, self._ident = table, (st.st_ino, st.st_dev)
            self._words = memoryview(table).cast("Q")
            self._reseed()
            return
        raise OSError(errno.EAGAIN, "the change table keeps changing")

    def _write_temp(self) -> str:
        tmp = os.path.join(self._root, f"{CHANGES_NAME}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, _CREATE_FLAGS, 0o600)
        try:
            os.fchmod(fd, 0o600)
            # Its own loop, not _safeio.write_all: the change table is not a view, and the
            # tests that kill a view's write half-way wrap that one.
            data = memoryview(new_table_bytes(time.time_ns()))
            while data:
                data = data[os.write(fd, data) :]
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _create(self) -> None:
        tmp = self._write_temp()
        try:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, self.path, follow_symlinks=False)
        finally:
            os.unlink(tmp)

    def _replace_corrupt(self) -> None:
        tmp = self._write_temp()
        try:
            os.rename(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise

    def close(self) -> None:
        """Drop the mapping (a later bump or read maps the table again)."""
        with self._lock:
            self._unmap()
            self._checked = -1e18

"""One session log file as a writer holds it: a pooled descriptor and a lock per write.

Invariants:
- The log's ``flock`` is held for one write (one :meth:`FileIO.transaction`), or across a burst
  of this writer's own writes as a lease (see :mod:`eventlog._lease`: bounded in time, ended
  for a waiter of this process, never across a wait for anyone else). Inside it the writer folds
  in what others appended (``catch_up``), stages its event against that state, writes and, with
  ``"always"``, syncs; then the lock is released. A transaction inside an unbroken lease skips
  the ``flock`` and the ``fstat``: nobody else could change the log meanwhile. A crashed holder
  keeps nothing: the kernel drops the lock with its descriptors.
- An append is one ``write`` of whole lines; a failed or short write is cut back with
  ``ftruncate`` to the size the writer knew, so no partial line is left for a later append.
- Descriptors are a bounded resource: a :class:`FdPool` keeps at most ``limit`` of them open
  (least recently used first out). A descriptor in use (a transaction or an fsync) is pinned and
  never closed under its user; an evicted log reopens its path on next use and checks that it is
  still the same file (device and inode). ``EMFILE``/``ENFILE`` evict idle descriptors and retry,
  then raise :class:`StorageError`.
- A removed log is noticed on the next write: ``unlink`` drops the link count to 0, and the trash
  clears the owner-write bit (under the lock) before it moves a log away, so a writer whose log
  lost that bit checks the path. Either way the write raises :class:`SessionNotFoundError`.
- After ``fork`` the child never uses its parent's descriptors (they share the parent's open file
  descriptions, hence its locks): it drops them and reloads on next use.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import resource
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from ._changes import ChangeTable, slot_of
from ._errors import LockedError, SessionNotFoundError, StorageError
from ._fold import SessionState
from ._lease import (
    LEASE_COOL,
    LEASE_IDLE,
    LEASE_SHARED,
    LEASES,
    WAITERS_MARK,
    mark_waiting,
    somebody_waits,
    unmark_waiting,
)
from ._safeio import open_regular, read_fd, storage_error
from ._segfiles import LiveStart, closed_parts, read_live_start, roll, rolled_away

if TYPE_CHECKING:
    from ._backend import CatchUp

OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
_T = TypeVar("_T")
#: The owner-write bit: cleared on a log that is being moved out of the store.
LIVE_BIT = stat.S_IWUSR

_monotonic = time.monotonic

# Indirections the fault-injection tests patch.
_write = os.write
_fsync = os.fdatasync if hasattr(os, "fdatasync") else os.fsync


def open_nofollow(
    path: str, flags: int, mode: int = 0o600, *, evict: Callable[[], bool] | None = None
) -> int:
    """Open a regular file (see ``_safeio.open_regular``); on EMFILE/ENFILE ``evict`` an idle
    descriptor of ours and retry, then raise :class:`StorageError`."""
    while True:
        try:
            return open_regular(path, flags, action="open", mode=mode)
        except StorageError as exc:
            cause = exc.__cause__
            full = isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE)
            if full and evict is not None and evict():
                continue
            raise


def read_log_file(
    path: str,
    read: Callable[[int], _T],
    *,
    absent: tuple[type[Exception], ...] = (FileNotFoundError,),
) -> _T | None:
    """``read(fd)`` on the file at ``path`` opened read-only (never through a symlink), closed
    after: the one way a log file is opened to be read whole or in part.

    None when opening raises one of ``absent`` (no such file). An ``OSError`` while reading
    is a :class:`StorageError` naming the file.
    """
    try:
        fd = open_nofollow(path, READ_FLAGS)
    except absent:
        return None
    try:
        return read(fd)
    except OSError as exc:
        raise storage_error(path, "read", exc) from exc
    finally:
        os.close(fd)


def lock_fd(
    fd: int,
    key: str,
    path: str,
    timeout: float,
    while_waiting: Callable[[], bool] | None = None,
) -> None:
    """Take the exclusive ``flock`` on ``fd``, waiting up to ``timeout`` seconds.

    ``while_waiting`` is called between tries (True: it did work, so try again at once): a
    writer folds in, without the lock, what the holder and others append meanwhile, so that
    little is left to fold once it holds the lock.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    if LEASES.held:  # maybe a lease of this very process on this file: end it, try again
        st = os.fstat(fd)
        LEASES.end_all((st.st_dev, st.st_ino))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
    deadline = time.monotonic() + timeout
    tries = 0
    # Say that we wait: a lease of another process on this log ends at its reaper's next look
    # (see ``_lease``), not by age.
    marked = mark_waiting(fd)
    try:
        while True:
            # Holders keep the lock for one write (microseconds): yield the processor a few
            # times, then poll every 50 us, backing off to 1 ms only for a long hold.
            if while_waiting is None or not while_waiting():
                tries += 1
                time.sleep(
                    0 if tries <= 8 else min(0.00005 * (1 << min((tries - 8) // 32, 5)), 0.001)
                )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockedError(key, path) from None
    finally:
        if marked:
            unmark_waiting(fd)


def flock_within(fd: int, seconds: float, *, pause: float, max_pause: float) -> bool:
    """Try the exclusive ``flock`` on ``fd`` until it is taken (True) or ``seconds`` have passed
    (False), sleeping ``pause`` between tries and doubling it up to ``max_pause``. For locks
    held rarely or briefly (the trash, a probe); a writer waits with :func:`lock_fd`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(pause)
        pause = min(pause * 2, max_pause)


def unlock_fd(fd: int) -> None:
    """Release the ``flock`` on ``fd``."""
    fcntl.flock(fd, fcntl.LOCK_UN)


_POOLS: weakref.WeakSet[FdPool] = weakref.WeakSet()


class FdPool:
    """The open descriptors of one store's logs: at most ``limit``, least recently used out.

    Pinning is lock-free on the hot path (the GIL makes ``list.append``/``pop`` atomic): a
    user appends to ``io.pinners`` and then checks that no eviction is under way; an evictor
    (under ``mutex``) raises ``io.evicting``, then closes only if nobody is pinned. Either the
    evictor sees the pin and backs off, or the user sees the eviction and takes the slow path.
    """

    def __init__(self, limit: int) -> None:
        # Never more than half the process's descriptor limit: the rest stays for everything
        # else (snapshots, side files, sockets); running out anyway evicts, then raises.
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        ceiling = soft // 2 if soft != resource.RLIM_INFINITY and soft > 0 else limit
        self.limit = max(1, min(limit, ceiling))
        self.mutex = threading.Lock()
        self._open: dict[FileIO, None] = {}
        _POOLS.add(self)

    def __len__(self) -> int:
        return len(self._open)

    def pin(self, io: FileIO) -> int:
        """Mark ``io`` in use and return its descriptor, (re)opening it if needed."""
        pinners = io.pinners
        pinners.append(None)
        if not io.evicting:
            fd = io.fd
            if fd >= 0:
                io.used = _tick()
                return fd
        pinners.pop()
        with self.mutex:
            pinners.append(None)
            try:
                if io.fd < 0:
                    io.reopen(self)
                    self._open[io] = None
                    self._trim()
            except BaseException:
                pinners.pop()
                raise
            io.used = _tick()
            return io.fd

    def unpin(self, io: FileIO) -> None:
        """``io`` is no longer in use."""
        io.pinners.pop()

    def adopt(self, io: FileIO) -> None:
        """Count ``io``'s already open descriptor."""
        with self.mutex:
            io.used = _tick()
            self._open[io] = None
            self._trim()

    def forget(self, io: FileIO) -> None:
        """``io`` is closing its descriptor (which drops its lease's lock too)."""
        with self.mutex:
            self._open.pop(io, None)
            io.leased = False
            LEASES.drop(io)

    def evict_idle(self) -> bool:
        """Close the least recently used idle descriptor; False if none is idle."""
        with self.mutex:
            return self._evict_one(keep=None)

    def end_lease(self, io: FileIO, used: int | None, wait: float = -1) -> bool:
        """End ``io``'s lease (see :mod:`eventlog._lease`) unless it is in use or, with
        ``used``, a transaction began since ``io.used`` was that. True: it has no lease now.
        ``wait``: at most this long for the mutex (-1: as long as it takes; False when it ran
        out)."""
        if not self.mutex.acquire(timeout=wait):
            return False
        try:
            if not io.leased:
                return True
            if used is not None and io.used != used:
                return False
            io.evicting = True
            try:
                if io.pinners:  # in a transaction: it ends at its exit, or stays in use
                    return False
                io.end_lease()
                return True
            finally:
                io.evicting = False
        finally:
            self.mutex.release()

    def _trim(self) -> None:
        while len(self._open) > self.limit and self._evict_one(keep=None):
            pass

    def _evict_one(self, keep: FileIO | None) -> bool:
        """With ``mutex`` held: close the idle descriptor used longest ago."""
        idle = sorted(
            (io for io in self._open if not io.pinners and io is not keep), key=_last_used
        )
        for io in idle:
            io.evicting = True
            try:
                if io.pinners:  # pinned meanwhile: its user goes on with it
                    continue
                del self._open[io]
                io.leased = False  # closing the descriptor drops its lock
                io.drop_fd()
                LEASES.drop(io)
                return True
            finally:
                io.evicting = False
        return False

    def close_all(self) -> None:
        """Close every descriptor (the store is closing, or was dropped)."""
        with self.mutex:
            ios = list(self._open)
            self._open.clear()
            for io in ios:
                io.leased = False
                LEASES.drop(io)
        for io in ios:
            io.drop_fd()

    def after_fork(self) -> None:
        """In a forked child: drop every inherited descriptor without touching its lock."""
        self.mutex = threading.Lock()
        ios = list(self._open)
        self._open.clear()
        for io in ios:
            io.forked()


_tick = itertools.count().__next__


def _last_used(io: FileIO) -> int:
    return io.used


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class FileIO:
    """A session's log file held by a writer: the ``SessionIO`` of the file store.

    Sizes and offsets are of the whole log (its segments end to end); the descriptor is the
    live segment's, whose bytes start at ``seg.base`` (see :mod:`eventlog._segfiles`).
    """

    #: The live segment: its number and where it starts in the log.
    seg = LiveStart()
    #: Roll to a new segment when the live one reaches this many bytes (0: never).
    segment_bytes = 0
    hash_key = b""
    #: Sync the new segment's header and the closed segment at a roll (durability not "none").
    sync_roll = True

    def __init__(
        self,
        catch_up: CatchUp,
        key: str,
        path: str,
        fd: int,
        size: int,
        ident: tuple[int, int],
        *,
        changes: ChangeTable | None,
        lock_timeout: float,
    ) -> None:
        self.name = path
        self.key = key
        self.fd = fd
        #: One entry per user of the descriptor right now (see :class:`FdPool`).
        self.pinners: list[None] = []
        self.evicting = False
        self.used = 0
        #: Others appended before this writer's last write: fold theirs in before locking.
        self.contended = False
        self._catch_up = catch_up  # the store's (it holds the store weakly: no cycle)
        self._pool: FdPool | None = None
        self._size = size
        self._ident = ident
        self._changes = changes
        self._slot = slot_of(os.path.basename(path))
        self._lock_timeout = lock_timeout
        self._depth = 0
        self._locked = True  # opened under the lock (see ``release``)
        self.stale = False
        self._state: SessionState | None = None
        #: Descriptors of closed segments still in use by a sync when the log rolled.
        self._retired: list[int] = []
        # Leases (see :mod:`eventlog._lease`): off until the writer allows them.
        self.lease_ok = False
        self.leased = False
        #: A writer of this process waits for this lock: end the lease at the next exit.
        self.lease_yield = False
        self.lease_start = 0.0
        self._last_exit = -1e18
        self._cool_until = 0.0

    @property
    def ident(self) -> tuple[int, int]:
        """The log file this descriptor is open on: (``st_dev``, ``st_ino``)."""
        return self._ident

    # -- the pool ------------------------------------------------------------------------------

    def release(self, pool: FdPool) -> None:
        """Drop the lock taken for opening; from now on the descriptor is the pool's."""
        self._locked = False
        self._pool = pool
        unlock_fd(self.fd)
        pool.adopt(self)

    def reopen(self, pool: FdPool) -> None:
        """Open the path again after an eviction; the log must still be the same file (or the
        segment after it, when it was rolled meanwhile)."""
        self.leased = False  # a new descriptor holds no lock (a lease ends with its descriptor)
        try:
            fd = open_nofollow(self.name, OPEN_FLAGS, evict=lambda: pool._evict_one(keep=self))
        except FileNotFoundError as exc:
            raise SessionNotFoundError(self.key) from exc
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._ident:
            if not self._was_rolled():
                os.close(fd)
                raise SessionNotFoundError(self.key)
            self._ident = (st.st_dev, st.st_ino)
            self.seg = read_live_start(fd)
        self.fd = fd

    # -- segments ------------------------------------------------------------------------------

    def _was_rolled(self) -> bool:
        root, name = os.path.split(self.name)
        return rolled_away(root, name[: -len(".jsonl")], self.seg.segment, self._ident)

    def _follow_roll(self) -> bool:
        """Under the lock of a closed segment: lock the live one instead (False: not rolled)."""
        if not self._was_rolled():
            return False
        while True:
            try:
                fd = open_nofollow(self.name, OPEN_FLAGS)
            except FileNotFoundError:
                return False
            try:
                lock_fd(fd, self.key, self.name, self._lock_timeout)
                st = os.fstat(fd)
                try:
                    now = os.stat(self.name, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)  # rolled again (or removed) meanwhile: look again
                    if now is None:
                        return False
                    continue
                start = read_live_start(fd)
            except BaseException:
                os.close(fd)
                raise
            self._retire(fd)
            self._ident = (st.st_dev, st.st_ino)
            self.seg = start
            return True

    def _retire(self, fd: int) -> None:
        """Use ``fd`` (the live segment, locked) from now on; unlock the old descriptor, and
        close it once no other thread of ours uses it (a group commit may be syncing it)."""
        old, self.fd = self.fd, fd
        unlock_fd(old)
        if len(self.pinners) > 1:
            self._retired.append(old)
        else:
            os.close(old)

    def _close_retired(self) -> None:
        retired, self._retired = self._retired, []
        for fd in retired:
            os.close(fd)

    def _roll(self, state: SessionState) -> None:
        """Under the lock, caught up: close the live segment and continue in a new one."""
        root, name = os.path.split(self.name)
        done = roll(
            self.fd,
            root=root,
            stem=name[: -len(".jsonl")],
            seq=state.seq,
            head=state.head,
            size=self._size,
            hash_key=self.hash_key,
            sync=self.sync_roll,
        )
        self._retire(done.fd)
        self._ident = done.ident
        self.seg = done.start
        self._size += len(done.line)
        state.head = done.head
        if self._changes is not None:
            self._changes.bump(self._slot)

    def drop_fd(self) -> None:
        """Close the descriptor (idle: no lock is held on it)."""
        self._close_retired()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def forked(self) -> None:
        """In a forked child: forget the parent's descriptor and state; reload on next use."""
        self._close_retired()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            # Closing the child's copy leaves the parent's lock and descriptor alone.
            os.close(fd)
        self._depth = 0
        self.pinners = []
        self.evicting = False
        self.leased = False  # the parent's lease, not ours (the child's registry is empty)
        self.stale = True

    # -- leases (see :mod:`eventlog._lease`) ----------------------------------------------------

    def allow_lease(self) -> None:
        """Let this log keep its lock across a burst of appends (the sync writer's choice)."""
        self.lease_ok = True

    def lease_pool(self) -> FdPool | None:
        """The pool whose mutex guards ending this log's lease."""
        return self._pool

    def end_lease(self, *, cool: bool = True) -> None:
        """Release the lock a lease kept (under the pool's mutex, not pinned; or in
        a transaction's exit, pinned by it)."""
        self.leased = False
        self.lease_yield = False
        if cool:
            self._cool_until = time.monotonic() + LEASE_COOL
        fd = self.fd
        if fd >= 0:
            with contextlib.suppress(OSError):
                unlock_fd(fd)

    # -- SessionIO -----------------------------------------------------------------------------

    def transaction(self, state: SessionState) -> FileIO:
        """Lock the log for one write and fold in what other writers appended first.

        When others appended before this writer's last write, the complete lines they have
        appended since are folded in now, without the lock, so that its hold stays short.
        """
        self._state = state
        if self.contended and self._pool is not None:
            self._catch_up(self.key, self, state, locked=False)
        return self

    def append(self, data: bytes) -> None:
        fd = self.fd
        try:
            written = _write(fd, data)
            if written != len(data):  # a short write: write the rest (rare; a full disk)
                view = memoryview(data)
                while True:
                    if written <= 0:
                        raise OSError(errno.EIO, "write returned no progress")
                    view = view[written:]
                    if not view:
                        break
                    written = _write(fd, view)
        except OSError as exc:
            self._cut_back(exc)
            raise StorageError(self.name, "append", os.strerror(exc.errno or errno.EIO)) from exc
        self._size += len(data)
        if self._changes is not None:
            self._changes.bump(self._slot)

    def _cut_back(self, cause: OSError) -> None:
        try:
            os.ftruncate(self.fd, self._size - self.seg.base)
        except OSError as exc:  # pragma: no cover - the disk refuses even a truncate
            raise StorageError(
                self.name, "append", f"{cause}; and cutting back the partial line failed: {exc}"
            ) from exc
        finally:
            if self._changes is not None:
                self._changes.bump(self._slot)

    def sync(self) -> None:
        # Group commit syncs outside the lock, maybe while another thread writes: pin always.
        pool = self._pool
        fd = self.fd if pool is None else pool.pin(self)
        try:
            _fsync(fd)
        except OSError as exc:
            raise StorageError(self.name, "fsync", os.strerror(exc.errno or errno.EIO)) from exc
        finally:
            if pool is not None:
                pool.unpin(self)

    def sync_held(self) -> None:
        """``sync`` inside this log's transaction (an ``"always"`` append), whose pin already
        keeps the descriptor open."""
        try:
            _fsync(self.fd)
        except OSError as exc:
            raise StorageError(self.name, "fsync", os.strerror(exc.errno or errno.EIO)) from exc

    def truncate(self, size: int) -> None:
        if size < self.seg.base:
            raise StorageError(
                self.name,
                "truncate",
                f"byte {size} is in a closed segment (the live one starts at {self.seg.base})",
            )
        try:
            os.ftruncate(self.fd, size - self.seg.base)
        except OSError as exc:
            raise StorageError(self.name, "truncate", os.strerror(exc.errno or errno.EIO)) from exc
        finally:
            if self._changes is not None:
                self._changes.bump(self._slot)
        self._size = size

    def size(self) -> int:
        return self._size

    def set_size(self, size: int) -> None:
        """The valid length of the log as this writer now knows it."""
        self._size = size

    def close(self) -> None:
        self._close_retired()
        if self._pool is not None:
            self._pool.forget(self)
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)  # also releases the flock, if held

    # -- what catching up needs ------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self) -> Iterator[bool]:
        """Keep the descriptor open for a read without the lock (False: not usable now)."""
        pool = self._pool
        if pool is None or self.stale:
            yield False
            return
        try:
            pool.pin(self)
        except (SessionNotFoundError, StorageError, OSError):
            yield False
            return
        try:
            yield True
        finally:
            pool.unpin(self)

    def observe(self) -> int:
        """The log's current length (under the lock); raise if it was removed or replaced."""
        st = os.fstat(self.fd)
        if st.st_nlink == 0:
            raise SessionNotFoundError(self.key)
        if not st.st_mode & LIVE_BIT:
            try:
                now = os.stat(self.name, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                # Follow a roll only with the lock held: following takes the new file's lock.
                if not self._depth or not self._follow_roll():
                    raise SessionNotFoundError(self.key)
                st = os.fstat(self.fd)
        return self.seg.base + st.st_size

    def read_from(self, offset: int) -> bytes:
        """The log's bytes from ``offset`` on (from the closed segments too, if it is in them)."""
        base = self.seg.base
        if offset >= base:
            return read_fd(self.fd, offset - base)
        root, name = os.path.split(self.name)
        parts = closed_parts(root, name[: -len(".jsonl")], self.seg, offset)
        return b"".join([*parts, read_fd(self.fd, 0)])

    # -- the transaction -------------------------------------------------------------------------

    def lock(self, blocking: bool) -> bool:
        """Take the log's lock for one write (False: busy, when not ``blocking``)."""
        pool = self._pool
        if pool is None:  # a private descriptor, locked since it was opened
            return True
        if self.leased:  # take the lock anew, and check the file anew
            pool.end_lease(self, used=None)
        fd = pool.pin(self)
        try:
            if blocking:
                lock_fd(fd, self.key, self.name, self._lock_timeout)
            else:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pool.unpin(self)
                    return False
        except BaseException:
            pool.unpin(self)
            raise
        self._depth = 1
        return True

    def catch_up(self, state: SessionState) -> None:
        """With the lock held: fold into ``state`` what others appended (see the store); roll
        to a new segment when the live one is full."""
        self._catch_up(self.key, self, state, locked=True)
        if self.segment_bytes and self._size - self.seg.base >= self.segment_bytes:
            self._roll(state)

    def unlock(self) -> None:
        """Release the lock taken by :meth:`lock`."""
        pool = self._pool
        self._depth = 0
        if pool is None:
            return
        # A lease (if :meth:`lock` could not end one) ends with this unlock: a lease is a held lock.
        self.leased = False
        try:
            if self.fd >= 0:  # else: found removed, and closed
                unlock_fd(self.fd)
            if self._retired and len(self.pinners) <= 1:
                self._close_retired()
        finally:
            pool.unpin(self)

    def __enter__(self) -> None:
        # The hot path of every append: pin, lock, one fstat; the store reads only on a change.
        # (``FdPool.pin`` and ``unpin`` inlined: this runs once per append.)
        if self._depth:
            self._depth += 1
            return
        pool = self._pool
        if pool is None:  # a private descriptor, locked since it was opened
            self._depth = 1
            return
        pinners = self.pinners
        pinners.append(None)
        fd = self.fd
        if self.evicting or fd < 0:
            pinners.pop()
            fd = pool.pin(self)
        else:
            self.used = _tick()
        if self.leased:
            # Locked without a break since a checked transaction: nobody else changed the log.
            self._depth = 1
            if self.segment_bytes and self._size - self.seg.base >= self.segment_bytes:
                assert self._state is not None
                try:
                    self._roll(self._state)
                except BaseException:
                    self._depth = 0
                    pinners.pop()
                    raise
            return
        waited = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waited = True
                lock_fd(fd, self.key, self.name, self._lock_timeout, self._fold_waiting)
            self._depth = 1
            try:
                st = os.fstat(fd)
                if (
                    st.st_size + self.seg.base != self._size
                    or not st.st_nlink
                    or not st.st_mode & LIVE_BIT
                    or self.stale
                ):
                    assert self._state is not None
                    self.contended = True
                    self._catch_up(self.key, self, self._state, locked=True)
                else:
                    self.contended = waited
                if self.segment_bytes and self._size - self.seg.base >= self.segment_bytes:
                    assert self._state is not None
                    self._roll(self._state)
            except BaseException:
                self._depth = 0
                if self.fd >= 0:  # else: found removed, and closed
                    unlock_fd(self.fd)
                raise
        except BaseException:
            pinners.pop()
            raise

    def _fold_waiting(self) -> bool:
        """While another writer holds the lock: fold in, without it, the complete lines
        appended so far (True if there were any)."""
        state = self._state
        if state is None or self.stale:
            return False
        before = self._size
        try:
            st = os.fstat(self.fd)
        except OSError:
            return False
        if st.st_size + self.seg.base <= before:
            return False
        self._catch_up(self.key, self, state, locked=False)
        return self._size != before

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._depth > 1 or self._pool is None:
            self._depth -= 1
            return
        self._depth = 0
        if self.leased and kind is None and not self.lease_yield and not self._retired:
            # The lease goes on: nothing to release (the reaper decides when it ends).
            self.pinners.pop()
            return
        try:
            fd = self.fd
            if fd >= 0:  # else: found removed, and closed
                if self.lease_ok:
                    self._exit_leasing(fd, kind is not None)
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            if self._retired and len(self.pinners) <= 1:
                self._close_retired()
        finally:
            self.pinners.pop()

    def _exit_leasing(self, fd: int, failed: bool) -> None:
        """End a transaction of a log that may lease: keep the lock, or release it."""
        if self.leased:
            if failed or self.lease_yield:
                self.end_lease(cool=not failed)
            return
        now = _monotonic()
        if (
            not failed
            and not self.contended
            and now - self._last_exit < LEASE_IDLE
            and now >= self._cool_until
            and not (WAITERS_MARK and somebody_waits(fd))
        ):
            self.leased = True
            self.lease_yield = False
            self.lease_start = now
            LEASES.hold(self)
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._last_exit = now
            if self.contended:  # another writer is at this log: share it finely for a while
                self._cool_until = now + LEASE_SHARED

"""Write leases: a writer keeps its log's lock across a burst of its own appends.

An uncontended append under the lock per write costs three system calls besides its
``write``: ``flock``, ``fstat`` (did anyone else append, delete or trash the log?) and the
unlock. A writer that appends again within :data:`LEASE_IDLE` of its last append keeps the
lock instead of dropping it (a *lease*); while it holds the lock without a break nobody else
can append, cut, roll, delete or trash the log (every one of those takes the lock first), so
its next append needs neither the ``flock`` nor the ``fstat``: only its ``write``. Nor does it
read the clock: everything about a lease's end is decided by the reaper thread (below), so a
leased append's own cost is its ``write`` and a few attribute checks.

Invariants (this module owns them; :class:`~eventlog._fileio.FileIO` and
:class:`~eventlog._fileio.FdPool` follow them):
- A lease is the log's ``flock`` held continuously since a transaction that checked the file
  (``fstat``, catch-up). Only then is the check skipped; a lease that lapsed for any reason
  means the next append takes the lock and checks again.
- A lease starts only at the end of an uncontended transaction (no wait, nothing of others'
  folded in, nobody marked as waiting) that followed the previous one within
  :data:`LEASE_IDLE`: a lone append never leases, and a writer that met another takes none for
  :data:`LEASE_SHARED`. Only the sync writer with durability ``"none"`` or ``"always"`` leases
  (``"batch"`` waits for an fsync after its write, and would keep others out for it).
- Other writers' waits stay bounded. A writer that has to wait for a log's lock (and a probe
  of it) marks itself *waiting* on that log for as long as it waits: an OFD read lock
  (``F_OFD_SETLK``) on one byte far past any log's end, :data:`WAIT_BYTE`, which touches no
  byte of the file and which the kernel drops with the waiter's descriptor, even on kill -9
  (OFD byte-range locks and ``flock`` do not interact on Linux). A process-wide reaper thread
  looks at this process's leases every :data:`LEASE_CHECK` and ends a lease that somebody is
  waiting for, one that is :data:`LEASE_MAX` old (for a waiter that cannot mark: another
  program's ``flock``), and one not used since its previous look (idle); one in a transaction
  is told to end at that transaction's exit (``lease_yield``). So a marked waiter waits about
  :data:`LEASE_CHECK` beyond the write in progress, an unmarked one about :data:`LEASE_MAX`.
  Where OFD locks do not exist (not Linux) nobody can mark, and every lease counts as waited
  for: it ends at the reaper's first look, within :data:`LEASE_CHECK`. After a lease ends by
  age or for a waiter its writer leases nothing for :data:`LEASE_COOL` (a waiter polling the
  lock gets its turn), nor while a waiter is marked. A writer of this process that has to wait
  for a lock, and a probe of a lock (``writer_lock_held``), first end this process's own
  leases on that file (same device and inode); its leases on other logs go on. A transaction that raised ends its lease.
- Ending a lease happens under the pool's mutex with the eviction protocol (raise
  ``io.evicting``, then back off if the descriptor is pinned), so it never unlocks a
  descriptor in use, nor one closed and renumbered meanwhile.
- The reaper thread lives only while leases come and go: it ends after :data:`REAPER_LINGER`
  with none, and the next lease starts another. A ``fork`` ends the process's leases and stops
  it first (the next lease after starts another): no process forks with a thread of ours.
- kill -9 drops the lock with the process. A forked child forgets every lease and the reaper
  (the parent keeps its own); its descriptors are dropped anyway (see ``FdPool.after_fork``).
- Forgetting a log never waits for the registry's lock: a store dropped without ``close()``
  is closed by its finalizer, which a garbage collection may run inside any allocation, this
  registry's own critical sections included, in the thread holding the lock. A log that
  cannot be forgotten at once is queued, and forgotten by the next holder of the lock before
  it looks at the logs.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._fileio import FileIO

#: Two appends this close (seconds) start a lease.
LEASE_IDLE: Final = 0.001
#: The reaper looks at the process's leases this often while there are any: a lease somebody
#: waits for ends then (and one unused since the previous look).
LEASE_CHECK: Final = 0.004
#: Whether a waiter can mark itself (OFD byte-range locks: Linux, 64-bit ``off_t``).
WAITERS_MARK: Final = (
    sys.platform.startswith("linux")
    and hasattr(fcntl, "F_OFD_GETLK")
    and struct.calcsize("@q") == 8
)
#: A lease ends at the first look of the reaper this long after it began, waited for or not
#: (where nobody can mark, every lease counts as waited for: :data:`LEASE_CHECK`).
LEASE_MAX: Final = 0.1 if WAITERS_MARK else LEASE_CHECK
#: After a lease ends by age or for a waiter, its writer takes no new one for this long.
LEASE_COOL: Final = 0.0005
#: A writer that waited for the lock or found another's lines takes no lease for this long:
#: while a log is shared, its writers take turns line by line (as without leases), and each
#: folds in a few lines at a time, not a burst's worth.
LEASE_SHARED: Final = 0.05
#: The reaper thread ends after this long (seconds) with no lease in the process.
REAPER_LINGER: Final = 1.0
#: How long a probe of a lock (``writer_lock_held``) waits for a lease to lapse: two looks of
#: the reaper, and some slack for its wake-up.
PROBE_PATIENCE: Final = 2 * LEASE_CHECK + 0.01

#: The byte a waiter read-locks to say it waits (far past any log's end; ``off_t`` is signed).
WAIT_BYTE: Final = 1 << 62
#: ``struct flock`` on Linux, 64-bit: type, whence, start, len, pid (and padding).
_FLOCK: Final = "@hhqqi4x"
_MARK = struct.pack(_FLOCK, fcntl.F_RDLCK, os.SEEK_SET, WAIT_BYTE, 1, 0)
_UNMARK = struct.pack(_FLOCK, fcntl.F_UNLCK, os.SEEK_SET, WAIT_BYTE, 1, 0)
_QUERY = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, WAIT_BYTE, 1, 0)


def mark_waiting(fd: int) -> bool:
    """Say that this descriptor's owner waits for the log's lock (False: cannot; a lease then
    ends by age). Undo with :func:`unmark_waiting`, or by closing ``fd``."""
    if not WAITERS_MARK:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _MARK)
    except OSError:
        return False
    return True


def unmark_waiting(fd: int) -> None:
    """This descriptor's owner waits no more."""
    with contextlib.suppress(OSError):  # closing the descriptor drops the mark anyway
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _UNMARK)


def somebody_waits(fd: int) -> bool:
    """Whether a writer (of any process) marked itself waiting for the log open on ``fd``
    (True where nobody can mark, or the question fails: the lease then ends, to be safe)."""
    if not WAITERS_MARK:
        return True
    try:
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _QUERY)
    except OSError:
        return True
    return bool(struct.unpack_from("@h", got)[0] != fcntl.F_UNLCK)


class _Leases:
    """This process's leasing logs and the thread that ends their leases."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        #: Logs that took a lease since they were opened (forgotten when they close).
        self.held: dict[FileIO, None] = {}
        self.thread: threading.Thread | None = None
        #: The reaper waits with no lease to look at (``hold`` wakes it); read under ``cond``.
        self.napping = False
        #: A ``fork`` is under way: the reaper ends, and none starts until it is done.
        self.stop = False
        #: Logs closed while the lock was taken (see :meth:`drop`), forgotten by its next holder.
        self.dropped: collections.deque[FileIO] = collections.deque()

    def _forget_dropped(self) -> None:
        """Under ``cond``: forget the logs :meth:`drop` queued."""
        dropped, held = self.dropped, self.held
        while dropped:
            held.pop(dropped.popleft(), None)

    def hold(self, io: FileIO) -> None:
        """``io`` now holds a lease: make sure the reaper looks at it."""
        with self.cond:
            self._forget_dropped()
            self.held[io] = None
            if self.thread is None:
                if not self.stop:  # else: forking; the parent starts one after
                    self._start()
            elif self.napping:
                self.napping = False
                self.cond.notify()

    def _start(self) -> None:
        """Under ``cond``: start the reaper thread."""
        self.napping = False
        self.thread = threading.Thread(target=self._reap, name="sessionledger-leases", daemon=True)
        self.thread.start()

    def drop(self, io: FileIO) -> None:
        """``io`` closed or was evicted (its lease, if any, ended with it). Never waits: with
        the lock taken (by another thread, or by this one when a garbage collection inside a
        critical section runs a dropped store's finalizer), ``io`` is queued for the lock's
        next holder to forget."""
        self.dropped.append(io)  # atomic: safe without the lock
        if self.cond.acquire(blocking=False):
            try:
                self._forget_dropped()
            finally:
                self.cond.release()

    def end_all(self, ident: tuple[int, int] | None = None) -> None:
        """End this process's leases now (a writer of ours is about to wait for a lock): those
        on the file ``ident`` (``st_dev``, ``st_ino``) only, or every one without it; one in
        use ends when its transaction does. A lease on another log holds no lock this waiter
        needs, so it goes on."""
        with self.cond:
            self._forget_dropped()
            ios = [io for io in self.held if io.leased and (ident is None or io.ident == ident)]
        for io in ios:
            _end(io, used=None)

    def _reap(self) -> None:
        #: What each leased log's use counter was at the previous look.
        seen: dict[FileIO, int] = {}
        while True:
            with self.cond:
                if self.stop:  # a fork is under way (see ``before_fork``)
                    self.thread = None
                    return
                self._forget_dropped()
                live = [io for io in self.held if io.leased]
                if not live:
                    # No lease: stop after a while (a process that forks later then has no
                    # thread of ours alive; ``hold`` starts a new one).
                    seen.clear()
                    self.napping = True
                    woken = self.cond.wait(REAPER_LINGER)
                    self.napping = False
                    if self.stop or (not woken and not any(io.leased for io in self.held)):
                        self.thread = None
                        return
                    continue
            now = time.monotonic()
            for io in live:
                with contextlib.suppress(Exception):  # never let the reaper die
                    _look(io, now, seen)
            if len(seen) > len(live):
                for io in [io for io in seen if not io.leased]:
                    del seen[io]
            with self.cond:
                if not self.stop:
                    self.cond.wait(LEASE_CHECK)

    def before_fork(self) -> None:
        """Before ``fork``: end this process's leases (one in a transaction ends at its exit)
        and stop the reaper, so that the process forks with no thread of ours (Python 3.12+
        warns, a ``DeprecationWarning``, on ``fork`` with threads alive; pytest with
        ``filterwarnings=error`` turns that into an error in the parent).

        Every wait here is bounded: a ``fork`` from a signal handler may interrupt this very
        thread holding one of the locks (then the fork goes on with the reaper alive)."""
        if not self.cond.acquire(timeout=_STOP_PATIENCE):
            return
        try:
            self._forget_dropped()
            ios = [io for io in self.held if io.leased]
            thread = self.thread
            if thread is not None:
                self.stop = True
                self.cond.notify()
        finally:
            self.cond.release()
        for io in ios:
            pool = io.lease_pool()
            if pool is not None and not pool.end_lease(io, used=None, wait=_STOP_PATIENCE):
                io.lease_yield = True
        if thread is not None:
            thread.join(_STOP_PATIENCE)

    def after_fork_in_parent(self) -> None:
        """After ``fork``, in the parent: a reaper again if a lease was taken meanwhile (by
        another thread, between ``before_fork`` and the fork)."""
        if not self.cond.acquire(timeout=_STOP_PATIENCE):
            self.stop = False  # the reaper, if it is still alive, goes on
            return
        try:
            self.stop = False
            if self.thread is None and any(io.leased for io in self.held):
                self._start()
        finally:
            self.cond.release()

    def after_fork(self) -> None:
        """In a forked child: no leases, no reaper (threads do not survive ``fork``)."""
        self.cond = threading.Condition(threading.Lock())
        self.held = {}
        self.dropped = collections.deque()
        self.thread = None
        self.napping = False
        self.stop = False


def _look(io: FileIO, now: float, seen: dict[FileIO, int]) -> None:
    """The reaper's look at one leased log: end its lease if it was idle since the previous
    look, is old, or somebody waits for it."""
    used = io.used
    if seen.get(io) == used:  # no transaction began since the previous look: idle
        _end(io, used=used)
    elif now - io.lease_start >= LEASE_MAX or somebody_waits(io.fd):
        _end(io, used=None)
    seen[io] = used


def _end(io: FileIO, used: int | None) -> None:
    """End ``io``'s lease now, or (in a transaction, ``used`` None) at its transaction's exit;
    with ``used``, only if no transaction began since ``io.used`` was that."""
    pool = io.lease_pool()
    if pool is None or pool.end_lease(io, used=used) or used is not None:
        return
    if io.leased:
        io.lease_yield = True


#: How long ``fork`` waits for a lock of ours or the reaper's end (each at once but under a
#: fork from a signal handler, or while the reaper is ending a lease).
_STOP_PATIENCE: Final = 0.5

LEASES: Final = _Leases()

os.register_at_fork(
    before=LEASES.before_fork,
    after_in_parent=LEASES.after_fork_in_parent,
    after_in_child=LEASES.after_fork,
)

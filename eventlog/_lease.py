"""Write leases: a writer keeps its log's lock across a burst of its own appends.

An uncontended append under the lock per write costs three system calls besides its
``write``: ``flock``, ``fstat`` (did anyone else append, delete or trash the log?) and the
unlock. A writer that appends again within :data:`LEASE_IDLE` of its last append keeps the
lock instead of dropping it (a *lease*); while it holds the lock without a break nobody else
can append, cut, roll, delete or trash the log (every one of those takes the lock first), so
its next append needs neither the ``flock`` nor the ``fstat``: only its ``write``.

Invariants (this module owns them; :class:`~eventlog._fileio.FileIO` and
:class:`~eventlog._fileio.FdPool` follow them):
- A lease is the log's ``flock`` held continuously since a transaction that checked the file
  (``fstat``, catch-up). Only then is the check skipped; a lease that lapsed for any reason
  means the next append takes the lock and checks again.
- A lease starts only at the end of an uncontended transaction (no wait, nothing of others'
  folded in) that followed the previous one within :data:`LEASE_IDLE`: a lone append never
  leases, and a writer that met another takes none for :data:`LEASE_SHARED`. Only the sync writer with durability ``"none"`` or ``"always"`` leases (``"batch"``
  waits for an fsync after its write, and would keep others out for it).
- Other writers' waits stay bounded: the holder ends its lease at the first transaction that
  finishes :data:`LEASE_MAX` after it began (then leases nothing for :data:`LEASE_COOL`, so a
  waiter polling the lock gets its turn); a process-wide reaper thread ends a lease that is
  that old and idle for :data:`LEASE_IDLE` (so no lease outlives ``LEASE_MAX`` by more than
  the holder's current transaction, or the reaper's wake-up); a writer of this process that has to wait for a lock, and a probe of a
  lock (``writer_lock_held``), first end this process's own leases. A transaction that raised
  ends its lease.
- Ending a lease happens under the pool's mutex with the eviction protocol (raise
  ``io.evicting``, then back off if the descriptor is pinned), so it never unlocks a
  descriptor in use, nor one closed and renumbered meanwhile.
- The reaper thread lives only while leases come and go: it ends after :data:`REAPER_LINGER`
  with none, and the next lease starts another. A ``fork`` ends the process's leases and stops
  it first (the next lease after starts another): no process forks with a thread of ours.
- kill -9 drops the lock with the process. A forked child forgets every lease and the reaper
  (the parent keeps its own); its descriptors are dropped anyway (see ``FdPool.after_fork``).
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._fileio import FileIO

#: Two appends this close (seconds) start a lease; a lease this idle ends once it is old.
LEASE_IDLE: Final = 0.001
#: A lease ends at the first transaction that finishes this long after it began.
LEASE_MAX: Final = 0.004
#: After a lease ends by age or for a waiter, its writer takes no new one for this long.
LEASE_COOL: Final = 0.0005
#: A writer that waited for the lock or found another's lines takes no lease for this long:
#: while a log is shared, its writers take turns line by line (as without leases), and each
#: folds in a few lines at a time, not a burst's worth.
LEASE_SHARED: Final = 0.05
#: The reaper thread ends after this long (seconds) with no lease in the process.
REAPER_LINGER: Final = 1.0
#: How long a probe of a lock (``writer_lock_held``) waits for a lease to lapse.
PROBE_PATIENCE: Final = LEASE_MAX + 2 * LEASE_IDLE + 0.01


class _Leases:
    """This process's leasing logs and the thread that ends idle leases."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        #: Logs that took a lease since they were opened (forgotten when they close).
        self.held: dict[FileIO, None] = {}
        self.thread: threading.Thread | None = None
        #: When the reaper wakes next (inf: it knows of no lease); read under ``cond``.
        self.wake = math.inf
        #: A ``fork`` is under way: the reaper ends, and none starts until it is done.
        self.stop = False

    def hold(self, io: FileIO) -> None:
        """``io`` now holds a lease: make sure the reaper ends it in time."""
        with self.cond:
            self.held[io] = None
            if self.thread is None:
                if not self.stop:  # else: forking; the parent starts one after
                    self._start()
            elif self.wake > io.lease_start + LEASE_MAX:
                self.cond.notify()

    def _start(self) -> None:
        """Under ``cond``: start the reaper thread."""
        self.thread = threading.Thread(target=self._reap, name="sessionledger-leases", daemon=True)
        self.thread.start()

    def drop(self, io: FileIO) -> None:
        """``io`` closed or was evicted (its lease, if any, ended with it)."""
        with self.cond:
            self.held.pop(io, None)

    def end_all(self) -> None:
        """End every lease of this process now (a writer of ours is about to wait for a lock);
        one in use ends when its transaction does."""
        with self.cond:
            ios = [io for io in self.held if io.leased]
        for io in ios:
            pool = io.lease_pool()
            if pool is None or not pool.end_lease(io, idle_since=None):
                io.lease_yield = True

    def _due(self, now: float, retry: dict[FileIO, float]) -> list[FileIO]:
        """Under ``cond``: the leases to end now; sets :attr:`wake` for the others."""
        due: list[FileIO] = []
        wake = math.inf
        for io in self.held:
            if not io.leased:
                continue
            # Not before the lease's age is up: a holder still appending ends its own lease
            # then (one wake-up per lease, not one per idle period).
            at = max(io.lease_used + LEASE_IDLE, io.lease_start + LEASE_MAX, retry.get(io, 0.0))
            if at <= now:
                due.append(io)
            elif at < wake:
                wake = at
        self.wake = wake
        return due

    def _reap(self) -> None:
        retry: dict[FileIO, float] = {}
        while True:
            with self.cond:
                while True:
                    if self.stop:  # a fork is under way (see ``before_fork``)
                        self.thread = None
                        return
                    now = time.monotonic()
                    due = self._due(now, retry)
                    if due:
                        break
                    retry.clear()
                    if self.wake == math.inf:
                        # No lease: stop after a while (a process that forks later then has no
                        # thread of ours alive; ``hold`` starts a new one).
                        if not self.cond.wait(REAPER_LINGER) and not any(
                            io.leased for io in self.held
                        ):
                            self.thread = None
                            return
                    else:
                        self.cond.wait(self.wake - now)
            for io in due:
                pool = io.lease_pool()
                try:
                    ended = pool is None or pool.end_lease(io, idle_since=now - LEASE_IDLE)
                except Exception:  # pragma: no cover - never let the reaper die
                    ended = True
                if not ended:  # in a transaction (an fsync, say): look again later
                    retry[io] = now + LEASE_IDLE

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
            ios = [io for io in self.held if io.leased]
            thread = self.thread
            if thread is not None:
                self.stop = True
                self.cond.notify()
        finally:
            self.cond.release()
        for io in ios:
            pool = io.lease_pool()
            if pool is not None and not pool.end_lease(io, idle_since=None, wait=_STOP_PATIENCE):
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
        self.thread = None
        self.wake = math.inf
        self.stop = False


#: How long ``fork`` waits for a lock of ours or the reaper's end (each at once but under a
#: fork from a signal handler, or while the reaper is ending a lease).
_STOP_PATIENCE: Final = 0.5

LEASES: Final = _Leases()

os.register_at_fork(
    before=LEASES.before_fork,
    after_in_parent=LEASES.after_fork_in_parent,
    after_in_child=LEASES.after_fork,
)

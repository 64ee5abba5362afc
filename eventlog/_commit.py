"""Group commit bookkeeping (pure): which of a writer's lines are known durable.

Both writers share this state machine; the sync writer waits on a ``threading.Condition``,
the async writer on ``anyio.Event``. Lines are counted by seq.

Rules:
- ``wrote(seq)`` is called after the line of ``seq`` is fully written (never before).
- A sync covers every line written before it started: the leader reads ``written`` just before
  its fsync and, on success, everything up to that seq is durable.
- At most one sync is in flight (``syncing``); an append that finds one in flight waits for it
  and, if its line is still not covered, leads the next one. So appends arriving during an
  fsync share the next fsync.
- A failed fsync poisons the writer: the kernel may have dropped the dirty pages, so no later
  fsync can vouch for lines written before it. Every line not yet confirmed, and every later
  append, fails with ``StorageError(durable_unknown=True)``; reopen the session to continue
  from what is really on disk.
"""

from __future__ import annotations

from ._errors import StorageError


class GroupCommit:
    """The durable horizon of one writer's log."""

    __slots__ = ("failure", "synced", "syncing", "written")

    def __init__(self, seq: int, *, durable: bool = True) -> None:
        #: Seq of the last line fully written.
        self.written = seq
        #: Seq up to which lines are known durable (-1: nothing is known, e.g. opened without
        #: syncing under ``durability="none"``).
        self.synced = seq if durable else -1
        self.syncing = False
        self.failure: StorageError | None = None

    def wrote(self, seq: int) -> None:
        """Record that the line of ``seq`` is written."""
        self.written = seq

    def is_durable(self, seq: int) -> bool:
        """Whether the line of ``seq`` is durable; raise if it can no longer become so."""
        if seq <= self.synced:
            return True
        self.check()
        return False

    def check(self) -> None:
        """Raise ``StorageError(durable_unknown=True)`` if an fsync has failed."""
        failure = self.failure
        if failure is not None:
            raise StorageError(
                failure.path,
                failure.action,
                f"{failure.cause}; lines after seq {self.synced} are not known durable "
                "(reopen the session)",
                durable_unknown=True,
            )

    @property
    def pending(self) -> bool:
        """Lines are written that no finished sync covers."""
        return self.written > self.synced

    def wrote_synced(self, seq: int) -> None:
        """``wrote(seq)`` then ``confirm(seq)``: the writer synced the line itself."""
        self.written = seq
        if seq > self.synced:
            self.synced = seq

    def confirm(self, seq: int) -> None:
        """A sync made by the writer itself (``"always"``) covered the line of ``seq``."""
        self.synced = max(self.synced, seq)

    def begin(self) -> None:
        """Become the leader of the next sync."""
        assert not self.syncing, "a sync is already in flight"
        self.syncing = True

    def end(self, target: int, error: StorageError | None) -> None:
        """The leader's sync (started when ``written`` was ``target``) finished."""
        self.syncing = False
        self.record(target, error)

    def record(self, target: int, error: StorageError | None) -> None:
        """A sync started when ``written`` was ``target`` finished (or failed with ``error``)."""
        if error is None:
            self.synced = max(self.synced, target)
        elif self.failure is None:
            self.failure = error

    def rebase(self, seq: int) -> None:
        """The log was reloaded at ``seq`` (cut back or replaced): lines count from there.

        Lines after ``seq`` that were written before are gone, so nothing past it is durable.
        """
        self.written = seq
        self.synced = min(self.synced, seq)

    def abandon(self) -> None:
        """The leader gave up before its sync finished (cancelled): nothing new is durable."""
        self.syncing = False

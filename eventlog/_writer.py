"""The session writer (sync): appends event lines under a thread lock and folds them.

The write API itself (validation, event building, idempotency, ``expected_seq``, encoding) is
:class:`~eventlog._writeapi.WriteAPI`, shared with the async writer; this module adds only the
blocking I/O, a ``threading`` lock and group commit on a ``threading.Condition``.

Invariants:
- One line per event, written with one ``append`` call of whole bytes; an append that fails
  leaves the log exactly as it was (the I/O layer cuts back any partial write).
- Appends to one writer are serialised by a lock: threads never interleave lines.
- ``state`` only ever reflects lines that were written; with ``"always"`` durability, lines that
  were also synced. A retried event id is a no-op that returns the original seq (in ``"batch"``
  mode once that line is durable).
- ``"batch"`` durability is group commit (see ``_commit``): an append returns once an fsync that
  started after its line was written has finished; appends arriving during an fsync share the
  next one; ``batch_window`` bounds how long a leader waits for more before its fsync. A failed
  fsync poisons the writer (``StorageError(durable_unknown=True)`` until it is reopened).
- ``close`` waits for an fsync in flight, syncs what is pending, then releases the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Literal, Protocol, cast

from ._commit import GroupCommit
from ._errors import InvalidEventError, StorageError, StoreClosedError
from ._events import KnownEvent
from ._fold import SessionState, apply
from ._tokens import TokenCounter
from ._writeapi import CompactionResult, Draft, Staged, WriteAPI, new_event_id, stage

Durability = Literal["always", "batch", "none"]
DURABILITIES: tuple[str, ...] = ("always", "batch", "none")
__all__ = ("DURABILITIES", "Durability", "SessionIO", "SessionWriter", "new_event_id")


class SessionIO(Protocol):
    """What a store gives a writer: one session's bytes, held under its writer lock."""

    name: str

    def append(self, data: bytes) -> None:
        """Write all of ``data`` at the end, or raise StorageError leaving the log unchanged."""

    def sync(self) -> None:
        """Make everything appended so far durable, or raise StorageError."""

    def truncate(self, size: int) -> None:
        """Cut the log back to ``size`` bytes."""

    def size(self) -> int:
        """The log's length in bytes."""

    def close(self) -> None:
        """Release the session (and its writer lock)."""


def check_durability(durability: str) -> Durability:
    """Return ``durability`` if it is one of ``always``, ``batch``, ``none``; else raise."""
    if durability not in DURABILITIES:
        raise InvalidEventError(
            f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}"
        )
    return durability  # type: ignore[return-value]


_NO_TRANSACTION = nullcontext()


class SessionWriter(WriteAPI[int, CompactionResult]):
    """Appends events to one session; obtained from ``store.session(key)``.

    Every write method accepts ``expected_seq=`` (raise :class:`ConflictError` unless the log's
    last seq equals it, writing nothing) and ``id=`` (an event id; appending an id already in the
    log is a no-op). Each returns the seq of its event. Safe to share between threads.
    """

    _io: SessionIO

    def __init__(
        self,
        *,
        key: str,
        io: SessionIO,
        state: SessionState,
        durability: Durability,
        hash_key: bytes,
        token_counter: TokenCounter,
        batch_window: float = 0.0,
        on_close: Callable[[SessionWriter], None] | None = None,
        on_append: Callable[[SessionWriter, KnownEvent], None] | None = None,
    ) -> None:
        self.key = key
        self._io = io
        self._state = state
        self._durability = durability
        self._hash_key = hash_key
        self._count_tokens = token_counter
        self._batch_window = batch_window
        self._on_close = on_close
        self._on_append = on_append
        self._lock = threading.RLock()
        self._closed = False
        # Group commit: which lines are durable; waiters sleep on the condition.
        self._commit = GroupCommit(state.seq, durable=durability != "none")
        self._sync_cond = threading.Condition()
        self._begin: Callable[[SessionState], object] | None = getattr(io, "transaction", None)

    # -- reading -----------------------------------------------------------------------------

    def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        with self._lock:
            self._check_open()
            self._make_durable(self._commit.written)

    def close(self) -> None:
        """Sync what is pending, release the writer lock; later appends raise.

        Waits for an fsync in flight first, so the descriptor is never closed under it.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self._durability != "none":
                    self._make_durable(self._commit.written)
                else:
                    self._wait_idle()
            finally:
                self._closed = True
                self._io.close()
                if self._on_close is not None:
                    self._on_close(self)

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the writer for session {self.key!r} is closed")

    def _transaction(self) -> AbstractContextManager[object]:
        # A shared log (PostgreSQL) has other writers: its io's ``transaction(state)`` locks the
        # session and folds their new events into ``state`` before the checks; its ``sync``
        # commits. File and memory logs have one writer and need none of that.
        self._check_open()
        if self._begin is None:
            return _NO_TRANSACTION
        return cast(AbstractContextManager[object], self._begin(self._state))

    def refresh(self) -> int:
        """Fold in events other writers appended (shared stores only); return the last seq."""
        with self._lock, self._transaction():
            return self._state.seq

    def _then(self, result: int, make: Callable[[int], CompactionResult]) -> CompactionResult:
        return make(result)

    def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        with self._lock, self._transaction():
            self._commit.check()
            staged = stage(
                self._state,
                draft,
                key=self.key,
                hash_key=self._hash_key,
                expected_seq=expected_seq,
                event_id=event_id,
                seal=self._seal,
            )
            seq = staged if isinstance(staged, int) else self._write_line(staged)
        if self._durability == "batch":
            self._make_durable(seq)
        return seq

    def _write_line(self, staged: Staged) -> int:
        io, event = self._io, staged.event
        before = io.size()
        io.append(staged.line)
        if self._durability == "always":
            try:
                io.sync()
            except StorageError as exc:
                self._cut_back(before, exc)
                raise
        apply(self._state, event)
        self._commit.wrote(event.seq)
        if self._durability == "always":
            self._commit.confirm(event.seq)
        if self._on_append is not None:
            self._on_append(self, event)
        return event.seq

    def _cut_back(self, size: int, cause: StorageError) -> None:
        """Remove a line whose fsync failed; if even that fails, poison the writer."""
        try:
            self._io.truncate(size)
        except StorageError as exc:
            with self._sync_cond:
                self._commit.end(self._commit.written, exc)
            raise exc from cause

    def _wait_idle(self) -> None:
        with self._sync_cond:
            while self._commit.syncing:
                self._sync_cond.wait()

    def _make_durable(self, seq: int) -> None:
        """Group commit: return once an fsync covering the line of ``seq`` has finished."""
        commit, cond = self._commit, self._sync_cond
        with cond:
            while not commit.is_durable(seq):
                if commit.syncing:
                    cond.wait()
                    continue
                commit.begin()
                break
            else:
                return
        target = commit.written
        try:
            if self._batch_window > 0:
                time.sleep(self._batch_window)
                target = commit.written
            self._io.sync()
        except StorageError as exc:
            with cond:
                commit.end(target, exc)
                cond.notify_all()
            commit.check()
            raise
        except BaseException:
            with cond:
                commit.abandon()
                cond.notify_all()
            raise
        with cond:
            commit.end(target, None)
            cond.notify_all()

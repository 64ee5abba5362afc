"""The session writer (sync): a shared per-session log and the writer handles over it.

The write API itself (validation, event building, idempotency, ``expected_seq``, encoding) is
:class:`~eventlog._writeapi.WriteAPI`, shared with the async writer; this module adds only the
blocking I/O, a ``threading`` lock and group commit on a ``threading.Condition``.

A store keeps one :class:`SessionLog` per session it writes; every ``store.session(key)`` call
returns a new :class:`SessionWriter` handle over it, so any number of threads can each hold (and
close) their own writer for one session at once.

Invariants:
- One line per event, written with one ``append`` call of whole bytes; an append that fails
  leaves the log exactly as it was (the I/O layer cuts back any partial write).
- Appends to one log are serialised in the process by a lock, and across processes (and store
  objects) by the I/O's ``transaction(state)``: it takes the log's lock for this one write, folds
  in what other writers appended since this log last looked, and releases the lock when the
  write is done. The checks (``expected_seq``, event ids, trims) run inside it, on that state.
- ``state`` only ever reflects lines that are in the log; with ``"always"`` durability, lines
  that were also synced. A retried event id is a no-op that returns the original seq (in
  ``"batch"`` mode once that line is durable).
- ``"always"`` syncs inside the transaction (a failed fsync cuts its line back); ``"batch"`` is
  group commit outside it (see ``_commit``): an append returns once an fsync that started after
  its line was written has finished; appends arriving during an fsync share the next one. A
  failed fsync poisons the log (``StorageError(durable_unknown=True)`` until it is reopened).
- A handle's ``close`` syncs what is pending and closes that handle only; the log stays open
  while other handles are (it closes with the last one, or with the store).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Unpack

import msgspec

from ._codec import encode_line
from ._errors import InvalidEventError, StorageError
from ._events import HELD_LINE, KnownEvent, MessageAppended
from ._fold import apply, withheld
from ._writeapi import CompactionResult, Draft, message_draft, new_event_id
from ._writerbase import (
    DURABILITIES,
    Durability,
    LogArgs,
    LogBase,
    SessionIO,
    WriterBase,
    check_durability,
)

__all__ = (
    "DURABILITIES",
    "Durability",
    "SessionIO",
    "SessionLog",
    "SessionWriter",
    "check_durability",
    "new_event_id",
)


class SessionLog(LogBase):
    """One session's write state in one store: its I/O, folded state and group commit.

    Shared by every :class:`SessionWriter` handle the store gives out for the session; safe to
    use from many threads.
    """

    def __init__(self, **args: Unpack[LogArgs]) -> None:
        super().__init__(**args)
        #: Writers the store gave out and that are not closed yet.
        self.handles = 0
        self.lock = threading.RLock()
        # Group commit: waiters for an fsync sleep on the condition.
        self.sync_cond = threading.Condition()
        # Keep the lock across a burst of appends (see ``_lease``); not with "batch", whose
        # append waits for an fsync after its write.
        allow = getattr(self.io, "allow_lease", None)
        if allow is not None and self.durability != "batch":
            allow()
        # An "always" append syncs inside its transaction, which already keeps the descriptor
        # open: the file I/O then skips the pin that a sync from outside needs.
        self._sync_held: Callable[[], None] = getattr(self.io, "sync_held", None) or self.io.sync

    def reset_locks(self) -> None:
        """In a forked child: fresh locks (a parent thread may have held the old ones)."""
        self.lock = threading.RLock()
        self.sync_cond = threading.Condition()
        self.commit.syncing = False

    def transaction(self) -> AbstractContextManager[object]:
        """The I/O's write transaction (lock, catch up)."""
        self.check_open()
        return self.io.transaction(self.state)

    def refresh(self) -> int:
        """Fold in events other writers appended; return the last seq."""
        with self.lock, self.transaction():
            return self.state.seq

    def submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        """Stage, write and fold ``draft`` (one transaction); wait for durability."""
        with self.lock:
            state = self.state
            if self.closed:
                self.check_open()
            with self.io.transaction(state):
                staged = self.stage(draft, expected_seq, event_id)
                seq = (
                    staged
                    if isinstance(staged, int)
                    else self._write_line(staged.event, staged.line)
                )
            if self.settle is not None:
                self.settle(self.state)
        if self.durability == "batch":
            self.make_durable(seq)
        return seq

    def submit_message(self, msg: dict[str, Any], body: msgspec.Raw, tokens: int) -> int:
        """``submit(message_draft(msg, body, tokens), None, None)`` without the draft: the
        same steps (``stage`` of a new message, ``_write_line``), in one call (the hot path)."""
        with self.lock:
            if self.closed:
                self.check_open()
            seal = self.seal  # an encrypted store's sealing layer (see ``stage``)
            with self.io.transaction(self.state):
                state, commit = self.state, self.commit
                if state.seq < commit.written:  # the log was cut back and reloaded
                    commit.rebase(state.seq)
                if commit.failure is not None:
                    commit.check()
                event = MessageAppended(
                    seq=state.seq + 1,
                    ts=datetime.now(UTC),
                    id=new_event_id(),
                    body=body,
                    tokens=tokens,
                )
                written: KnownEvent
                if seal is None:
                    written = event
                else:  # it seals from the message (as ``message_draft``'s event carries it)
                    event.__dict__["message"] = msg
                    written = seal(event)
                try:
                    line, h = encode_line(written, state.head, self.hash_key)
                except (TypeError, ValueError, msgspec.EncodeError, OverflowError) as exc:
                    describe = message_draft(msg, body, tokens).describe
                    why = describe() if describe is not None else str(exc)
                    raise InvalidEventError(f"session {self.key!r}: {why}") from exc
                if seal is None:
                    event = msgspec.structs.replace(event, h=h)
                    event.__dict__["message"] = msg
                else:  # the sealed event, keeping its plaintext and opener (as ``stage`` does)
                    assert isinstance(written, MessageAppended)
                    event = written.with_hash(h)
                seq = self._write_line(event, line)
            if self.settle is not None:
                self.settle(self.state)
        if self.durability == "batch":
            self.make_durable(seq)
        return seq

    def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        with self.lock:
            self.check_open()
            self.make_durable(self.commit.written)

    def sync_pending(self) -> None:
        """Make this log's own lines durable (nothing to do with ``"none"``)."""
        if self.durability != "none" and self.commit.pending:
            self.make_durable(self.commit.written)

    def close(self) -> None:
        """Sync what is pending and release the I/O; later appends raise.

        Waits for an fsync in flight first, so the descriptor is never closed under it.
        """
        with self.lock:
            if self.closed:
                return
            try:
                if self.durability != "none":
                    self.make_durable(self.commit.written)
                else:
                    self._wait_idle()
            finally:
                self.closed = True
                self.io.close()

    def abandon(self) -> None:
        """Close a poisoned log without syncing (its writers' appends then raise)."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.io.close()

    # -- internals ---------------------------------------------------------------------------

    def _write_line(self, event: KnownEvent, line: bytes) -> int:
        io = self.io
        if (
            self.settle is not None
            and event.__class__ is MessageAppended
            and not withheld(self.state)
        ):
            # The bytes it hashed: settling compares the log's line with them (a span digest
            # is hashed only from bytes the chain vouched for), then the event leaves memory.
            # (An erased or redacted session never settles: its events stay, without them.)
            event.__dict__[HELD_LINE] = line
        if self.durability == "always":
            before = io.size()
            io.append(line)
            try:
                self._sync_held()
            except StorageError as exc:
                self._cut_back(before, exc)
                raise
            apply(self.state, event)
            self.commit.wrote_synced(event.seq)
        else:
            io.append(line)
            apply(self.state, event)
            self.commit.wrote(event.seq)
        return event.seq

    def _cut_back(self, size: int, cause: StorageError) -> None:
        """Remove a line whose fsync failed; if even that fails, poison the log."""
        try:
            self.io.truncate(size)
        except StorageError as exc:
            with self.sync_cond:
                self.commit.end(self.commit.written, exc)
            raise exc from cause

    def _wait_idle(self) -> None:
        with self.sync_cond:
            while self.commit.syncing:
                self.sync_cond.wait()

    def make_durable(self, seq: int) -> None:
        """Group commit: return once an fsync covering the line of ``seq`` has finished."""
        commit, cond = self.commit, self.sync_cond
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
            if self.batch_window > 0:
                time.sleep(self.batch_window)
                target = commit.written
            self.io.sync()
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


class SessionWriter(WriterBase[int, CompactionResult, SessionLog]):
    """Appends events to one session; obtained from ``store.session(key)``.

    Every write method accepts ``expected_seq=`` (raise :class:`ConflictError` unless the log's
    last seq equals it, writing nothing) and ``id=`` (an event id; appending an id already in the
    log is a no-op). Each returns the seq of its event. Safe to share between threads; each
    thread may also take its own (``with store.session(key) as w:``) and close it when done.
    """

    _log_type = SessionLog

    def __init__(
        self,
        log: SessionLog,
        *,
        on_close: Callable[[SessionWriter], None] | None = None,
        owns_log: bool = False,
        submit: Callable[[Draft, int | None, str | None], int] | None = None,
    ) -> None:
        super().__init__(log, owns_log=owns_log)
        # How an append reaches the log (a backend's own writer may do it its way).
        self._send = submit or log.submit
        self._on_close = on_close
        if submit is None and type(self)._submit is SessionWriter._submit:
            # Appends reach the log itself: a plain message may skip the draft (see WriteAPI).
            self._append_message = log.submit_message

    @property
    def _lock(self) -> threading.RLock:
        return self._log.lock

    def _transaction(self) -> AbstractContextManager[object]:
        self._check_open()
        return self._log.transaction()

    def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        self._check_open()
        self._log.flush()

    def refresh(self) -> int:
        """Fold in events other writers appended since this log last looked; return the seq."""
        self._check_open()
        return self._log.refresh()

    def close(self) -> None:
        """Sync what is pending and close this writer; its later appends raise.

        The session's log stays open while the store's other writers of it are.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._owns_log:
                self._log.close()
            elif not self._log.closed:
                self._log.sync_pending()
        finally:
            if self._on_close is not None:
                self._on_close(self)

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _then(self, result: int, make: Callable[[int], CompactionResult]) -> CompactionResult:
        return make(result)

    def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        if self._closed or self._log.closed:
            self._check_open()
        return self._send(draft, expected_seq, event_id)

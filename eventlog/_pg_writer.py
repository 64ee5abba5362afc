"""The PostgreSQL session writer: one round trip per append, group commit within a writer.

Invariants:
- Appends from many threads to one writer are committed in groups: while one group's statement
  is in flight, the appends that arrive queue up, and the next leader stages and sends them all
  in one statement (one transaction). Every append keeps its own guarantees: ``expected_seq``
  and event ids are checked in arrival order against the state that its predecessors in the
  group produced, a failed check fails only that append, and each append returns once the
  transaction holding its event has committed.
- Staging folds events into the writer's state before the commit; a group that is not
  committed is undone (``Undo``) before anyone sees the state again. A mismatch on the session
  row (another store committed first) folds in those commits and stages the whole group again,
  so a check is only ever answered against the committed log.
- A statement whose outcome is unknown fails every append of its group with
  :class:`CommitUnknownError` naming that append's own event id.
- Inside ``store.batch(key)`` on the thread that opened it, appends join that transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import EventLogError, SessionNotFoundError, StorageError
from ._events import MessageAppended
from ._fold import apply
from ._pg_common import translate
from ._pg_io import CommitUnknownError, Pending, Undo, _PgIO, is_disconnect, oneline
from ._writeapi import Draft, Staged, stage
from ._writer import SessionLog, SessionWriter

if TYPE_CHECKING:
    import psycopg

    from ._postgres import PostgresStore

#: Mismatches in a row before a group takes the session row's lock instead of racing again.
_OPTIMISTIC_TRIES = 3


class _Ticket:
    """One append waiting in a group: its request, then its seq or its error."""

    __slots__ = ("done", "draft", "error", "event_id", "expected_seq", "seq")

    def __init__(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> None:
        self.draft = draft
        self.expected_seq = expected_seq
        self.event_id = event_id
        self.seq = 0
        self.error: BaseException | None = None
        self.done = False

    def result(self) -> int:
        if self.error is not None:
            raise self.error
        return self.seq


class PgSessionWriter(SessionWriter):
    """A :class:`SessionWriter` whose appends are one statement each, committed in groups."""

    _io: _PgIO

    def __init__(
        self,
        *,
        store: PostgresStore,
        io: _PgIO,
        on_close: Callable[[SessionWriter], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(SessionLog(io=io, **kwargs), on_close=on_close, owns_log=True)
        self._store = store
        self._queue: list[_Ticket] = []
        self._leading = False
        self._group = threading.Condition(threading.Lock())
        # Gathering: threads inside _submit, the sizes of the last two groups, how long the
        # last statement took, and whether a new leader is waiting for its group to fill.
        self._active = 0
        self._sizes = (0, 0)
        self._latency = 0.0
        self._gathering = False

    def refresh(self) -> int:
        """Fold in events other writers committed (one query, no lock); return the last seq."""
        with self._lock:
            self._check_open()
            self._with_conn("refresh", lambda conn: self._io.refresh(conn, self._state))
            return self._state.seq

    def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        if self._io.in_transaction():  # store.batch() on this thread: join its transaction
            return super()._submit(draft, expected_seq, event_id)
        self._check_open()
        ticket = _Ticket(draft, expected_seq, event_id)
        group = self._group
        with group:
            self._active += 1
            try:
                self._queue.append(ticket)
                if self._gathering:
                    group.notify_all()
                while self._leading and not ticket.done:
                    group.wait()
                if ticket.done:
                    return ticket.result()
                self._leading = True
                self._gather()
                batch, self._queue = self._queue, []
            finally:
                self._active -= 1
        started = time.monotonic()
        try:
            self._commit_group(batch)
        finally:
            for t in batch:  # never leave an append waiting on a group that is over
                if not t.done:
                    t.error = t.error or StorageError(self._io.name, "append", "interrupted")
                    t.done = True
            with group:
                self._leading = False
                self._latency = time.monotonic() - started
                self._sizes = (self._sizes[1], len(batch))
                group.notify_all()
        return ticket.result()

    def _gather(self) -> None:
        """A new leader under concurrency waits briefly for the appends of the threads that
        the last group just released: otherwise groups alternate between those who queued
        during a commit and those who come back after it, each half as large as it could be.

        Waits only when the last group held several appends, for at most a quarter of the
        last statement's time (2 ms at most), and not at all for a lone thread.
        """
        want = sum(self._sizes)
        if self._sizes[1] < 2 or len(self._queue) >= want:
            return
        deadline = time.monotonic() + min(self._latency / 4, 0.002)
        self._gathering = True
        try:
            while len(self._queue) < want and (left := deadline - time.monotonic()) > 0:
                self._group.wait(left)
        finally:
            self._gathering = False

    # -- one group -------------------------------------------------------------------------

    def _with_conn(self, action: str, body: Any) -> Any:
        conn = self._store._getconn()
        try:
            return body(conn)
        except EventLogError:
            raise
        except Exception as exc:
            raise translate(exc, self._io.name, action) from exc
        finally:
            self._store._putconn(conn)

    def _commit_group(self, batch: list[_Ticket]) -> None:
        with self._lock:
            try:
                self._check_open()
                conn = self._store._getconn()
            except EventLogError as exc:
                _finish(batch, exc)
                return
            try:
                self._run_group(conn, batch)
            except _Abandon:
                pass
            finally:
                self._store._putconn(conn)

    def _run_group(self, conn: psycopg.Connection[tuple[Any, ...]], batch: list[_Ticket]) -> None:
        io, state = self._io, self._state
        tries = 0
        checked = False
        while True:
            if io.stale:
                self._guard(batch, lambda: io.reload(conn, state))
            undo = Undo(state)
            base_seq, base_head = state.seq, state.head
            results: list[int | BaseException] = []
            staged: list[tuple[_Ticket, Staged]] = []
            failed = False
            for t in batch:
                try:
                    got = stage(
                        state,
                        t.draft,
                        key=self.key,
                        hash_key=self._log.hash_key,
                        expected_seq=t.expected_seq,
                        event_id=t.event_id,
                        seal=self._seal,
                    )
                except EventLogError as exc:  # this append only: ConflictError, invalid
                    results.append(exc)
                    failed = True
                    continue
                results.append(got if isinstance(got, int) else got.event.seq)
                if isinstance(got, Staged):
                    undo.before(state, _tag(got.event), got.event.id)
                    apply(state, got.event)
                    staged.append((t, got))
            if failed and not checked:
                # A check failed against what this writer last saw; others may have moved the
                # session since (expected_seq, upto ...): answer it against the log as it is.
                undo.undo(state)
                checked = True
                self._guard(batch, lambda: io.refresh(conn, state))
                continue
            if not staged:
                break
            pending = [Pending(s.event.seq, s.event.id, s.line, _tag(s.event)) for _, s in staged]
            try:
                outcome = io.send(conn, base_seq, base_head, pending, state)
            except BaseException as exc:
                undo.undo(state)
                if is_disconnect(exc, conn):
                    io.stale = True
                    self._unknown(batch, results, staged, base_seq, exc)
                    return
                if _is_unique_violation(exc) and tries < _OPTIMISTIC_TRIES:
                    io.stale = True  # an id in the log the state did not know: start over
                    tries += 1
                    continue
                _finish(batch, translate(exc, io.name, "append", nothing_written=True))
                return
            if outcome.status == 0:
                self._log.commit.wrote(state.seq)
                self._log.commit.confirm(state.seq)
                break
            undo.undo(state)
            if outcome.status == 2:
                _finish(batch, SessionNotFoundError(self.key))
                return
            self._guard(batch, lambda out=outcome: io.absorb(conn, state, out))
            checked = True
            tries += 1
            if tries >= _OPTIMISTIC_TRIES:
                self._locked_group(conn, batch)
                return
        for t, r in zip(batch, results, strict=True):
            if isinstance(r, BaseException):
                t.error = r
            else:
                t.seq = r
            t.done = True

    def _unknown(
        self,
        batch: list[_Ticket],
        results: list[int | BaseException],
        staged: list[tuple[_Ticket, Staged]],
        base_seq: int,
        exc: BaseException,
    ) -> None:
        """The group's statement may or may not have committed: say so to each append."""
        cause = oneline(exc)
        sent = {id(t): s.event.id for t, s in staged}
        for t, r in zip(batch, results, strict=True):
            if id(t) in sent:
                t.error = CommitUnknownError(self._io.name, cause, event_ids=[sent[id(t)]])
            elif isinstance(r, BaseException):
                t.error = r  # failed its own checks: nothing of it was sent
            elif r <= base_seq:
                t.seq = r  # a retry of an id committed before this group
            else:  # a retry of an id staged in this very group
                t.error = CommitUnknownError(self._io.name, cause, event_ids=[t.event_id or "?"])
            t.done = True

    def _guard(self, batch: list[_Ticket], body: Any) -> None:
        try:
            body()
        except BaseException as exc:
            _finish(batch, translate(exc, self._io.name, "append", nothing_written=True))
            raise _Abandon from exc

    def _locked_group(
        self, conn: psycopg.Connection[tuple[Any, ...]], batch: list[_Ticket]
    ) -> None:
        """Under heavy contention from other stores: one transaction holding the row lock."""
        try:
            with self._io.transaction(self._state, conn):
                for t in batch:
                    try:
                        t.seq = SessionWriter._submit(self, t.draft, t.expected_seq, t.event_id)
                    except EventLogError as exc:
                        t.error = exc
        except BaseException as exc:
            for t in batch:
                if t.error is None:
                    t.error = exc
        for t in batch:
            t.done = True


class _Abandon(Exception):
    """The group could not be staged (its appends hold the error)."""


def _finish(batch: list[_Ticket], error: BaseException) -> None:
    """Fail every append of ``batch`` not answered yet with ``error``."""
    for t in batch:
        if not t.done:
            t.error = error
            t.done = True


def _tag(event: Any) -> str:
    return "message" if isinstance(event, MessageAppended) else str(event.__struct_config__.tag)


def _is_unique_violation(exc: BaseException) -> bool:
    import psycopg.errors

    return isinstance(exc, psycopg.errors.UniqueViolation)

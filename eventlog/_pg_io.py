"""One session's appends in PostgreSQL: the statement that writes them, catching up, undoing.

Invariants:
- The common append is one statement in autocommit mode, so one round trip:
  ``append_events`` (schema migration 5) compares the session row's (seq, head) with what the
  writer last knew and, only when they match, inserts the lines, updates the catalog columns
  and NOTIFYs followers (when there are any), all in the statement's implicit transaction. On a
  mismatch it writes nothing and returns what other writers committed since: the writer folds
  that in and stages again (one more round trip).
- ``store.batch(key)`` is a transaction that holds the session row's lock (``SELECT ... FOR
  UPDATE``) for the block, so the seqs its appends returned stay true; its writes go through the
  same statement, then ``COMMIT``. A forked child that leaves a block its parent began sends
  nothing on that connection (no ROLLBACK, no COMMIT: the socket is the parent's) and writes
  nothing.
- A writer folds a staged event into its state before the commit. If the commit fails, the
  state is put back exactly as it was (:class:`Undo`), so ``writer.state`` never shows an event
  that was rolled back. If the outcome is unknown (the connection dropped while the statement
  was in flight), the state is put back and marked stale: the next use rebuilds it from the
  database, which says whether the event is there.
- A connection that went bad while idle in the pool (a restarted or terminated server backend)
  is dropped before anything is sent on it: nothing was written, a fresh connection is used.
  A connection lost after the statement was sent raises :class:`CommitUnknownError`.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ._codec import LineDecoder
from ._errors import SessionNotFoundError, StorageError
from ._fold import SessionState, apply
from ._pg_common import (
    KEEPS_PREVIEW,
    CatalogValues,
    Loaded,
    catalog_values,
    event_row,
    hot_values,
    notify_from,
    notify_prefix,
    run,
    stored_preview_settled,
    translate,
)

if TYPE_CHECKING:
    import psycopg

    from ._postgres import PostgresStore


class CommitUnknownError(StorageError):
    """The connection dropped while committing an append: it happened once or not at all.

    Retry with the same event id (safe: a committed id is never written twice), or ask
    :meth:`PostgresStore.committed` which it was.
    """

    def __init__(self, where: str, cause: str, *, event_ids: Sequence[str]) -> None:
        super().__init__(
            where,
            "commit",
            f"{cause}; the append may or may not have been committed: retry with the same "
            f"event id ({', '.join(event_ids)}), which is safe",
            durable_unknown=True,
        )
        self.event_ids = tuple(event_ids)


class Undo:
    """Puts a writer's state back as it was before events were folded in speculatively.

    Message events only append (to ``messages``, the counters, ``ids``), so undoing them is
    cutting back; before the first other event a full copy is taken (those are rare).
    """

    __slots__ = ("_full", "_ids", "_len", "_scalars")

    _FIELDS = ("seq", "head", "updated_at", "live_tokens", "total_messages", "total_tokens")

    def __init__(self, state: SessionState) -> None:
        self._scalars = (  # _FIELDS, in order
            state.seq,
            state.head,
            state.updated_at,
            state.live_tokens,
            state.total_messages,
            state.total_tokens,
        )
        self._len = len(state.messages)
        self._ids: list[str] = []
        self._full: SessionState | None = None

    def before(self, state: SessionState, tag: str, event_id: str) -> None:
        """Call before folding an event of type ``tag`` with ``event_id`` into ``state``."""
        if self._full is not None:
            return
        if tag != "message":
            self._full = state.copy()
        else:
            self._ids.append(event_id)

    def undo(self, state: SessionState) -> None:
        """Restore ``state`` (in place: async writers share the object)."""
        if self._full is not None:
            for name in SessionState.__struct_fields__:
                setattr(state, name, getattr(self._full, name))
        del state.messages[self._len :]
        for event_id in self._ids:
            state.ids.pop(event_id, None)
        for name, value in zip(self._FIELDS, self._scalars, strict=True):
            setattr(state, name, value)


@dataclass(slots=True)
class Pending:
    """A staged line waiting for its commit."""

    seq: int
    id: str
    line: bytes
    tag: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``append_events`` answered: 0 written; 1 seq/head moved (others' lines in
    ``tail``); 2 no such session."""

    status: int
    seq: int = 0
    head: str = ""
    size: int = 0
    tail: bytes = b""


#: The :class:`Outcome` of every append that was written (one object, not one per append).
_WRITTEN: Final = Outcome(0)


class _PgIO:
    """One writer's view of a session in PostgreSQL (the writer's ``SessionIO``)."""

    def __init__(self, store: PostgresStore, key: str, size: int = 0) -> None:
        self.name = store._describe(key)
        self._store = store
        self._key = key
        self._kb = key.encode()
        self._notify_prefix = notify_prefix(key)
        self._size = size
        # The catalog preview last written, and whether appended messages can still change it.
        self._preview: bytes | None = None
        self._settled = False
        # A preview read with the state, not yet known to be settled (see catalog_read).
        self._unchecked: bytes | None = None
        #: The state may hold events whose commit is unknown: rebuild it before the next use.
        self.stale = False
        # store.batch(): the open transaction's connection, owner thread, depth, staged lines.
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._owner: int | None = None
        self._depth = 0
        self._pending: list[Pending] = []
        self._undo: Undo | None = None
        self._state: SessionState | None = None

    # -- SessionIO (used inside store.batch) -----------------------------------------------

    def append(self, data: bytes) -> None:
        """Stage a line of the open transaction; it is written when the transaction ends."""
        if self._conn is None or self._state is None or self._undo is None:
            raise StorageError(self.name, "append", "no transaction is open (internal error)")
        seq, event_id, tag = event_row(data)
        self._undo.before(self._state, tag, event_id)
        self._pending.append(Pending(seq, event_id, data, tag))

    def sync(self) -> None:
        """Nothing to do: the commit is the durability point."""

    def truncate(self, size: int) -> None:
        """Nothing to do: a failed transaction is rolled back whole."""

    def size(self) -> int:
        return self._size + sum(len(p.line) for p in self._pending)

    def close(self) -> None:
        """Nothing held between appends (each append takes a pooled connection)."""

    def in_transaction(self) -> bool:
        """Whether this thread is inside this session's ``store.batch`` transaction."""
        return self._depth > 0 and self._owner == threading.get_ident()

    # -- the one-statement append ----------------------------------------------------------

    def send(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        base_seq: int,
        base_head: str,
        pending: Sequence[Pending],
        state: SessionState,
    ) -> Outcome:
        """Run ``append_events`` for ``pending`` (staged on top of ``base_seq``/``base_head``,
        already folded into ``state``); return what the server answered.

        One message on a session whose preview is settled (the common case) goes through
        ``append_event``: only the columns a message changes, no catalog recomputed.
        """
        sql = self._store._sql
        if self._unchecked is not None:  # the preview the open read: settled?
            self._settled = stored_preview_settled(self._unchecked, state)
            self._unchecked = None
        if len(pending) == 1 and self._settled and pending[0].tag == "message":
            p = pending[0]
            size = self._size + len(p.line)
            args: tuple[Any, ...] = (
                self._kb,
                base_seq,
                base_head,
                p.seq,
                self._size,
                p.id.encode(),
                p.line,
                state.head,
                size,
                *hot_values(state),
                notify_from(self._notify_prefix, self._key, state.seq),
            )
            return self._answer(self.execute(conn, sql.append_event, args), size, None)
        # A settled preview that no pending event can change is the one written before: it
        # is not computed again (a state opened from an index snapshot would read bodies).
        keep = self._settled and all(p.tag in KEEPS_PREVIEW for p in pending)
        values = catalog_values(state, preview=self._preview if keep else None)
        full = values.preview != self._preview or any(p.tag != "message" for p in pending)
        positions: list[int] = []
        size = self._size
        for p in pending:
            positions.append(size)
            size += len(p.line)
        one = len(pending) == 1
        args = (
            self._kb,
            base_seq,
            base_head,
            pending[0].seq if one else [p.seq for p in pending],
            positions[0] if one else positions,
            pending[0].id.encode() if one else [p.id.encode() for p in pending],
            pending[0].line if one else [p.line for p in pending],
            values.head,
            size,
            values.updated_at,
            values.messages,
            values.live_tokens,
            values.total_messages,
            values.total_tokens,
            values.last_consolidated,
            values.lifecycle,
            values.end_reason,
            full,
            values.title if full else None,
            values.metadata if full else None,
            values.preview if full else None,
            values.summary if full else None,
            values.encoded_conversations() if full else None,
            notify_from(self._notify_prefix, self._key, state.seq),
        )
        row = self.execute(conn, sql.append_one if one else sql.append_many, args)
        return self._answer(row, size, values)

    def _answer(
        self, row: tuple[Any, ...] | None, size: int, values: CatalogValues | None
    ) -> Outcome:
        """The :class:`Outcome` of an append statement's row; on success, the new size and,
        when the catalog was computed, its preview and whether that is settled."""
        if row is None:  # pragma: no cover - the function always returns one row
            raise StorageError(self.name, "append", "the append statement returned nothing")
        status = int(row[0])
        if status == 0:
            self._size = size
            if values is not None:
                self._preview = values.preview
                self._settled = values.settled
                self._unchecked = None
            return _WRITTEN
        if status == 2:
            return Outcome(2)
        return Outcome(1, int(row[1]), str(row[2]), int(row[3]), bytes(row[4] or b""))

    def execute(
        self, conn: psycopg.Connection[tuple[Any, ...]], query: Any, args: Sequence[Any]
    ) -> tuple[Any, ...] | None:
        """Run the append statement and fetch its row (one round trip; a seam for tests)."""
        return run(conn, query, args).fetchone()

    # -- catching up with other writers ----------------------------------------------------

    def absorb(
        self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState, moved: Outcome
    ) -> None:
        """Fold in what others committed (from a status-1 :class:`Outcome`), or reload."""
        if moved.seq > state.seq and moved.tail:
            dec = LineDecoder(
                key=self._store.hash_key,
                prev_h=state.head,
                last_seq=state.seq,
                expect_header=False,
                first_line=state.seq + 2,
            )
            events = dec.feed(moved.tail)
            if (
                dec.bad is None
                and not dec.pending
                and dec.last_seq == moved.seq
                and dec.head == moved.head
                and self._size + len(moved.tail) == moved.size
            ):
                for event in self._store._privacy.unseal_events(self._key, state, events):
                    apply(state, event)
                self._size = moved.size
                if any(_tag(event) not in KEEPS_PREVIEW for event in events):
                    # Others' events may have changed the messages.
                    self._settled, self._unchecked = False, None
                return
        self.reload(conn, state)  # cut, replaced or otherwise not a continuation: start over

    def reload(self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState) -> None:
        """Replace ``state`` (in place) with the session as the database has it."""
        loaded = self._store._load_on(conn, self._key, writing=True)
        if loaded is None:
            raise SessionNotFoundError(self._key)
        self._size = loaded.size
        for name in SessionState.__struct_fields__:
            setattr(state, name, getattr(loaded.state, name))
        self.catalog_read(loaded)
        self.stale = False

    def catalog_read(self, loaded: Loaded) -> None:
        """Start from the catalog preview the open read with the state (None: unknown). A
        settled one lets the next message take the lean append, with no catalog computed
        (which, for a state opened from an index snapshot, would read message bodies)."""
        self._preview = self._unchecked = loaded.preview  # checked on the first send
        self._settled = False

    def refresh(self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState) -> None:
        """Fold in what other writers committed (one query, no lock)."""
        if self.stale:
            self.reload(conn, state)
            return
        row = run(conn, self._store._sql.since, (state.seq, self._kb)).fetchone()
        if row is None:
            raise SessionNotFoundError(self._key)
        cur_seq, cur_head = int(row[0]), str(row[1])
        if cur_seq == state.seq and cur_head == state.head:
            return
        self.absorb(conn, state, Outcome(1, cur_seq, cur_head, int(row[2]), bytes(row[3] or b"")))

    # -- store.batch: a transaction holding the row lock -----------------------------------

    @contextlib.contextmanager
    def transaction(
        self, state: SessionState, conn: psycopg.Connection[tuple[Any, ...]] | None = None
    ) -> Iterator[None]:
        """Lock the session, catch ``state`` up, run the body; write and commit at the end.

        Runs on ``conn`` when given (the caller keeps it), else on a pooled connection.
        """
        if self._depth:  # a nested use on the owning thread joins the open transaction
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        store = self._store
        lent = conn
        conn = lent or store._getconn()
        pid = os.getpid()  # a forked child leaving the block sends nothing on the parent's socket
        committing = False
        try:
            try:
                with conn.pipeline():  # BEGIN and the row lock in one round trip
                    conn.execute("BEGIN")
                    row = conn.execute(store._sql.lock, (self._kb,)).fetchone()
                if row is None:
                    raise SessionNotFoundError(self._key)
                if self.stale or int(row[0]) != state.seq or str(row[1]) != state.head:
                    self.refresh(conn, state)
            except Exception as exc:
                _rollback(conn)
                raise translate(exc, self.name, "append", nothing_written=True) from exc
            self._conn, self._owner, self._depth = conn, threading.get_ident(), 1
            self._pending, self._undo, self._state = [], Undo(state), state
            base_seq, base_head = state.seq, state.head
            try:
                yield
            except BaseException:
                if os.getpid() == pid:
                    _rollback(conn)
                self._undo.undo(state)
                raise
            if os.getpid() != pid:
                self._undo.undo(state)
                raise StorageError(
                    self.name,
                    "append",
                    "a batch begun before a fork is the parent's: nothing written in the child",
                )
            if not self._pending:
                _rollback(conn)
                return
            try:
                committing = True
                with conn.pipeline():  # the write and the COMMIT in one round trip
                    outcome = self.send(conn, base_seq, base_head, self._pending, state)
                    conn.execute("COMMIT")
                if outcome.status != 0:  # pragma: no cover - the row lock makes this impossible
                    raise StorageError(self.name, "append", "the session moved under its lock")
            except BaseException as exc:
                _rollback(conn)
                self._undo.undo(state)
                if committing and is_disconnect(exc, conn):
                    self.stale = True
                    raise CommitUnknownError(
                        self.name, oneline(exc), event_ids=[p.id for p in self._pending]
                    ) from exc
                raise translate(exc, self.name, "append", nothing_written=True) from exc
        finally:
            self._conn, self._owner, self._depth = None, None, 0
            self._pending, self._undo, self._state = [], None, None
            if lent is None and os.getpid() == pid:
                store._putconn(conn)


def idle_ok(conn: psycopg.Connection[tuple[Any, ...]]) -> bool:
    """Whether a pooled connection looks usable: open, and nothing arrived while it was idle.

    A pool connection never LISTENs, so input while idle means the server ended the session
    (a FATAL message, or EOF): using it would only fail after the statement was sent. (Reading
    with libpq's ``consume_input`` instead, which keeps the GIL, saw the end only once the
    socket was closed, which can come well after the FATAL message: a poll sees the message.)
    """
    if conn.closed or conn.broken:
        return False
    try:
        # One poller per connection (its socket does not change while it is open).
        poller: Any = getattr(conn, "_sessionledger_poller", None)
        if poller is None:
            poller = select.poll()
            poller.register(conn.pgconn.socket, select.POLLIN)
            with contextlib.suppress(AttributeError):
                conn._sessionledger_poller = poller  # type: ignore[attr-defined]
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def _rollback(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    with contextlib.suppress(Exception):
        conn.rollback()


def is_disconnect(exc: BaseException, conn: psycopg.Connection[tuple[Any, ...]]) -> bool:
    """Whether ``exc`` lost the connection (so a statement in flight may have committed)."""
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return False
    return conn.closed or conn.broken or exc.sqlstate is None or exc.sqlstate.startswith("57P")


def oneline(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _tag(event: object) -> object:
    """An event's type tag (None for a type without one)."""
    return getattr(getattr(type(event), "__struct_config__", None), "tag", None)

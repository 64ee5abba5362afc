"""One writer's append transaction on a PostgreSQL session (the ``SessionIO`` of the store).

Invariants:
- An append is one transaction on one pooled connection: BEGIN with ``SELECT ... FOR UPDATE`` of
  the session row (one round trip), fold in what other writers committed since this writer
  last looked, let the writer stage its event(s), then write the lines, the catalog columns and
  the NOTIFY with the COMMIT (one more round trip). Nothing is held between appends.
- Any failure rolls back the whole transaction. If the writer may already have folded a staged
  event, its state is marked stale and rebuilt from the database at the next transaction.
- A connection lost before the write was sent: nothing was written (``StorageError``). Lost while
  the write and commit were in flight: :class:`CommitUnknownError` (retrying the same event id
  is safe; ``PostgresStore.committed`` tells which).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._codec import LineDecoder
from ._errors import CorruptLogError, SessionNotFoundError, StorageError
from ._fold import SessionState, apply
from ._pg_common import catalog_values, event_row, notify_payload, translate

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


class _PgIO:
    """One writer's view of a session in PostgreSQL; appends run in :meth:`transaction`."""

    def __init__(self, store: PostgresStore, key: str) -> None:
        self.name = store._describe(key)
        self._store = store
        self._key = key
        self._kb = key.encode()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._depth = 0
        self._pending: list[tuple[int, str, bytes, str]] = []
        self._stale = False
        self._size = 0
        self._preview = b""

    # -- SessionIO ---------------------------------------------------------------------------

    def append(self, data: bytes) -> None:
        """Stage a line; it is written when the transaction ends."""
        if self._conn is None:
            raise StorageError(self.name, "append", "no transaction is open (internal error)")
        seq, event_id, tag = event_row(data)
        self._pending.append((seq, event_id, data, tag))

    def sync(self) -> None:
        """Nothing to do: the transaction's commit is the durability point."""

    def truncate(self, size: int) -> None:
        """Nothing to do: a failed transaction is rolled back whole."""

    def size(self) -> int:
        return self._size + sum(len(p[2]) for p in self._pending)

    def close(self) -> None:
        """Nothing held between appends (each append takes a pooled connection)."""

    # -- the append transaction --------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, state: SessionState) -> Iterator[None]:
        """Lock the session, catch ``state`` up, run the body; write and commit at the end."""
        if self._depth:  # a batch: this append joins the open transaction
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        store = self._store
        conn = store._getconn()
        self._conn, self._depth, self._pending = conn, 1, []
        committing = False
        try:
            try:
                self._catch_up(conn, state)
                yield
            except BaseException:
                _rollback(conn)
                if self._pending:
                    self._stale = True  # the writer may have folded a staged event
                raise
            if not self._pending:
                _rollback(conn)
                return
            try:
                # One round trip: the write and the commit go together (pipeline mode). A
                # dropped connection here may have committed or not: the outcome is unknown.
                committing = True
                with conn.pipeline():
                    self._write(conn, state)
                    conn.commit()
            except BaseException as exc:
                self._stale = True
                _rollback(conn)
                if committing and _is_disconnect(exc):
                    raise CommitUnknownError(
                        self.name, _oneline(exc), event_ids=[p[1] for p in self._pending]
                    ) from exc
                raise translate(exc, self.name, "append", nothing_written=True) from exc
            self._size += sum(len(p[2]) for p in self._pending)
        finally:
            self._depth, self._conn, self._pending = 0, None, []
            store._putconn(conn)

    def _catch_up(self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState) -> None:
        store = self._store
        try:
            with conn.pipeline():  # BEGIN and the row lock in one round trip
                row = conn.execute(store._sql.lock, (self._kb,)).fetchone()
            if row is None:
                raise SessionNotFoundError(self._key)
            seq, head, self._size = int(row[0]), str(row[1]), int(row[2])
            if self._stale or seq < state.seq or (seq == state.seq and head != state.head):
                fresh = store._load_state(conn, self._key)
                if fresh is None:
                    raise SessionNotFoundError(self._key)
                for name in SessionState.__struct_fields__:
                    setattr(state, name, getattr(fresh, name))
                self._stale = False
            elif seq > state.seq:
                rows = conn.execute(store._sql.after, (self._kb, state.seq), binary=True)
                dec = LineDecoder(
                    key=store.hash_key,
                    prev_h=state.head,
                    last_seq=state.seq,
                    expect_header=False,
                    first_line=state.seq + 2,
                )
                events = dec.feed(b"".join(r[0] for r in rows.fetchall()))
                if dec.bad is not None or dec.pending:
                    bad = dec.bad
                    line = bad.line if bad is not None else dec.line_no + 1
                    raise CorruptLogError(self.name, line, bad.reason if bad else "cut short")
                for event in events:
                    apply(state, event)
        except Exception as exc:
            raise translate(exc, self.name, "append", nothing_written=True) from exc

    def _write(self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState) -> None:
        pending = self._pending
        values = catalog_values(state)
        full = values.preview != self._preview or any(p[3] != "message" for p in pending)
        positions: list[int] = []
        size = self._size
        for p in pending:
            positions.append(size)
            size += len(p[2])
        args: tuple[Any, ...] = (
            self._kb,
            [p[0] for p in pending],
            positions,
            [p[1].encode() for p in pending],
            [p[2] for p in pending],
            *values.hot(),
            size,
            *(values.full() if full else ()),
            self._kb,
            notify_payload(self._key, state.seq),
        )
        sql = self._store._sql
        conn.execute(sql.write_full if full else sql.write_hot, args)
        self._preview = values.preview


def _rollback(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    with contextlib.suppress(Exception):
        conn.rollback()


def _is_disconnect(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError)


def _oneline(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__

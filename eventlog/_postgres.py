"""The PostgreSQL store: one log for many agent processes and machines.

Invariants:
- A session's log is its rows in ``events`` (header at seq 0), each holding the exact line bytes
  the file store would write; in seq order they are the JSONL log, byte for byte.
- Every append is one transaction: lock the session row (``SELECT ... FOR UPDATE``), fold in
  the events other writers committed since this writer last looked, run the writer's checks
  (event id already there: no-op; ``expected_seq``: :class:`ConflictError`, nothing written),
  insert the chained line, update the catalog columns of the session row, notify followers,
  commit. Sessions lock independently: appends to different sessions never wait on each other.
- ``(key, id)`` is unique, so a retried event id is written at most once even across machines.
- A commit whose outcome is unknown (the connection dropped) raises :class:`CommitUnknownError`;
  the writer's state is rebuilt from the database on its next use, so a retry with the same
  event id returns the original seq if the first attempt did commit, and appends it otherwise.
- psycopg is imported lazily: ``import eventlog`` works without it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ._codec import ZERO_HASH, LineDecoder, encode_line
from ._errors import CorruptLogError, SessionNotFoundError, StorageError
from ._fold import SessionState, apply, fold, initial_state
from ._names import check_key
from ._pg_common import (
    PgTarget,
    Statements,
    catalog_values,
    encode_snapshot,
    event_row,
    key_parts,
    require_psycopg,
    state_from_rows,
    translate,
)
from ._pg_schema import migrate
from ._store import BaseStore, OpenReport, RawSession
from ._tokens import TokenCounter
from ._writer import Durability

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool


class CommitUnknownError(StorageError):
    """The connection dropped while committing an append: it happened once or not at all.

    Retry with the same ``event_id`` (safe: a committed id is never written twice), or ask
    :meth:`PostgresStore.committed` which it was.
    """

    def __init__(self, where: str, cause: str, *, event_ids: Sequence[str]) -> None:
        ids = ", ".join(event_ids) or "?"
        super().__init__(
            where,
            "commit",
            f"{cause}; the append may or may not have been committed: retry with the same "
            f"event id ({ids}), which is safe",
            durable_unknown=True,
        )
        self.event_ids = tuple(event_ids)


class _PgIO:
    """One writer's view of a session in PostgreSQL; appends run in :meth:`transaction`."""

    def __init__(self, store: PostgresStore, key: str) -> None:
        self.name = store._describe(key)
        self._store = store
        self._key = key
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._depth = 0
        self._pending: list[tuple[int, str, bytes, str]] = []
        self._stale = False
        self._closed = False
        self._size = 0
        self._preview = b""

    # -- SessionIO ---------------------------------------------------------------------------

    def append(self, data: bytes) -> None:
        """Stage a line; it is written when the transaction ends (outside one: refused)."""
        if self._conn is None:
            raise StorageError(self.name, "append", "no transaction is open (internal error)")
        seq, event_id, tag = event_row(data)
        self._pending.append((seq, event_id, data, tag))
        self._size += len(data)

    def sync(self) -> None:
        """Nothing to do: the transaction's commit is the durability point."""

    def truncate(self, size: int) -> None:
        """Nothing to do: a failed transaction is rolled back whole."""

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        self._closed = True

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
        self._conn = conn
        self._depth = 1
        self._pending = []
        committing = False
        try:
            try:
                self._catch_up(conn, state)
            except BaseException:
                self._rollback(conn)
                raise
            try:
                yield
            except BaseException:
                self._rollback(conn)
                if self._pending:
                    self._stale = True  # the writer may have folded a staged event
                raise
            if not self._pending:
                self._rollback(conn)
                return
            try:
                self._write(conn, state)
                committing = True
                conn.commit()
            except BaseException as exc:
                self._stale = True
                self._rollback(conn)
                if committing and store._is_disconnect(exc):
                    raise CommitUnknownError(
                        self.name, str(exc), event_ids=[p[1] for p in self._pending]
                    ) from exc
                raise translate(exc, self.name, "append", nothing_written=True) from exc
        finally:
            self._depth = 0
            self._conn = None
            self._pending = []
            store._putconn(conn)

    def _rollback(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        with contextlib.suppress(Exception):
            conn.rollback()

    def _catch_up(self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState) -> None:
        store = self._store
        try:
            row = conn.execute(store._sql.lock, (self._key,)).fetchone()
        except Exception as exc:
            raise translate(exc, self.name, "append", nothing_written=True) from exc
        if row is None:
            raise SessionNotFoundError(self._key)
        seq, head, size = int(row[0]), str(row[1]), int(row[2])
        if self._stale or seq < state.seq or (seq == state.seq and head != state.head):
            fresh = store._loader.load(conn, self._key)
            if fresh is None:
                raise SessionNotFoundError(self._key)
            for name in SessionState.__struct_fields__:
                setattr(state, name, getattr(fresh, name))
            self._stale = False
        elif seq > state.seq:
            lines = conn.execute(store._sql.tail, (self._key, state.seq)).fetchall()
            dec = LineDecoder(
                key=store.hash_key,
                prev_h=state.head,
                last_seq=state.seq,
                expect_header=False,
                first_line=state.seq + 2,
            )
            events = dec.feed(b"".join(bytes(r[0]) for r in lines))
            if dec.bad is not None or dec.pending:
                line = dec.bad.line if dec.bad is not None else dec.line_no + 1
                reason = dec.bad.reason if dec.bad is not None else "incomplete line"
                raise CorruptLogError(self.name, line, reason)
            for event in events:
                apply(state, event)
        self._size = size

    def _write(self, conn: psycopg.Connection[tuple[Any, ...]], state: SessionState) -> None:
        store = self._store
        pending = self._pending
        values = catalog_values(state)
        preview = values.preview
        full = preview != self._preview or any(p[3] != "message" for p in pending)
        added = sum(len(p[2]) for p in pending)
        args: tuple[Any, ...] = (
            self._key,
            [p[0] for p in pending],
            [p[1] for p in pending],
            [p[2] for p in pending],
            *values.hot(),
            added,
            *(values.full() if full else ()),
            self._key,
            f"{self._key}\n{state.seq}",
        )
        conn.execute(store._sql.write_full if full else store._sql.write_hot, args)
        self._preview = preview
        every = store.snapshot_every
        if every and state.seq // every != (state.seq - len(pending)) // every:
            store._loader.save(conn, self._key, state)


class _Loader:
    """The sync queries that load, create, read and snapshot one session."""

    def __init__(self, target: PgTarget, statements: Statements, hash_key: bytes) -> None:
        self._where = target.where
        self._sql = statements
        self._hash_key = hash_key

    def load(self, conn: psycopg.Connection[tuple[Any, ...]], key: str) -> SessionState | None:
        rows = conn.execute(self._sql.load, {"k": key}, binary=True).fetchall()
        if not rows:
            return None
        where = f"{self._where}/{key}"
        state = state_from_rows(where, key, self._hash_key, rows)
        if state is None:  # a stale or foreign snapshot: read the whole log
            rows = conn.execute(self._sql.lines, (key,), binary=True).fetchall()
            state = state_from_rows(where, key, self._hash_key, rows)
            assert state is not None
        return state

    def create(
        self, conn: psycopg.Connection[tuple[Any, ...]], key: str, state: SessionState, line: bytes
    ) -> bool:
        agent, channel, peer = key_parts(key)
        values = catalog_values(state)
        row = conn.execute(
            self._sql.create,
            (
                key,
                state.id,
                state.seq,
                state.head,
                state.created_at,
                state.updated_at,
                agent,
                channel,
                peer,
                values.title,
                values.metadata.decode(),
                len(line),
                state.seq,
                _header_id(line),
                line,
            ),
        ).fetchone()
        return row is not None

    def read_bytes(
        self, conn: psycopg.Connection[tuple[Any, ...]], key: str, *, lock: bool = False
    ) -> bytes | None:
        if lock:
            rows = conn.execute(self._sql.lock_lines, (key, key), binary=True).fetchall()
        else:
            rows = conn.execute(self._sql.lines, (key,), binary=True).fetchall()
        return b"".join(bytes(r[2]) for r in rows) if rows else None

    def save(
        self, conn: psycopg.Connection[tuple[Any, ...]], key: str, state: SessionState
    ) -> None:
        conn.execute(self._sql.save_snapshot, (key, state.seq, state.head, encode_snapshot(state)))


def _header_id(line: bytes) -> str:
    return event_row(line)[1]


@dataclass(slots=True)
class _Raw:
    io: _PgIO
    data: bytes
    created: bool


class PostgresStore(BaseStore):
    """Sessions as rows in PostgreSQL, with the same API, events and bytes as :class:`FileStore`.

    Args:
        dsn: a libpq connection string or URL, e.g. ``postgresql://user@db:5432/agents``.
        schema: the schema holding the tables (created and migrated on first use).
        durability: ``"always"``/``"batch"``: each append returns once its commit is durable
            (the server's WAL group-commits concurrent appends); ``"none"``: commits with
            ``synchronous_commit = off`` (a server crash can lose the last appends, never
            corrupt a log).
        hash_key: a secret to key the hash chain with.
        token_counter: counts a message's tokens at write time.
        pool_size: most connections held (each in-flight append uses one).
        connect_timeout: seconds to wait for the server before a clear :class:`StorageError`.
        snapshot_every: write the folded state beside the log every N events (0: never), so
            opening reads the snapshot plus a short tail.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "sessionlog",
        durability: Durability | str = "batch",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        pool_size: int = 10,
        connect_timeout: float = 5.0,
        snapshot_every: int = 1000,
    ) -> None:
        require_psycopg()
        super().__init__(durability=durability, hash_key=hash_key, token_counter=token_counter)
        import psycopg_pool

        self.target = PgTarget(dsn, schema, connect_timeout)
        self.schema = schema
        self.snapshot_every = snapshot_every
        self._sql = self.target.statements()
        self._loader = _Loader(self.target, self._sql, self.hash_key)
        with self.target.connect() as conn:
            try:
                migrate(conn, schema, self.target.where)
            except Exception as exc:
                raise translate(exc, self.target.where, "migrate") from exc
        sync_off = self.durability == "none"

        def configure(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            if sync_off:
                conn.execute("SET synchronous_commit TO off")
                conn.commit()

        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = (
            psycopg_pool.ConnectionPool(
                self.target.dsn,
                kwargs=self.target.connect_kwargs(),
                min_size=1,
                max_size=max(1, pool_size),
                open=True,
                timeout=max(connect_timeout, 1.0) * 2,
                configure=configure,
                name=f"sessionlog-{schema}",
            )
        )
        self._pool_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self.target.where!r}, durability={self.durability!r})"

    # -- connections -------------------------------------------------------------------------

    def _getconn(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            return self._pool.getconn()
        except Exception as exc:
            raise translate(exc, self.target.where, "connect") from exc

    def _putconn(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        with contextlib.suppress(Exception):
            self._pool.putconn(conn)

    @contextlib.contextmanager
    def _connection(self, action: str) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        conn = self._getconn()
        try:
            with conn.transaction():
                yield conn
        except Exception as exc:
            raise translate(exc, self.target.where, action) from exc
        finally:
            self._putconn(conn)

    @staticmethod
    def _is_disconnect(exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.OperationalError)

    # -- backend hooks -----------------------------------------------------------------------

    def _describe(self, key: str) -> str:
        return f"{self.target.where}/{key}"

    def _open_raw(self, key: str, create: bool) -> RawSession | None:
        if not create and not self.exists(key):
            return None
        return _Raw(_PgIO(self, key), b"", create)

    def _prepare(
        self, key: str, raw: RawSession, metadata: Mapping[str, Any] | None
    ) -> tuple[SessionState, OpenReport]:
        created = False
        with self._connection("open") as conn:
            state = self._loader.load(conn, key)
            if state is None:
                header = self._new_header(key, metadata)
                line, h = encode_line(header, ZERO_HASH, self.hash_key)
                header = msgspec.structs.replace(header, h=h)
                state = initial_state(header)
                created = self._loader.create(conn, key, state, line)
                if not created:  # another process created it first
                    state = self._loader.load(conn, key)
                    assert state is not None
        assert isinstance(raw.io, _PgIO)
        return state, OpenReport(key, created=created)

    def _read_raw(self, key: str) -> bytes | None:
        with self._connection("read") as conn:
            return self._loader.read_bytes(conn, key)

    def _quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        with self._connection("quarantine") as conn:
            conn.execute(self._sql.quarantine, (key, reason, line, offset, data))
        return f"{self.target.where}/quarantine/{key}"

    def _list_keys(self) -> list[str]:
        with self._connection("list") as conn:
            return [str(r[0]) for r in conn.execute(self._sql.keys).fetchall()]

    def _remove(self, key: str) -> bool:
        with self._connection("delete") as conn:
            conn.execute(self._sql.unquarantine, (key,))
            return conn.execute(self._sql.delete, (key,)).rowcount > 0

    # -- overrides where a database does better ----------------------------------------------

    def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists."""
        key = check_key(key)
        with self._connection("read") as conn:
            return conn.execute(self._sql.exists, (key,)).fetchone() is not None

    def state(self, key: str) -> SessionState:
        """The current folded state of ``key`` (what every writer has committed)."""
        key = check_key(key)
        writer = self._writers.get(key)
        if writer is not None and not writer.closed:
            writer.refresh()
            return writer.state
        with self._connection("read") as conn:
            state = self._loader.load(conn, key)
        if state is None:
            raise SessionNotFoundError(key)
        return state

    def writer_lock_held(self, key: str) -> bool:
        """Always False: PostgreSQL sessions take many writers (each append locks briefly)."""
        check_key(key)
        return False

    def import_bytes(
        self, key: str, data: bytes, *, rejected: Sequence[tuple[str, int, int, bytes]] = ()
    ) -> str:
        """Install a whole, valid log built elsewhere (see :meth:`BaseStore.import_bytes`)."""
        key = check_key(key)
        decoded = self._decode(key, data)
        problem = decoded.bad or decoded.torn
        if problem is not None:
            raise CorruptLogError(self._describe(key), problem.line, problem.reason)
        assert decoded.header is not None
        with self._connection("import") as conn:
            existing = self._loader.read_bytes(conn, key, lock=True)
            if existing == data:
                return "unchanged"
            if existing is not None and not data.startswith(existing):
                return "clash"
            state = fold(decoded.header, decoded.events)
            lines = data.splitlines(keepends=True)
            seqs = [decoded.header.seq, *(e.seq for e in decoded.events)]
            ids = [decoded.header.id, *(e.id for e in decoded.events)]
            start = 0
            if existing is None:
                self._loader.create(conn, key, initial_state(decoded.header), lines[0])
                start = 1
                for reason, line, offset, text in rejected:
                    conn.execute(self._sql.quarantine, (key, reason, line, offset, text))
            else:
                start = existing.count(b"\n")
            new = slice(start, len(lines))
            values = catalog_values(state)
            conn.execute(
                self._sql.write_full,
                (
                    key,
                    seqs[new],
                    ids[new],
                    lines[new],
                    *values.hot(),
                    sum(len(x) for x in lines[new]),
                    *values.full(),
                    key,
                    f"{key}\n{state.seq}",
                ),
            )
            return "extended" if existing is not None else "created"

    # -- PostgreSQL extras -------------------------------------------------------------------

    def committed(self, key: str, event_id: str) -> int | None:
        """The seq ``event_id`` was committed at in ``key``, or None (after an unknown outcome)."""
        key = check_key(key)
        with self._connection("read") as conn:
            row = conn.execute(self._sql.find_id, (key, event_id)).fetchone()
        return None if row is None else int(row[0])

    def save_snapshot(self, key: str) -> int:
        """Store the folded state of ``key`` beside its log now; return the seq it is at."""
        state = self.state(key)
        with self._connection("snapshot") as conn:
            self._loader.save(conn, key, state)
        return state.seq

    @contextlib.contextmanager
    def batch(self, key: str) -> Iterator[Any]:
        """Group the appends made in the block into one transaction (one commit, one lock).

        Yields the session's writer; other threads' appends to it wait until the block ends.
        If the block raises, nothing of it is written.
        """
        writer = self.session(key)
        with writer._lock, writer._transaction():
            yield writer

    def close(self) -> None:
        """Close every writer and the connection pool."""
        try:
            super().close()
        finally:
            with self._pool_lock:
                self._pool.close(timeout=5.0)

"""The PostgreSQL store: one log for many agent processes and machines.

Invariants:
- A session's log is its rows in ``events`` (header at seq 0), each holding the exact line bytes
  the file store would write; in seq order they are the JSONL log, byte for byte.
- An append is one statement (``append_events``, see ``_pg_io``): a compare-and-set on the
  session row's seq and head, the insert, the catalog columns and, when somebody follows, the
  NOTIFY, committed together. A writer that lost the race folds in what others committed and
  stages again, so its checks (event id already there: no-op; ``expected_seq``:
  :class:`ConflictError`, nothing written) always answer against the committed log. Appends
  from many threads to one writer are committed in groups (``_pg_writer``).
- ``(key, id)`` is unique, so a retried event id is written at most once even across machines.
- A commit whose outcome is unknown (the connection dropped) raises :class:`CommitUnknownError`;
  the writer's state is rebuilt from the database on its next use, so a retry with the same
  event id returns the original seq if the first attempt committed, and appends it otherwise.
- Opening a session is one query (snapshot and the lines from its seq on); reads are one
  statement each on an autocommit connection. Connections go to any thread, one at a time:
  the store's own first connection when it is free (no pool threads for a store used by one
  thread), else one from a pool opened on first need; a forked child uses neither.
- Snapshots and the catalog blob use the shared view formats (``SnapshotViews``), kept in tables.
- psycopg is imported lazily: ``import eventlog`` works without it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ._codec import ZERO_HASH, Decoded, encode_line
from ._errors import (
    CorruptLogError,
    InvalidEventError,
    NewerFormatError,
    SessionNotFoundError,
    StoreClosedError,
)
from ._events import FORMAT_VERSION, Header
from ._fold import SessionState, fold, initial_state
from ._indexsnap import IndexMeta, decode_meta, is_index_snapshot
from ._keystore import KeyProvider, KeyStore
from ._names import check_key
from ._pg_backend import PgBackend, read_lines
from ._pg_common import (
    CatalogRecord,
    Loaded,
    PgTarget,
    catalog_query,
    catalog_records,
    catalog_values,
    event_row,
    key_parts,
    notify_payload,
    require_psycopg,
    run,
    text,
)
from ._pg_conn import PgConnections
from ._pg_index import PgIndexFiles, open_indexed
from ._pg_io import _PgIO
from ._pg_notify import NotifyWaker
from ._pg_writer import PgSessionWriter
from ._snapshot import Anchored, SnapshotError, check_anchor, decode_snapshot, resume
from ._store import BaseStore
from ._store_types import CutReport, OpenReport, RawSession
from ._tokens import TokenCounter
from ._views import withheld
from ._writer import Durability, SessionWriter, check_durability

if TYPE_CHECKING:
    import psycopg


def _alive(ref: weakref.ref[PostgresStore]) -> PostgresStore:
    store = ref()
    if store is None:
        raise StoreClosedError("the store is gone")
    return store


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
        pool_size: most connections held (each in-flight append uses one): the store's own
            first connection, then a pool opened when that one is busy (2 for ``pool_size=1``).
        connect_timeout: seconds to wait for the server before a clear :class:`StorageError`.
        key_provider: encrypt the sessions this store creates (see docs/privacy.md); the
            tables then hold the same sealed bytes as a file store's logs.
        key_store: where the wrapped data keys live, required with ``key_provider`` (e.g.
            :class:`FileKeyStore`): keys stay outside the database unless you put them there.
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
        key_provider: KeyProvider | None = None,
        key_store: KeyStore | None = None,
    ) -> None:
        require_psycopg()
        if not isinstance(schema, str) or not schema or len(schema) > 40:
            raise InvalidEventError(f"schema must be 1 to 40 characters, not {schema!r}")
        if len(schema.encode()) > 63:
            # PostgreSQL cuts a longer name to 63 bytes: two names alike in those would be one.
            raise InvalidEventError(f"schema must be at most 63 bytes of UTF-8, not {schema!r}")
        if "%" in schema or "\x00" in schema:
            # psycopg reads a '%' in any statement sent with parameters as a placeholder (the
            # schema's name is in every statement); PostgreSQL names cannot hold a NUL.
            raise InvalidEventError(f"schema must not contain '%' or NUL, not {schema!r}")
        durability = check_durability(durability)
        self.target = PgTarget(dsn, schema, connect_timeout)
        self.schema = schema
        self._db = db = PgConnections(
            self.target, pool_size=pool_size, synchronous=durability != "none"
        )
        self._where = db.where
        self._sql = db.sql
        # The connection helpers, bound once (the writers and the index lend through them).
        self._getconn = db.getconn
        self._putconn = db.putconn
        self._held_connection = db.held_connection
        self._connection = db.connection
        self._reading = db.reading
        store = weakref.ref(self)  # the backend holds the store weakly: no cycle

        def make_io(key: str) -> _PgIO:
            return _PgIO(_alive(store), key)

        def make_index(key: str) -> PgIndexFiles:
            return PgIndexFiles(_alive(store), key)

        def import_log(key: str, data: bytes) -> str:
            return _alive(store).import_bytes(key, data)

        backend = PgBackend(db, make_io=make_io, make_index=make_index, import_log=import_log)
        super().__init__(
            backend, durability=durability, hash_key=hash_key, token_counter=token_counter
        )
        self._privacy.use_keys(key_provider, key_store)
        #: The one writer per session this store hands out (its log is in ``_writers``).
        self._pg_writers: dict[str, PgSessionWriter] = {}
        # Connecting is the last step: a refused argument opens no connection, and the
        # object's own setup runs before the wait on the server rather than after it (code
        # run just after a wait of milliseconds runs from cold caches: this object's setup
        # cost a new store 60 us of client CPU there, against 12 us run warm).
        db.connect()

    def _forked(self) -> None:
        super()._forked()
        self._db.forked()

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, durability={self.durability!r})"

    # -- reading on one connection -------------------------------------------------------------

    def _load_on(
        self, conn: psycopg.Connection[tuple[Any, ...]], key: str, *, writing: bool = False
    ) -> Loaded | None:
        """Fold ``key`` from its snapshot and the lines from its seq on, fetched in one query
        (from every line when there is no usable snapshot); return it, the log's length and
        the catalog's stored preview when it is of that same state.

        ``writing``: the caller is about to append, so a log in a newer format than this library
        writes raises :class:`NewerFormatError` (it can be read, never appended to)."""
        kb = key.encode()
        rows = run(conn, self._sql.open, {"k": kb}, binary=True).fetchall()
        if not rows:
            return None
        records = bytes(rows[0][3]) if rows[0][0] == 0 else None
        if records is not None:
            rows = rows[1:]
        catalog = rows.pop() if rows and rows[-1][0] == 3 else None
        if not rows:
            return None
        state: SessionState | None = None
        data = b""
        if rows[0][0] == 1:
            lines = rows[1:]
            if lines:
                start, size = int(lines[0][2]), int(lines[-1][2]) + len(lines[-1][3])
                tail = b"".join(r[3] for r in lines)
                opened = self._from_snapshot(key, bytes(rows[0][3]), records, start, tail)
                if opened is not None:
                    snap, restored, decoded = opened
                    problem = decoded.bad or decoded.torn
                    if problem is not None:
                        raise CorruptLogError(self._describe(key), problem.line, problem.reason)
                    if writing:
                        self._check_writable(key, snap.header)
                    self._views.seqs[key] = snap.seq
                    state = fold(snap.header, decoded.events, restored)
            if state is None:
                every = self._read_on(conn, kb)  # a stale or damaged snapshot: every line
                if every is None:
                    return None
                # Another statement's view: the catalog row may be older than the lines.
                data, catalog = every, None
        else:
            data = b"".join(r[3] for r in rows)
        if state is None:
            decoded = self._decode(key, data)
            problem = decoded.bad or decoded.torn
            if problem is not None:
                raise CorruptLogError(self._describe(key), problem.line, problem.reason)
            assert decoded.header is not None
            if writing:
                self._check_writable(key, decoded.header)
            state, size = fold(decoded.header, decoded.events), len(data)
        preview = None
        if catalog is not None and int(catalog[1]) == state.seq and catalog[3] is not None:
            preview = bytes(catalog[3])
        return Loaded(state, size, preview)

    def _from_snapshot(
        self, key: str, blob: bytes, records: bytes | None, start: int, tail: bytes
    ) -> tuple[Anchored, SessionState, Decoded] | None:
        """The snapshot ``blob`` (an index snapshot reads its messages through ``records``),
        its state and the decoded ``tail`` (the log from byte ``start``); None when it is
        damaged, stale or cannot be opened (the caller reads every line)."""
        snap: Anchored
        try:
            if is_index_snapshot(blob):
                meta = decode_meta(blob, key, self._hash_key)
                if (
                    records is None
                    or withheld(meta.state)
                    or not self._privacy.open_sealed(key, meta)
                ):
                    return None
                snap = meta
            else:
                snap = decode_snapshot(blob, key, self._hash_key)
        except SnapshotError:
            return None
        if snap.line_start != start or check_anchor(snap, tail, self._hash_key) is not None:
            return None
        if isinstance(snap, IndexMeta):
            state = open_indexed(PgIndexFiles(self, key, records), snap, self._hash_key)
            if state is None:
                return None
        else:
            state = snap.state
        decoded = resume(snap, tail, self._hash_key)
        if not self._privacy.unseal_restored(key, snap, decoded):
            return None
        return snap, snap.state, decoded

    def _check_writable(self, key: str, header: Header) -> None:
        if header.version > FORMAT_VERSION:
            raise NewerFormatError(self._describe(key), header.version, FORMAT_VERSION)

    def _load_state(
        self, conn: psycopg.Connection[tuple[Any, ...]], key: str
    ) -> SessionState | None:
        loaded = self._load_on(conn, key)
        return None if loaded is None else loaded.state

    def _read_on(self, conn: psycopg.Connection[tuple[Any, ...]], kb: bytes) -> bytes | None:
        return read_lines(conn, self._sql, kb)

    def _create(
        self, conn: psycopg.Connection[tuple[Any, ...]], key: str, state: SessionState, line: bytes
    ) -> bool:
        agent, channel, peer = (p.encode() if p is not None else None for p in key_parts(key))
        values = catalog_values(state)
        row = conn.execute(
            self._sql.create,
            (
                key.encode(),
                text(event_row(line)[1]),
                state.seq,
                state.head,
                len(line),
                state.created_at,
                state.updated_at,
                agent,
                channel,
                peer,
                values.title,
                values.metadata,
                values.preview,
                values.encoded_conversations(),
                state.seq,
                event_row(line)[1].encode(),
                line,
            ),
        ).fetchone()
        return row is not None

    def _write_lines(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        key: str,
        lines: Sequence[bytes],
        start_pos: int,
        state: SessionState,
    ) -> None:
        rows = [event_row(line) for line in lines]
        positions: list[int] = []
        size = start_pos
        for line in lines:
            positions.append(size)
            size += len(line)
        values = catalog_values(state)
        kb = key.encode()
        conn.execute(
            self._sql.write_full,
            (
                kb,
                [r[0] for r in rows],
                positions,
                [r[1].encode() for r in rows],
                list(lines),
                *values.hot(),
                size,
                *values.full(),
                kb,
                notify_payload(key, state.seq),
            ),
        )

    # -- backend hooks -----------------------------------------------------------------------

    def _prepare(
        self, key: str, raw: RawSession, metadata: Mapping[str, Any] | None
    ) -> tuple[SessionState, OpenReport]:
        loaded, created = self._open_state(key, create=True, metadata=metadata)
        assert isinstance(raw.io, _PgIO)
        raw.io._size = loaded.size
        raw.io.catalog_read(loaded)
        return loaded.state, OpenReport(key, created=created)

    def _open_state(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> tuple[Loaded, bool]:
        """Load ``key`` (one query), creating it if absent and ``create``: what was loaded,
        and whether it was created."""
        with self._reading("open", via_run=True) as conn:
            loaded = self._load_on(conn, key, writing=True)
            if loaded is not None:
                return loaded, False
            if not create:
                raise SessionNotFoundError(key)
            header = self._new_header(key, metadata)
            sealed = self._privacy.seal_new_header(header)
            line, h = encode_line(sealed, ZERO_HASH, self._hash_key)
            state = initial_state(msgspec.structs.replace(header, h=h, sealing=sealed.sealing))
            if self._create(conn, key, state, line):
                return Loaded(state, len(line), None), True
            loaded = self._load_on(conn, key, writing=True)  # another process created it first
            if loaded is None:  # pragma: no cover - created and deleted in between
                raise SessionNotFoundError(key)
            return loaded, False

    def _session(
        self, key: str, *, create: bool, metadata: Mapping[str, Any] | None
    ) -> SessionWriter:
        with self._mutex:
            if self._closed:
                raise StoreClosedError("the store is closed")
            writer = self._pg_writers.get(key)
            if writer is None or writer.closed or self._writers.get(key) is not writer.log:
                loaded, created = self._open_state(key, create=create, metadata=metadata)
                io = _PgIO(self, key, loaded.size)
                io.catalog_read(loaded)
                writer = PgSessionWriter(
                    store=self,
                    key=key,
                    io=io,
                    state=loaded.state,
                    durability=self.durability,
                    hash_key=self._hash_key,
                    token_counter=self.token_counter,
                )
                self._privacy.arm_writer(writer)
                # The store closes (and after fork resets) the log; writers share it.
                self._pg_writers[key] = writer
                self._writers[key] = writer.log
                self._reports[key] = OpenReport(key, created=created)
            writer.log.handles += 1
            # Each call gets its own writer (closing it leaves the others open); appends go
            # through the session's one group-commit writer.
            return SessionWriter(writer.log, on_close=self._forget, submit=writer._submit)

    # -- where a database does better than the generic code ----------------------------------

    def state(self, key: str) -> SessionState:
        """The current folded state of ``key`` (what every writer has committed)."""
        key = check_key(key)
        writer = self._pg_writers.get(key)
        if writer is not None and not writer.closed:
            writer.refresh()
            return writer.state
        with self._reading("read", via_run=True) as conn:
            state = self._load_state(conn, key)
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
        if decoded.segment > 1:
            # Rows are keyed and ordered by seq, which a segment header shares with the event
            # before it: refuse rather than store a log that would not read back the same.
            raise InvalidEventError(
                f"{self._describe(key)}: a log in {decoded.segment} segments cannot be imported "
                "into the PostgreSQL store (nothing was written)"
            )
        kb = key.encode()
        with self._connection("import") as conn:
            conn.execute(self._sql.lock_only, (kb,))
            existing = self._read_on(conn, kb)
            if existing == data:
                return "unchanged"
            if existing is not None and not data.startswith(existing):
                return "clash"
            lines = data.splitlines(keepends=True)
            if existing is None:
                header = decoded.header
                self._create(conn, key, initial_state(header), lines[0])
                for reason, line, offset, blob in rejected:
                    conn.execute(self._sql.quarantine, (kb, reason, line, offset, blob))
                start, pos = 1, len(lines[0])
            else:
                start, pos = existing.count(b"\n"), len(existing)
            if lines[start:]:
                state = fold(decoded.header, decoded.events)
                self._write_lines(conn, key, lines[start:], pos, state)
            return "extended" if existing is not None else "created"

    def cut(
        self, key: str, offset: int, *, reason: str, expect_length: int | None = None
    ) -> CutReport | None:
        """Move the rows from byte ``offset`` on into quarantine (see :meth:`BaseStore.cut`)."""
        key = check_key(key)
        kb = key.encode()
        self._close_writer(key)
        with self._connection("cut") as conn:
            if conn.execute(self._sql.lock_only, (kb,)).fetchone() is None:
                raise SessionNotFoundError(key)
            data = self._read_on(conn, kb) or b""
            if expect_length is not None and len(data) != expect_length:
                return None
            if offset <= 0 or offset > len(data) or data[offset - 1 : offset] != b"\n":
                raise InvalidEventError(f"offset {offset} is not a line boundary after the header")
            line = data.count(b"\n", 0, offset) + 1
            if offset == len(data):
                return CutReport(key, offset, 0, line, None)
            conn.execute(self._sql.quarantine, (kb, reason, line, offset, data[offset:]))
            conn.execute(self._sql.cut, (kb, offset))
            decoded = self._decode(key, data[:offset])
            assert decoded.header is not None
            state = fold(decoded.header, decoded.events)
            conn.execute(self._sql.drop_snapshot, {"k": kb})
            self._write_lines(conn, key, [], offset, state)
        return CutReport(key, offset, len(data) - offset, line, f"quarantine table, {key!r}")

    # -- PostgreSQL extras -------------------------------------------------------------------

    def query_catalog_records(self, filter: Any) -> list[CatalogRecord]:
        """The catalog rows ``filter`` selects (a ``projections.CatalogFilter``): one query.

        ``projections.list_sessions`` calls this and turns the records into its rows.
        """
        query, params = catalog_query(self.schema, filter)
        with self._reading("list", via_run=True) as conn:
            rows = run(conn, query, params, binary=True).fetchall()
        return catalog_records(rows)

    def ensure_schema(self) -> None:
        """Create or migrate the schema now (otherwise the store's first statement does, in
        the same round trip when it can: a new store object sends nothing but the connect).

        Raises:
            SchemaVersionError: the database's schema is newer than this library (nothing
                was changed).
        """
        self._db.ensure_checked()

    def committed(self, key: str, event_id: str) -> int | None:
        """The seq ``event_id`` was committed at in ``key``, or None (after an unknown outcome)."""
        kb = check_key(key).encode()
        with self._reading("read", via_run=True) as conn:
            row = run(conn, self._sql.find_id, (kb, event_id.encode())).fetchone()
        return None if row is None else int(row[0])

    def follow_waker(self, key: str) -> NotifyWaker:
        """A waker for ``replay.follow``: returns when an append to ``key`` commits (NOTIFY)."""
        key = check_key(key)
        self._db.ensure_checked()  # the waker's connection is its own: the schema first
        return NotifyWaker(self.target, self._sql, key)

    @contextlib.contextmanager
    def batch(self, key: str) -> Iterator[SessionWriter]:
        """Group the appends made in the block into one transaction (one lock, one commit).

        Yields the session's writer; other threads' appends to it wait until the block ends.
        If the block raises, nothing of it is written.
        """
        writer = self.session(key)
        with writer._lock, writer._transaction():
            yield writer

    def close(self) -> None:
        """Close every writer, then the connections."""
        self._db.closed = True  # lend nothing more from now on, as the store refuses writers
        try:
            super().close()
        finally:
            self._db.close()

"""The PostgreSQL store's backend: a session's log is its rows, read and removed by statements.

The store (:class:`~eventlog._postgres.PostgresStore`) owns the group commit; this backend runs
the few statements that differ from the other backends (read, list, remove, quarantine, the
trash table, the snapshot and catalog tables) on the store's connections
(:class:`~eventlog._pg_conn.PgConnections`), and knows nothing else of the store: what it needs
from it (an I/O over a session's rows, its index records, importing a log back from the trash)
it is given.
Each is one statement on an autocommit connection, or one transaction where several must hold
together (remove, trash).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._backend import Backend, KeyScan, LogStat, TrashBin, TrashEntry
from ._errors import InvalidEventError, SessionNotFoundError
from ._indexsnap import INDEX_MAGIC, IndexMeta, is_index_snapshot, split_window
from ._pg_common import Statements, run, tail_bytes
from ._pg_conn import PgConnections
from ._snapshot import Snapshot, snapshot_seq
from ._writer import SessionIO

if TYPE_CHECKING:
    import psycopg

    from ._pg_index import PgIndexFiles


def read_lines(
    conn: psycopg.Connection[tuple[Any, ...]], sql: Statements, kb: bytes
) -> bytes | None:
    """Every line of the session keyed ``kb``, in seq order (None: no such session)."""
    rows = conn.execute(sql.lines, (kb,), binary=True).fetchall()
    return b"".join(r[0] for r in rows) if rows else None


class _Raw:
    __slots__ = ("created", "data", "io")

    def __init__(self, io: SessionIO, created: bool) -> None:
        self.io = io
        self.data = b""
        self.created = created


class PgBackend(Backend):
    """The statements of one :class:`PostgresStore` on its connections.

    ``make_io(key)`` gives an I/O over a session's rows (the store's writers use it),
    ``make_index(key)`` its index record files, and ``import_log(key, data)`` installs a whole
    log as ``store.import_bytes`` does (a trashed session comes back through it).
    """

    def __init__(
        self,
        db: PgConnections,
        *,
        make_io: Callable[[str], SessionIO],
        make_index: Callable[[str], PgIndexFiles],
        import_log: Callable[[str, bytes], str],
    ) -> None:
        self._db = db
        self._make_io = make_io
        self._make_index = make_index
        self._trash = _PgTrash(db, import_log)
        self._catalog: _PgCatalog | None = None

    def describe(self, key: str) -> str:
        """The session and the database."""
        return _describe(self._db, key)

    def open_raw(
        self, key: str, create: bool, snap: Snapshot | IndexMeta | None = None
    ) -> _Raw | None:
        """An I/O over the session's rows (the store's own open reads them in one query)."""
        if not create and not self.exists(key):
            return None
        return _Raw(self._make_io(key), create)

    def read(self, key: str) -> bytes | None:
        """Every line, in seq order."""
        db = self._db
        with db.reading("read") as conn:
            return read_lines(conn, db.sql, key.encode())

    def read_tail(self, key: str, offset: int) -> tuple[int, bytes]:
        """The log's length and its bytes from ``offset`` on (only the rows from there)."""
        db = self._db
        with db.reading("read", via_run=True) as conn:
            rows = run(conn, db.sql.tail, {"k": key.encode(), "o": offset}, binary=True).fetchall()
        if not rows:
            raise SessionNotFoundError(key)
        return tail_bytes(rows, offset)

    def exists(self, key: str) -> bool:
        """One indexed lookup of the session row."""
        db = self._db
        with db.reading("read", via_run=True) as conn:
            return run(conn, db.sql.exists, (key.encode(),)).fetchone() is not None

    def quarantine(self, key: str, data: bytes, *, reason: str, line: int, offset: int) -> str:
        """A row in the quarantine table."""
        db = self._db
        with db.reading("quarantine") as conn:
            conn.execute(db.sql.quarantine, (key.encode(), reason, line, offset, data))
        return f"quarantine table, {self.describe(key)}"

    def list_keys(self) -> list[str]:
        """Every session row's key."""
        db = self._db
        with db.reading("list") as conn:
            return [bytes(r[0]).decode() for r in conn.execute(db.sql.keys, binary=True)]

    def remove(self, key: str) -> bool:
        """The session's rows and quarantine, in one transaction under the row lock."""
        db, kb = self._db, key.encode()
        with db.connection("delete") as conn:
            conn.execute(db.sql.unquarantine, (kb,))
            if conn.execute(db.sql.lock_only, (kb,)).fetchone() is None:
                return False
            conn.execute(db.sql.delete_events, (kb,))
            return bool(conn.execute(db.sql.delete, (kb,)).rowcount > 0)

    def trash(self) -> _PgTrash:
        """The trash table."""
        return self._trash

    def snapshot_bytes(self, key: str) -> bytes | None:
        """The session row's snapshot column."""
        db = self._db
        with db.reading("read snapshot") as conn:
            row = conn.execute(db.sql.snapshot, (key.encode(),), binary=True).fetchone()
        return None if row is None else bytes(row[0])

    def put_snapshot(self, key: str, data: bytes | None) -> None:
        """Store (or remove) the snapshot, with the seq it was taken at."""
        db = self._db
        with db.reading("write snapshot") as conn:
            if data is None:
                conn.execute(db.sql.drop_snapshot, {"k": key.encode()})
            elif is_index_snapshot(data):  # its records were written first
                seq = snapshot_seq(split_window(data)[0], INDEX_MAGIC)
                conn.execute(db.sql.put_snapshot, (data, seq, key.encode()))
            else:
                args = {"k": key.encode(), "d": data, "seq": snapshot_seq(data)}
                conn.execute(db.sql.put_snapshot_only, args)

    def index_files(self, key: str) -> PgIndexFiles:
        """The session's record files, rows of ``snapshot_records`` (read when first used)."""
        return self._make_index(key)

    def catalog_source(self) -> _PgCatalog:
        """The session rows as the generic catalog reads them (made on first use: it refers
        back to this backend, a cycle a store that never reads it need not leave behind)."""
        if self._catalog is None:
            self._catalog = _PgCatalog(self)
        return self._catalog


class _PgCatalog(KeyScan):
    def __init__(self, backend: PgBackend) -> None:
        super().__init__(backend)
        self._db = backend._db

    def scan_logs(self) -> list[LogStat]:
        """Every session's log length (one query; ``ino`` changes when a key is recreated)."""
        db = self._db
        with db.reading("list") as conn:
            rows = conn.execute(db.sql.scan, binary=True).fetchall()
        return [
            LogStat(
                bytes(r[0]).decode(),
                int(r[1]),
                int.from_bytes(str(r[2]).encode()[:16].ljust(8, b"\0")[:8], "big") >> 1,
                int(r[3].timestamp() * 1e9),
            )
            for r in rows
        ]

    def log_names(self) -> list[str]:
        """Every session's key."""
        return [st.name for st in self.scan_logs()]

    def catalog_bytes(self) -> bytes | None:
        """The stored catalog blob (the generic catalog's cache)."""
        db = self._db
        with db.reading("read catalog") as conn:
            row = conn.execute(db.sql.catalog, binary=True).fetchone()
        return None if row is None else bytes(row[0])

    def put_catalog(self, data: bytes) -> None:
        """Store the catalog blob."""
        db = self._db
        with db.reading("write catalog") as conn:
            conn.execute(db.sql.put_catalog, (data,))


def _describe(db: PgConnections, key: str) -> str:
    return f"session {key!r} in {db.where}"


class _PgTrash(TrashBin):
    # Holds the connections, not the backend (which holds it): no cycle to collect.
    def __init__(self, db: PgConnections, import_log: Callable[[str, bytes], str]) -> None:
        super().__init__()
        self._db = db
        self._import = import_log

    def put(self, key: str, entry_id: str, reason: str, when: datetime) -> str:
        """Copy the log into the trash table and remove the session, in one transaction."""
        db, kb = self._db, key.encode()
        with db.connection("trash") as conn:  # one transaction: in the store or in the trash
            conn.execute(db.sql.lock_only, (kb,))
            data = b"".join(bytes(r[0]) for r in conn.execute(db.sql.lines, (kb,), binary=True))
            conn.execute(db.sql.trash, (kb, entry_id, when, reason, data))
            conn.execute(db.sql.unquarantine, (kb,))
            conn.execute(db.sql.delete_events, (kb,))
            conn.execute(db.sql.delete, (kb,))
        return f"{_describe(db, key)} (trash {entry_id})"

    def take_back(self, entry: TrashEntry) -> None:
        """Import the trashed log under its key, then drop the entry."""
        db = self._db
        with db.connection("restore") as conn:
            row = conn.execute(db.sql.trash_data, (entry.id,), binary=True).fetchone()
        if row is None:
            raise SessionNotFoundError(f"trash entry {entry.id}")
        if self._import(entry.key, bytes(row[0])) == "clash":
            raise InvalidEventError(f"cannot restore {entry.key!r}: a session with that key exists")
        self.purge(entry)

    def purge(self, entry: TrashEntry) -> None:
        """Drop the entry's row."""
        db = self._db
        with db.reading("purge") as conn:
            conn.execute(db.sql.trash_drop, (entry.id,))

    def entries(self) -> list[TrashEntry]:
        """Every row of the trash table."""
        db = self._db
        with db.reading("trash") as conn:
            rows = conn.execute(db.sql.trash_list, binary=True).fetchall()
        return [
            TrashEntry(str(r[0]), bytes(r[1]).decode(), r[2], str(r[3]), f"{db.where} trash")
            for r in rows
        ]

"""The PostgreSQL schema of :class:`~eventlog.PostgresStore`, as a versioned list of migrations.

Invariants:
- Everything lives in one schema (default ``sessionlog``); its ``schema_version`` table records
  each migration applied. Migrations only ever get appended to :data:`MIGRATIONS`; a released
  migration never changes.
- :func:`migrate` runs under a transaction-scoped advisory lock, so processes starting together
  apply each migration once. A database at a newer version than this code knows raises
  :class:`SchemaVersionError` and changes nothing.
- Every table is keyed by the session key first, so one distribution column (the session) shards
  all of them together (Citus: ``create_distributed_table(..., 'key')`` on each, co-located).
- ``events`` holds each log line (header at seq 0) exactly as the file store writes it, so the
  concatenation of a session's lines in seq order *is* its JSONL log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._errors import EventLogError

if TYPE_CHECKING:
    import psycopg

#: (version, what it does, SQL statements with ``{s}`` standing for the schema identifier).
MIGRATIONS: Final[tuple[tuple[int, str, tuple[str, ...]], ...]] = (
    (
        1,
        "sessions (with catalog columns), events, snapshots, quarantine",
        (
            # Keys, ids and key parts are bytea (UTF-8): exact for any text, NUL included, and
            # ordered by code point like Python's sort.
            """CREATE TABLE {s}.sessions (
                key bytea PRIMARY KEY,
                session_id text NOT NULL,
                seq bigint NOT NULL,
                head text NOT NULL,
                size bigint NOT NULL,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL,
                agent bytea,
                channel bytea,
                peer bytea,
                title text,
                metadata bytea NOT NULL,
                preview bytea NOT NULL,
                messages integer NOT NULL DEFAULT 0,
                live_tokens bigint NOT NULL DEFAULT 0,
                total_messages bigint NOT NULL DEFAULT 0,
                total_tokens bigint NOT NULL DEFAULT 0,
                last_consolidated integer NOT NULL DEFAULT 0,
                summary text,
                lifecycle text NOT NULL DEFAULT 'active',
                end_reason text
            )""",
            "CREATE INDEX sessions_updated ON {s}.sessions (updated_at DESC, key)",
            "CREATE INDEX sessions_created ON {s}.sessions (created_at)",
            "CREATE INDEX sessions_agent ON {s}.sessions (agent, updated_at DESC)",
            "CREATE INDEX sessions_channel ON {s}.sessions (channel, updated_at DESC)",
            "CREATE INDEX sessions_peer ON {s}.sessions (peer, updated_at DESC)",
            "CREATE INDEX sessions_lifecycle ON {s}.sessions (lifecycle, updated_at DESC)",
            # pos: the byte offset of the line in the session's log (the header is at 0).
            """CREATE TABLE {s}.events (
                key bytea NOT NULL REFERENCES {s}.sessions (key) ON DELETE CASCADE,
                seq bigint NOT NULL,
                pos bigint NOT NULL,
                id bytea NOT NULL,
                line bytea NOT NULL,
                PRIMARY KEY (key, seq),
                UNIQUE (key, id)
            )""",
            """CREATE TABLE {s}.snapshots (
                key bytea PRIMARY KEY REFERENCES {s}.sessions (key) ON DELETE CASCADE,
                data bytea NOT NULL,
                written_at timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE {s}.catalog_blob (
                id integer PRIMARY KEY CHECK (id = 1),
                data bytea NOT NULL
            )""",
            """CREATE TABLE {s}.quarantine (
                key bytea NOT NULL,
                at timestamptz NOT NULL DEFAULT now(),
                reason text NOT NULL,
                line integer NOT NULL,
                byte_offset bigint NOT NULL,
                data bytea NOT NULL
            )""",
            "CREATE INDEX quarantine_key ON {s}.quarantine (key)",
        ),
    ),
    (
        2,
        "snapshots stored uncompressed (opening reads them whole; pglz costs more than it saves)",
        ("ALTER TABLE {s}.snapshots ALTER COLUMN data SET STORAGE EXTERNAL",),
    ),
    (
        3,
        "trash: sessions removed by retention cleanup, restorable until purged",
        (
            """CREATE TABLE IF NOT EXISTS {s}.trash (
                key bytea NOT NULL,
                id text NOT NULL,
                deleted_at timestamptz NOT NULL,
                reason text NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (key, id)
            )""",
            "CREATE INDEX IF NOT EXISTS trash_id ON {s}.trash (id)",
        ),
    ),
    (
        4,
        "conversations: where the current one began and the ended ones (NULL: fold to know)",
        ("ALTER TABLE {s}.sessions ADD COLUMN IF NOT EXISTS conversations bytea",),
    ),
)

#: The newest schema version this code knows.
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]


class SchemaVersionError(EventLogError):
    """The database schema is newer than this code knows: upgrade the library, nothing changed."""

    def __init__(self, where: str, found: int, known: int) -> None:
        super().__init__(
            f"{where}: schema version {found} is newer than this library knows ({known}); "
            "upgrade sessionlog before using this database (nothing was changed)"
        )
        self.where = where
        self.found = found
        self.known = known


def schema_version(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> int:
    """The schema version the database is at (0: no schema yet)."""
    from psycopg import sql

    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".schema_version',)
    ).fetchone()
    if row is None or not row[0]:
        return 0
    got = conn.execute(
        sql.SQL("SELECT max(version) FROM {}.schema_version").format(sql.Identifier(schema))
    ).fetchone()
    return int(got[0]) if got is not None and got[0] is not None else 0


def migrate(conn: psycopg.Connection[tuple[Any, ...]], schema: str, where: str) -> int:
    """Bring ``schema`` up to :data:`SCHEMA_VERSION` in one transaction; return the version.

    Raises:
        SchemaVersionError: the database is at a newer version than this code knows.
    """
    from psycopg import sql

    ident = sql.Identifier(schema)
    with conn.transaction():
        # Serialise concurrent start-ups on this schema name.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sessionlog:{schema}",))
        version = schema_version(conn, schema)
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(where, version, SCHEMA_VERSION)
        if version == SCHEMA_VERSION:
            return version
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_version ("
                "version integer PRIMARY KEY, description text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        for number, description, statements in MIGRATIONS:
            if number <= version:
                continue
            script = sql.SQL(";\n").join(sql.SQL(st).format(s=ident) for st in statements)
            conn.execute(script)  # one round trip per migration
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.schema_version (version, description) VALUES (%s, %s)"
                ).format(ident),
                (number, description),
            )
        return SCHEMA_VERSION

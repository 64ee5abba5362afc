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

#: One append (or group of appends) in one statement: compare-and-set on (seq, head) of the
#: session row, insert the lines, update the catalog columns, NOTIFY when someone follows. On a
#: mismatch nothing is written and the caller gets what others committed after its seq (status
#: 1: current seq, head and size, and those lines concatenated); status 2: no such session.
#: ``p_full`` false leaves title, metadata, preview, summary and conversations as they are.
APPEND_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION {s}.append_events(
    p_key bytea, p_seq bigint, p_head text,
    p_seqs bigint[], p_pos bigint[], p_ids bytea[], p_lines bytea[],
    p_new_head text, p_size bigint, p_updated timestamptz,
    p_messages integer, p_live bigint, p_total_messages bigint, p_total_tokens bigint,
    p_consolidated integer, p_lifecycle text, p_end_reason text,
    p_full boolean, p_title text, p_metadata bytea, p_preview bytea, p_summary text,
    p_conversations bytea, p_notify text,
    OUT status integer, OUT cur_seq bigint, OUT cur_head text, OUT cur_size bigint,
    OUT tail bytea
) LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE {s}.sessions SET
        seq = p_seqs[array_upper(p_seqs, 1)], head = p_new_head, size = p_size,
        updated_at = p_updated, messages = p_messages, live_tokens = p_live,
        total_messages = p_total_messages, total_tokens = p_total_tokens,
        last_consolidated = p_consolidated, lifecycle = p_lifecycle, end_reason = p_end_reason,
        title = CASE WHEN p_full THEN p_title ELSE title END,
        metadata = CASE WHEN p_full THEN p_metadata ELSE metadata END,
        preview = CASE WHEN p_full THEN p_preview ELSE preview END,
        summary = CASE WHEN p_full THEN p_summary ELSE summary END,
        conversations = CASE WHEN p_full THEN p_conversations ELSE conversations END
    WHERE key = p_key AND seq = p_seq AND head = p_head;
    IF FOUND THEN
        INSERT INTO {s}.events (key, seq, pos, id, line)
            SELECT p_key, u.* FROM unnest(p_seqs, p_pos, p_ids, p_lines) AS u;
        IF p_notify IS NOT NULL AND EXISTS (
            SELECT 1 FROM {s}.followers f WHERE f.key = p_key OR f.key = '\\x'::bytea
        ) THEN
            PERFORM pg_notify({channel}, p_notify);
        END IF;
        status := 0;
        RETURN;
    END IF;
    SELECT s.seq, s.head, s.size INTO cur_seq, cur_head, cur_size
        FROM {s}.sessions s WHERE s.key = p_key;
    IF NOT FOUND THEN
        status := 2;
        RETURN;
    END IF;
    status := 1;
    SELECT string_agg(e.line, ''::bytea ORDER BY e.seq) INTO tail
        FROM {s}.events e WHERE e.key = p_key AND e.seq > p_seq AND e.seq <= cur_seq;
END
$fn$"""

#: The common append in one statement: one message event, only the catalog columns a message
#: changes (title, metadata, preview, summary and conversations stay), no arrays. Same answers
#: as ``append_events``. About a quarter cheaper on the server than ``append_events`` with
#: one-element arrays and the unchanged wide columns sent along (measured in tools/bench).
APPEND_EVENT_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION {s}.append_event(
    p_key bytea, p_seq bigint, p_head text,
    p_new_seq bigint, p_pos bigint, p_id bytea, p_line bytea,
    p_new_head text, p_size bigint, p_updated timestamptz,
    p_messages integer, p_live bigint, p_total_messages bigint, p_total_tokens bigint,
    p_consolidated integer, p_lifecycle text, p_end_reason text, p_notify text,
    OUT status integer, OUT cur_seq bigint, OUT cur_head text, OUT cur_size bigint,
    OUT tail bytea
) LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE {s}.sessions SET
        seq = p_new_seq, head = p_new_head, size = p_size,
        updated_at = p_updated, messages = p_messages, live_tokens = p_live,
        total_messages = p_total_messages, total_tokens = p_total_tokens,
        last_consolidated = p_consolidated, lifecycle = p_lifecycle, end_reason = p_end_reason
    WHERE key = p_key AND seq = p_seq AND head = p_head;
    IF FOUND THEN
        INSERT INTO {s}.events (key, seq, pos, id, line)
            VALUES (p_key, p_new_seq, p_pos, p_id, p_line);
        IF p_notify IS NOT NULL AND EXISTS (
            SELECT 1 FROM {s}.followers f WHERE f.key = p_key OR f.key = '\\x'::bytea
        ) THEN
            PERFORM pg_notify({channel}, p_notify);
        END IF;
        status := 0;
        RETURN;
    END IF;
    SELECT s.seq, s.head, s.size INTO cur_seq, cur_head, cur_size
        FROM {s}.sessions s WHERE s.key = p_key;
    IF NOT FOUND THEN
        status := 2;
        RETURN;
    END IF;
    status := 1;
    SELECT string_agg(e.line, ''::bytea ORDER BY e.seq) INTO tail
        FROM {s}.events e WHERE e.key = p_key AND e.seq > p_seq AND e.seq <= cur_seq;
END
$fn$"""

#: The trigger function of migration 8: drops every ``sessionledger_schema_v<N>()`` of the
#: schema and creates the one of ``max(version)`` (none when the table is empty). Only a
#: function of exactly that name and no arguments is a marker: any other function whose name
#: starts the same (one taking arguments, a procedure) is left alone.
SCHEMA_MARKER_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION {s}.schema_marker() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    f record;
    v integer;
BEGIN
    FOR f IN SELECT p.proname FROM pg_proc p
            WHERE p.pronamespace = (SELECT c.relnamespace FROM pg_class c WHERE c.oid = TG_RELID)
            AND p.proname ~ '^sessionledger_schema_v-?[0-9]+$'
            AND p.prokind = 'f' AND p.pronargs = 0 LOOP
        EXECUTE format('DROP FUNCTION %I.%I()', TG_TABLE_SCHEMA, f.proname);
    END LOOP;
    EXECUTE format('SELECT max(version) FROM %I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME) INTO v;
    IF v IS NOT NULL THEN
        EXECUTE format(
            'CREATE FUNCTION %I.%I() RETURNS integer LANGUAGE sql IMMUTABLE AS %L',
            TG_TABLE_SCHEMA, 'sessionledger_schema_v' || v, 'SELECT ' || v);
    END IF;
    RETURN NULL;
END
$fn$"""

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
    (
        5,
        "appends in one round trip (append_events), followers, snapshot seq, events unchained "
        "from sessions by a foreign key",
        (
            # The foreign key's trigger cost every append a row lookup; deletes remove the
            # events themselves, under the session row's lock (see Statements.delete_events).
            "ALTER TABLE {s}.events DROP CONSTRAINT IF EXISTS events_key_fkey",
            # Who follows a session (key) or the whole store (empty key): appends NOTIFY only
            # when a row here names them. A row left by a dead follower costs notifications,
            # never an event; the next follower to register removes it.
            """CREATE TABLE IF NOT EXISTS {s}.followers (
                key bytea NOT NULL,
                pid integer NOT NULL,
                since timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (key, pid)
            )""",
            # The seq a snapshot was taken at, so opening reads snapshot and tail in one query.
            "ALTER TABLE {s}.snapshots ADD COLUMN IF NOT EXISTS seq bigint",
            APPEND_FUNCTION,
        ),
    ),
    (
        6,
        "append_event: the common append (one message) without arrays or unchanged columns",
        (APPEND_EVENT_FUNCTION,),
    ),
    (
        7,
        "snapshot_records: an index snapshot's message and id records (opening reads no bodies)",
        (
            # One row per record file ('index': 64 bytes per message event, 'ids': 16 per
            # event; see eventlog/_indexsnap.py), written before the snapshot that covers them,
            # as the file store writes its .index and .ids files. Derived: losing them costs
            # a slower open, never an event.
            """CREATE TABLE IF NOT EXISTS {s}.snapshot_records (
                key bytea NOT NULL REFERENCES {s}.sessions (key) ON DELETE CASCADE,
                name text NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (key, name)
            )""",
            "ALTER TABLE {s}.snapshot_records ALTER COLUMN data SET STORAGE EXTERNAL",
        ),
    ),
    (
        8,
        "schema_marker: a function named for the schema version, kept by a trigger",
        (
            # Any write to schema_version (a migration's row, or a hand-made edit) leaves
            # exactly one function sessionledger_schema_v<max(version)>() in the schema. A
            # store's first statement names its own version's function in a CTE, so on any
            # other version it fails at parse time (undefined function) instead of running:
            # the check costs a catalog lookup, not reading a table on a fresh backend.
            SCHEMA_MARKER_FUNCTION,
            "DROP TRIGGER IF EXISTS schema_marker ON {s}.schema_version",
            "CREATE TRIGGER schema_marker AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
            "ON {s}.schema_version FOR EACH STATEMENT EXECUTE FUNCTION {s}.schema_marker()",
            # Also under session_replication_role = replica (a logical replication subscriber,
            # a bulk copy skipping foreign keys), where ordinary triggers do not fire.
            "ALTER TABLE {s}.schema_version ENABLE ALWAYS TRIGGER schema_marker",
        ),
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


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's appends: at most 63 bytes of UTF-8, cut on a
    character boundary (pg_notify refuses a longer name; a cut by characters let one through)."""
    return f"sessionlog_{schema}".encode()[:63].decode(errors="ignore")


def schema_version(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> int:
    """The schema version the database is at (0: no schema yet)."""
    from psycopg import sql

    quoted = '"' + schema.replace('"', '""') + '"'  # a name with a double quote in it too
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{quoted}.schema_version",)
    ).fetchone()
    if row is None or not row[0]:
        return 0
    got = conn.execute(
        sql.SQL("SELECT max(version) FROM {}.schema_version").format(sql.Identifier(schema))
    ).fetchone()
    return int(got[0]) if got is not None and got[0] is not None else 0


def is_current(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> bool:
    """Whether ``schema`` is at :data:`SCHEMA_VERSION` (one query on an autocommit
    connection; anything else, a missing schema included, says False and :func:`migrate`
    decides)."""
    import psycopg
    from psycopg import sql

    try:
        row = conn.execute(
            sql.SQL("SELECT max(version) FROM {}.schema_version").format(sql.Identifier(schema))
        ).fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == SCHEMA_VERSION


def restore_marker(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    """A current ``schema`` failed the marker check: if its marker function is missing (dropped
    by hand), have migration 8's trigger make it again (an update of no row fires it), under
    the migrations' lock, so that new stores check in their first statement again. Best
    effort: a role that may not write ``schema_version`` leaves it missing (each new store's
    first statement then fails its check, and is run again after :func:`is_current`)."""
    import psycopg
    from psycopg import sql

    quoted = '"' + schema.replace('"', '""') + '"'
    marker = f"{quoted}.sessionledger_schema_v{SCHEMA_VERSION}()"
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sessionlog:{schema}",))
            row = conn.execute(
                sql.SQL(
                    "SELECT max(version) = {v} AND to_regprocedure(%s) IS NULL "
                    "FROM {s}.schema_version"
                ).format(v=sql.Literal(SCHEMA_VERSION), s=sql.Identifier(schema)),
                (marker,),
            ).fetchone()
            if row is not None and row[0]:
                conn.execute(
                    sql.SQL("UPDATE {}.schema_version SET version = version WHERE false").format(
                        sql.Identifier(schema)
                    )
                )
    except psycopg.OperationalError:
        raise
    except psycopg.Error:
        pass  # not allowed here (a reader's role): stores keep checking the slower way


def check_prefix(schema: str) -> bytes:
    """A CTE to put ahead of a store's first statement that makes it fail unless ``schema`` is
    at :data:`SCHEMA_VERSION`: it names the marker function of that version (migration 8), so
    on any other version, or with no schema yet, the statement fails at parse time (undefined
    function, or no such schema) and never runs; :func:`is_current` and :func:`migrate` then
    tell which it is. The CTE is never evaluated (nothing references it)."""
    from psycopg import sql

    return (
        sql.SQL("WITH sessionledger_schema_check AS (SELECT {s}.{f}()) ")
        .format(
            s=sql.Identifier(schema), f=sql.Identifier(f"sessionledger_schema_v{SCHEMA_VERSION}")
        )
        .as_bytes(None)
    )


def with_check(prefix: bytes, query: bytes) -> bytes:
    """``query`` with the check CTE of :func:`check_prefix` ahead of it (joined to the
    query's own ``WITH`` list when it has one)."""
    head = query[:15].upper()
    if head.startswith(b"WITH RECURSIVE "):
        return b"WITH RECURSIVE " + prefix[5:].rstrip() + b", " + query[15:]
    if head.startswith(b"WITH "):
        return prefix.rstrip() + b", " + query[5:]
    return prefix + query


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
            script = sql.SQL(";\n").join(
                sql.SQL(st).format(s=ident, channel=sql.Literal(channel_name(schema)))
                for st in statements
            )
            conn.execute(script)  # one round trip per migration
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.schema_version (version, description) VALUES (%s, %s)"
                ).format(ident),
                (number, description),
            )
        return SCHEMA_VERSION

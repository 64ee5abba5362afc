"""The PostgreSQL search index: PostgreSQL's own full text search, in the store's schema.

Invariants:
- ``search_marks`` holds how far each session is indexed, ``search_docs`` one row per message
  with its ``tsvector`` (configuration ``simple``: words as written, case folded, no stemming,
  like the SQLite index; accents are not folded) under a GIN index. Both are created on first
  use and are a projection: dropping them loses nothing.
- Index writers take one transaction-scoped advisory lock, and re-read each session's mark under
  it, so two processes catching up at once never index a message twice.
- Which sessions moved is one query joining ``sessions`` (the catalog table) with the marks.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from datetime import UTC
from typing import TYPE_CHECKING, Any, Final

from sessionledger.eventlog import BaseStore, PostgresStore, StorageError

from ._search import (
    RELEVANCE_WINDOW,
    FilterName,
    Mark,
    SearchHit,
    SearchQuery,
    Update,
    channel_of,
    decode_mark,
    encode_mark,
    filters,
    still_current,
)

if TYPE_CHECKING:
    import psycopg

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS {s}.search_marks (key bytea PRIMARY KEY, seq bigint NOT NULL, "
    "head text NOT NULL, mark bytea NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.search_docs (key bytea NOT NULL, seq bigint NOT NULL, "
    "conversation bigint NOT NULL, channel text, role text NOT NULL, ts timestamptz NOT NULL, "
    "body text NOT NULL, tsv tsvector NOT NULL, PRIMARY KEY (key, seq))",
    "CREATE INDEX IF NOT EXISTS search_docs_tsv ON {s}.search_docs USING gin (tsv)",
    # Newest first: a common word's newest matches are read in time order and the scan stops.
    "CREATE INDEX IF NOT EXISTS search_docs_ts ON {s}.search_docs (ts DESC)",
)
_FILTERS: Final[dict[FilterName, str]] = {
    "prefix": "key >= %s AND key < %s",
    "channel": "channel = %s",
    "role": "role = %s",
    "since": "ts >= %s",
    "until": "ts < %s",
}
#: Docs added after which a writer checks whether the planner's statistics need refreshing.
ANALYZE_AFTER: Final = 1_000


def _close(conn: psycopg.Connection[tuple[Any, ...]], pid: int) -> None:
    if pid == os.getpid():
        conn.close()


def _text(value: str) -> str:
    return value.replace("\x00", "\ufffd")  # PostgreSQL text cannot hold NUL


class PgBackend:
    """A search index in PostgreSQL full text search (see the module rules)."""

    def __init__(self, store: PostgresStore) -> None:
        # The store's schema first (created, migrated, or a newer one refused): a new store
        # object sends nothing but its connect, and this index keeps its tables in that
        # schema, on a connection of its own.
        store.ensure_schema()
        self._target = store.target
        self._schema = self._target.schema
        self._lock = threading.RLock()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._pid = 0
        self._ready = False
        #: Docs this object added since it last refreshed the planner's statistics.
        self._added = 0

    def _q(self, text: str) -> Any:
        from psycopg import sql

        return sql.SQL(text).format(s=sql.Identifier(self._schema))

    def _db(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._pid != os.getpid() or self._conn.closed:
            self._conn = self._target.connect()
            self._pid = os.getpid()
            self._ready = False
            # Closed with the store (see ``_search``); this is for a store never closed.
            weakref.finalize(self, _close, self._conn, self._pid)
        conn = self._conn
        if not self._ready:
            # Queries are prepared by psycopg after a few runs; a generic plan would be the
            # same for a word in every message and a word in none (one reads the newest rows
            # in time order, the other needs the GIN index): plan each search for its words.
            conn.execute("SET plan_cache_mode = force_custom_plan")
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))",
                    (f"sessionlog-search:{self._schema}",),
                )
                for statement in _SCHEMA:
                    conn.execute(self._q(statement))
            self._ready = True
        return conn

    def _fail(self, action: str, exc: Exception) -> StorageError:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                _close(self._conn, self._pid)
        self._conn, self._ready = None, False
        return StorageError(self._target.where, action, " ".join(str(exc).split()))

    def changed(self, store: BaseStore) -> tuple[list[str], list[str]]:
        with self._lock:
            try:
                conn = self._db()
                with conn.transaction():
                    moved = conn.execute(
                        self._q(
                            "SELECT s.key FROM {s}.sessions s LEFT JOIN {s}.search_marks m "
                            "ON m.key = s.key WHERE m.key IS NULL OR m.seq <> s.seq "
                            "OR m.head <> s.head"
                        )
                    ).fetchall()
                    gone = conn.execute(
                        self._q(
                            "SELECT m.key FROM {s}.search_marks m WHERE NOT EXISTS "
                            "(SELECT 1 FROM {s}.sessions s WHERE s.key = m.key)"
                        )
                    ).fetchall()
            except Exception as exc:
                raise self._fail("read the search index", exc) from exc
        return [bytes(r[0]).decode() for r in moved], [bytes(r[0]).decode() for r in gone]

    def mark(self, key: str) -> Mark | None:
        with self._lock:
            try:
                conn = self._db()
                with conn.transaction():
                    return self._mark(conn, key)
            except Exception as exc:
                raise self._fail("read the search index", exc) from exc

    def _mark(self, conn: psycopg.Connection[tuple[Any, ...]], key: str) -> Mark | None:
        row = conn.execute(
            self._q("SELECT mark FROM {s}.search_marks WHERE key = %s"), (key.encode(),)
        ).fetchone()
        return None if row is None else decode_mark(bytes(row[0]))

    def write(self, updates: list[Update]) -> None:
        if not updates:
            return
        with self._lock:
            try:
                conn = self._db()
                with conn.transaction():
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))",
                        (f"sessionlog-search:{self._schema}",),
                    )
                    current = still_current(updates, lambda key: self._mark(conn, key))
                    for key, _, after, docs, fresh in current:
                        kb = key.encode()
                        if fresh:
                            conn.execute(
                                self._q("DELETE FROM {s}.search_docs WHERE key = %s"), (kb,)
                            )
                        if docs:
                            conn.execute(
                                self._q(
                                    "INSERT INTO {s}.search_docs (key, seq, conversation, "
                                    "channel, role, ts, body, tsv) SELECT %s, d.seq, d.conv, %s, "
                                    "d.role, d.ts, d.body, to_tsvector('simple', d.body) FROM "
                                    "unnest(%s::bigint[], %s::bigint[], %s::text[], "
                                    "%s::timestamptz[], %s::text[]) AS d(seq, conv, role, ts, body) "
                                    "ON CONFLICT (key, seq) DO NOTHING"
                                ),
                                (
                                    kb,
                                    channel_of(key),
                                    [d.seq for d in docs],
                                    [d.conversation for d in docs],
                                    [_text(d.role) for d in docs],
                                    [d.ts for d in docs],
                                    [_text(d.text) for d in docs],
                                ),
                            )
                        conn.execute(
                            self._q(
                                "INSERT INTO {s}.search_marks (key, seq, head, mark) "
                                "VALUES (%s, %s, %s, %s) ON CONFLICT (key) DO UPDATE SET "
                                "seq = excluded.seq, head = excluded.head, mark = excluded.mark"
                            ),
                            (kb, after.seq, after.head, encode_mark(after)),
                        )
                        self._added += len(docs)
                if self._added >= ANALYZE_AFTER:
                    self._analyze(conn)
            except Exception as exc:
                raise self._fail("update the search index", exc) from exc

    def _analyze(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Refresh the planner's statistics once the docs added since are a tenth of the table:
        without them (a new index, a server without autovacuum) a common word is planned as a
        rare one and every match is read."""
        row = conn.execute(
            "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'search_docs'",
            (self._schema,),
        ).fetchone()
        if row is None or self._added >= max(ANALYZE_AFTER, float(row[0]) / 10):
            conn.execute(self._q("ANALYZE {s}.search_docs"))
            self._added = 0

    def forget(self, keys: list[str]) -> None:
        with self._lock:
            try:
                conn = self._db()
                with conn.transaction():
                    blobs = [k.encode() for k in keys]
                    conn.execute(
                        self._q("DELETE FROM {s}.search_docs WHERE key = ANY(%s)"), (blobs,)
                    )
                    conn.execute(
                        self._q("DELETE FROM {s}.search_marks WHERE key = ANY(%s)"), (blobs,)
                    )
            except Exception as exc:
                raise self._fail("update the search index", exc) from exc

    def query(self, query: SearchQuery) -> list[SearchHit]:
        where = ["tsv @@ q"]
        params: list[Any] = [" ".join(query.words)]
        for name, value in filters(query):
            where.append(_FILTERS[name])
            if isinstance(value, str) and name == "prefix":
                params += [value.encode(), value.encode() + b"\xff"]  # no UTF-8 byte is 0xff
            else:
                params.append(value)
        window = RELEVANCE_WINDOW if query.order == "relevance" else query.limit
        params += [window, query.limit, " ".join(query.words)]
        # Three steps, so each costly function runs on as few rows as it must:
        # 1. the newest ``window`` matches, narrow (no body): an index scan in time order that
        #    stops at the window for a common word, the GIN index for a rare one;
        # 2. ts_rank on those only (declared cheap, the planner would otherwise run it on every
        #    match before the sort), best ``limit`` kept;
        # 3. the body and ts_headline for those ``limit`` rows only (by primary key).
        sql = (
            "WITH m AS MATERIALIZED (SELECT key, seq, ts, tsv, q "
            "FROM {s}.search_docs, plainto_tsquery('simple', %s) AS q WHERE "
            + " AND ".join(where)
            + " ORDER BY ts DESC, key, seq LIMIT %s), "
            "top AS (SELECT key, seq, ts, ts_rank(tsv, q) AS score FROM m ORDER BY "
            + ("score DESC, ts DESC" if query.order == "relevance" else "ts DESC")
            + ", key, seq LIMIT %s) "
            "SELECT t.key, d.conversation, t.seq, d.role, t.ts, ts_headline('simple', d.body, "
            "plainto_tsquery('simple', %s), 'StartSel=[, StopSel=], MaxWords=24, MinWords=8, "
            "MaxFragments=1, FragmentDelimiter=\u2026'), t.score "
            "FROM top t JOIN {s}.search_docs d ON d.key = t.key AND d.seq = t.seq ORDER BY "
            + ("t.score DESC, t.ts DESC" if query.order == "relevance" else "t.ts DESC")
            + ", t.key, t.seq"
        )
        with self._lock:
            try:
                conn = self._db()
                with conn.transaction():
                    rows = conn.execute(self._q(sql), params).fetchall()
            except Exception as exc:
                raise self._fail("search", exc) from exc
        return [
            SearchHit(
                key=bytes(r[0]).decode(),
                conversation=int(r[1]),
                seq=int(r[2]),
                role=str(r[3]),
                ts=r[4].astimezone(UTC),
                snippet=str(r[5]),
                score=float(r[6]),
            )
            for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    _close(self._conn, self._pid)
            self._conn, self._ready = None, False

    def drop(self) -> None:
        with self._lock:
            try:
                conn = self._db()
                with conn.transaction():
                    conn.execute(self._q("DROP TABLE IF EXISTS {s}.search_docs"))
                    conn.execute(self._q("DROP TABLE IF EXISTS {s}.search_marks"))
                conn.close()
            except Exception as exc:
                raise self._fail("delete the search index", exc) from exc
            self._conn, self._ready = None, False

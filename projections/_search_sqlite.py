"""The embedded search index: SQLite FTS5 (standard library), one file beside the logs.

Invariants:
- ``marks`` holds how far each session is indexed; ``docs`` one row per message (key, channel,
  conversation, seq, role, time in microseconds); ``fts`` (FTS5, same rowid) its text. All three
  change in one transaction, under SQLite's write lock, so two processes catching up at once
  never index a message twice: each re-reads a session's mark inside the transaction.
- The file is ``.search.sqlite3`` in a file store's directory (a name no log can have), never
  followed if it is a symlink or not a regular file; a memory store keeps it in memory.
- A connection is not carried across ``fork()``; a file replaced or deleted by another process
  is reopened.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from sessionledger.eventlog import BaseStore, StorageError

from ._catalog import catalog_rows
from ._search import (
    RELEVANCE_WINDOW,
    Doc,
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

FILE_NAME: Final = ".search.sqlite3"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS marks (key TEXT PRIMARY KEY, mark BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS docs (id INTEGER PRIMARY KEY, key TEXT NOT NULL, channel TEXT, "
    "conversation INTEGER NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL, "
    "ts INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS docs_key ON docs (key, seq)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(text, "
    "tokenize='unicode61 remove_diacritics 2')",
)
_FILTERS: Final[dict[FilterName, str]] = {
    "prefix": "substr(d.key, 1, ?) = ?",
    "channel": "d.channel = ?",
    "role": "d.role = ?",
    "since": "d.ts >= ?",
    "until": "d.ts < ?",
}


def _doc_time(item: tuple[str, Doc]) -> datetime:
    return item[1].ts


def _micros(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


class SqliteBackend:
    """A search index in SQLite FTS5 (see the module rules)."""

    def __init__(self, path: Path | None) -> None:
        """An index in the file at ``path`` (None: in memory)."""
        self._path = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._ident: tuple[int, int, int] | None = None
        #: key -> (seq, head) as this process last read or wrote it.
        self._known: dict[str, tuple[int, str]] | None = None

    # -- connection -------------------------------------------------------------------------

    def _where(self) -> str:
        return str(self._path) if self._path is not None else "the memory store's search index"

    def _file_ident(self) -> tuple[int, int, int] | None:
        assert self._path is not None
        try:
            st = os.lstat(self._path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(self._where(), "stat", os.strerror(exc.errno or 0)) from exc
        if not stat.S_ISREG(st.st_mode):
            raise StorageError(self._where(), "open", "not a regular file; refusing to use it")
        return (st.st_dev, st.st_ino, os.getpid())

    def _db(self) -> sqlite3.Connection:
        if self._path is None:
            if self._conn is None:
                self._conn = self._open(":memory:")
            return self._conn
        ident = self._file_ident()
        if self._conn is not None and ident == self._ident:
            return self._conn
        self._close()
        self._conn = self._open(str(self._path))
        self._ident = self._file_ident()
        return self._conn

    def _open(self, target: str) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 10000")
            if target != ":memory:":
                os.chmod(target, 0o600)
            _set_up(conn, wal=target != ":memory:")
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(self._where(), "open the search index", str(exc)) from exc
        self._known = None
        return conn

    def _close(self) -> None:
        if self._conn is not None and (self._ident is None or self._ident[2] == os.getpid()):
            self._conn.close()
        self._conn, self._ident, self._known = None, None, None

    # -- Backend ----------------------------------------------------------------------------

    def changed(self, store: BaseStore) -> tuple[list[str], list[str]]:
        rows = catalog_rows(store)
        with self._lock:
            known = self._known_marks()
            changed = [r.key for r in rows if known.get(r.key) != (r.seq, r.head)]
            if len(known) + len(changed) > len(rows):
                present = {r.key for r in rows}
                gone = [k for k in known if k not in present]
            else:
                gone = []
        return changed, gone

    def _known_marks(self) -> dict[str, tuple[int, str]]:
        db = self._db()
        if self._known is None:
            known: dict[str, tuple[int, str]] = {}
            for key, blob in db.execute("SELECT key, mark FROM marks"):
                mark = decode_mark(blob)
                known[key] = (mark.seq, mark.head)
            self._known = known
        return self._known

    def mark(self, key: str) -> Mark | None:
        with self._lock:
            return self._mark(self._db(), key)

    @staticmethod
    def _mark(db: sqlite3.Connection, key: str) -> Mark | None:
        row = db.execute("SELECT mark FROM marks WHERE key = ?", (key,)).fetchone()
        return None if row is None else decode_mark(row[0])

    def write(self, updates: list[Update]) -> None:
        if not updates:
            return
        with self._lock:
            db = self._db()
            known = self._known_marks()
            try:
                db.execute("BEGIN IMMEDIATE")
                todo: list[tuple[str, Doc]] = []
                for key, _, after, docs, fresh in still_current(
                    updates, lambda key: self._mark(db, key)
                ):
                    if fresh:
                        self._delete(db, key)
                    todo.extend((key, doc) for doc in docs)
                    db.execute(
                        "INSERT OR REPLACE INTO marks (key, mark) VALUES (?, ?)",
                        (key, encode_mark(after)),
                    )
                # In time order, so that rowid order is (about) time order: "recent" and the
                # relevance window read the newest matches by rowid, which costs nothing.
                todo.sort(key=_doc_time)
                self._insert(db, todo)
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(db)
                raise StorageError(self._where(), "update the search index", str(exc)) from exc
            except BaseException:
                self._rollback(db)
                raise
            for key, _, after, _, _ in updates:
                known[key] = (after.seq, after.head)

    @staticmethod
    def _rollback(db: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")

    @staticmethod
    def _delete(db: sqlite3.Connection, key: str) -> None:
        db.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM docs WHERE key = ?)", (key,))
        db.execute("DELETE FROM docs WHERE key = ?", (key,))

    @staticmethod
    def _insert(db: sqlite3.Connection, docs: list[tuple[str, Doc]]) -> None:
        for key, doc in docs:
            cur = db.execute(
                "INSERT INTO docs (key, channel, conversation, seq, role, ts) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, channel_of(key), doc.conversation, doc.seq, doc.role, _micros(doc.ts)),
            )
            db.execute("INSERT INTO fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, doc.text))

    def forget(self, keys: list[str]) -> None:
        with self._lock:
            db = self._db()
            try:
                db.execute("BEGIN IMMEDIATE")
                for key in keys:
                    self._delete(db, key)
                    db.execute("DELETE FROM marks WHERE key = ?", (key,))
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(db)
                raise StorageError(self._where(), "update the search index", str(exc)) from exc
            known = self._known_marks()
            for key in keys:
                known.pop(key, None)

    def query(self, query: SearchQuery) -> list[SearchHit]:
        match = " ".join('"' + w.replace('"', '""') + '"' for w in query.words)
        where = ["fts MATCH ?"]
        params: list[Any] = [match]
        for name, value in filters(query):
            where.append(_FILTERS[name])
            if isinstance(value, datetime):
                params.append(_micros(value))
            else:
                params += [len(value), value] if name == "prefix" else [value]
        cond = " AND ".join(where)
        base = "FROM fts JOIN docs d ON d.id = fts.rowid WHERE " + cond
        order = "fts.rowid DESC" if query.order == "recent" else "bm25(fts)"
        sql = (
            "SELECT d.key, d.conversation, d.seq, d.role, d.ts, "
            "snippet(fts, 0, '[', ']', '\u2026', 12), bm25(fts) "
            + base
            + f" ORDER BY {order} LIMIT ?"
        )
        with self._lock:
            try:
                db = self._db()
                if query.order == "relevance":
                    # Rank only the newest RELEVANCE_WINDOW matches: bounded time at any size.
                    edge = db.execute(
                        "SELECT fts.rowid " + base + " ORDER BY fts.rowid DESC LIMIT 1 OFFSET ?",
                        [*params, RELEVANCE_WINDOW - 1],
                    ).fetchone()
                    if edge is not None:
                        sql = sql.replace(" WHERE ", " WHERE fts.rowid >= ? AND ", 1)
                        params = [edge[0], *params]
                rows = db.execute(sql, [*params, query.limit]).fetchall()
            except sqlite3.Error as exc:
                raise StorageError(self._where(), "search", str(exc)) from exc
        return [
            SearchHit(
                key=r[0],
                conversation=r[1],
                seq=r[2],
                role=r[3],
                ts=_EPOCH + timedelta(microseconds=r[4]),
                snippet=r[5],
                score=-float(r[6]),
            )
            for r in rows
        ]

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._close()

    def drop(self) -> None:
        with self._lock:
            self._close()
            if self._path is None:
                return
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(f"{self._path}{suffix}")
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise StorageError(
                        self._where(), "delete", os.strerror(exc.errno or 0)
                    ) from exc


def _set_up(conn: sqlite3.Connection, *, wal: bool, patience: float = 10.0) -> None:
    """Switch to WAL and create the schema, waiting out other openers.

    SQLite answers a journal-mode change or a schema write that races another connection doing
    the same with "database is locked" at once, without calling the busy handler; so several
    store objects opening a new index together retry here for up to ``patience`` seconds.
    """
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            if wal:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            for statement in _SCHEMA:
                conn.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

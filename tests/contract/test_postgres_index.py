"""PostgreSQL index snapshots: opening reads no message body before the snapshot.

The snapshot row and its ``snapshot_records`` rows hold the same bytes the file store keeps in
``.snapshot``, ``.index`` and ``.ids`` for the same log; a body is read from ``events`` when a
message is used. Damaged or missing records lose to the log, never to a wrong state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_support import StoreFactory

from sessionledger import projections
from sessionledger.eventlog import FileStore, PostgresStore, copy_store
from sessionledger.eventlog._indexsnap import is_index_snapshot
from sessionledger.eventlog._pg_backend import PgBackend
from sessionledger.eventlog._pg_index import PgIndexFiles
from sessionledger.eventlog._pg_schema import SCHEMA_VERSION

pytestmark = pytest.mark.postgres

KEY = "agent:telegram:7"


def _long(store: Any, key: str = KEY, count: int = 300) -> None:
    """``count`` messages of every shape (tool calls, results, unicode), then a snapshot and a
    short tail after it."""
    with store.batch(key) as w:
        for n in range(count):
            if n % 3 == 0:
                w.append_message("user", f"question {n} ünïcödé \u2028")
            elif n % 3 == 1:
                call = {"id": f"c{n}", "type": "function", "function": {"name": "search"}}
                w.append_message("assistant", None, tool_calls=[call])
            else:
                w.append_message("tool", f"result {n}", tool_call_id=f"c{n - 1}", name="search")
        w.update_metadata(set={"title": "a long one"})
    assert store.write_snapshot(key).written
    with store.batch(key) as w:
        for n in range(5):
            w.append_message("user", f"tail {n}")


class _Trips:
    """Server round trips (psycopg's ``Connection.wait``, a pipeline counting once) and log
    bytes read by offset."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips = 0
        self.log_bytes = 0
        wait, read_log = psycopg.Connection.wait, PgIndexFiles.read_log
        leave, sync = psycopg.Pipeline.__exit__, psycopg.Pipeline.sync

        def counted_wait(conn: Any, *args: Any, **kwargs: Any) -> Any:
            # In a pipeline psycopg waits for each statement it sends without blocking on the
            # server: the pipeline's sync (or its end) is its one round trip.
            if conn._pipeline is None:
                self.trips += 1
            return wait(conn, *args, **kwargs)

        def counted_leave(pipeline: Any, *args: Any) -> Any:
            self.trips += 1
            return leave(pipeline, *args)

        def counted_sync(pipeline: Any) -> Any:
            self.trips += 1
            return sync(pipeline)

        def counted_read(files: PgIndexFiles, offset: int, length: int) -> bytes:
            got = read_log(files, offset, length)
            self.log_bytes += len(got)
            return got

        monkeypatch.setattr(psycopg.Connection, "wait", counted_wait)
        monkeypatch.setattr(psycopg.Pipeline, "__exit__", counted_leave)
        monkeypatch.setattr(psycopg.Pipeline, "sync", counted_sync)
        monkeypatch.setattr(PgIndexFiles, "read_log", counted_read)


def _records(dsn: str, schema: str, key: str) -> dict[str, bytes]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT name, data FROM "{schema}".snapshot_records WHERE key = %s', (key.encode(),)
        ).fetchall()
    return {str(r[0]): bytes(r[1]) for r in rows}


def test_snapshot_and_records_are_the_file_stores_bytes(
    make_pg: StoreFactory, dsn: str, tmp_path: Path
) -> None:
    pg = make_pg()
    _long(pg)
    pg.write_snapshot(KEY)  # up to the tail's end, extending the first one
    files = FileStore(tmp_path / "f")
    assert copy_store(pg, files).ok
    assert files.write_snapshot(KEY).written
    stem = next(p for p in (tmp_path / "f").iterdir() if p.suffix == ".jsonl").with_suffix("")
    blob = pg._backend.snapshot_bytes(KEY)
    assert blob is not None and is_index_snapshot(blob)
    assert blob == stem.with_suffix(".snapshot").read_bytes()
    records = _records(dsn, pg.schema, KEY)
    assert records["index"] == stem.with_suffix(".index").read_bytes()
    assert records["ids"] == stem.with_suffix(".ids").read_bytes()
    assert pg.read_bytes(KEY) == files.read_bytes(KEY)


def test_open_is_one_query_and_history_reads_only_its_window(
    make_pg: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg = make_pg()
    _long(pg)
    size = len(pg.read_bytes(KEY))
    expected = pg.load(KEY, snapshot=False).state
    other = make_pg()
    trips = _Trips(monkeypatch)
    w = other.session(KEY)
    assert trips.trips == 1 and trips.log_bytes == 0
    assert repr(w.state.messages) == "MessageList(305 messages, 300 indexed)"
    window = projections.history(w.state, max_messages=20)
    assert [m.get("content") for m in window[-2:]] == ["tail 3", "tail 4"]
    assert trips.trips <= 2 and 0 < trips.log_bytes < size // 3
    # Every message, id and counter equals the fold of the whole log.
    assert w.state == expected
    assert w.append_message("user", "after", id="evt-after") == expected.seq + 1
    assert w.append_message("user", "after", id="evt-after") == expected.seq + 1
    first = expected.messages[0]
    assert w.append_message("user", "again", id=first.id) == first.seq  # an indexed id
    assert make_pg().load(KEY, snapshot=False).state == w.state


def test_damaged_or_missing_records_lose_to_the_log(make_pg: StoreFactory, dsn: str) -> None:
    pg = make_pg()
    _long(pg)
    expected = pg.load(KEY, snapshot=False).state
    table = f'"{pg.schema}".snapshot_records'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(  # a changed record: its chunk fails its digest when read
            f"UPDATE {table} SET data = overlay(data placing %s from 100) WHERE name = 'index'",
            (b"\xff" * 8,),
        )
    assert make_pg().session(KEY).state == expected
    assert make_pg().state(KEY) == expected
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET data = substring(data from 1 for 64)")  # too short
    assert make_pg().session(KEY).state == expected
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {table}")  # gone
    fresh = make_pg()
    assert fresh.session(KEY).state == expected
    w = fresh.session(KEY)
    assert w.append_message("user", "again", id=expected.messages[3].id) == expected.messages[3].seq
    assert fresh.write_snapshot(KEY, rebuild=True).written  # records written again
    assert make_pg().session(KEY).state == expected


def test_a_closing_writer_extends_the_index_and_deleting_drops_it(
    make_pg: StoreFactory, dsn: str
) -> None:
    pg = make_pg()
    _long(pg)
    before = len(_records(dsn, pg.schema, KEY)["index"])
    other = make_pg()
    other.snapshot_every = 10
    w = other.session(KEY)
    for n in range(12):
        w.append_message("assistant", f"more {n}")
    w.update_metadata(set={"title": "renamed"})
    w.close()
    status = make_pg().snapshot_status(KEY)
    assert status.health == "valid" and status.seq == w.state.seq and status.behind == 0
    assert len(_records(dsn, pg.schema, KEY)["index"]) == before + 17 * 64
    opened = make_pg().session(KEY)
    assert repr(opened.state.messages) == "MessageList(317 messages, 317 indexed)"
    assert opened.state == make_pg().load(KEY, snapshot=False).state
    assert make_pg().delete(KEY)
    assert _records(dsn, pg.schema, KEY) == {}


def test_reads_inside_a_batch_use_its_connection(make_pg: StoreFactory) -> None:
    """One connection for the store (pool_size=1): a body read while a batch holds it, and a
    preview computed then (a retraction changes the messages), run on it; nothing waits."""
    pg = make_pg()
    _long(pg)
    one = make_pg(pool_size=1)
    with one.batch(KEY) as w:
        assert w.state.messages[0].message["content"].startswith("question 0")
        w.retract(2)
        w.update_metadata(set={"title": "cut short"})
        assert [m.get("content") for m in projections.history(w.state)][-1] == "tail 2"
    assert make_pg().state(KEY) == make_pg().load(KEY, snapshot=False).state
    rows = projections.list_sessions(make_pg())
    assert [(r.key, r.title) for r in rows] == [(KEY, "cut short")]


def test_a_version_6_database_with_its_snapshots_is_migrated(
    make_pg: StoreFactory, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 6 kept format-2 snapshots (every body in the snapshot) and no records table."""
    pg = make_pg()
    with monkeypatch.context() as patch:  # what version 6 wrote: format-2 snapshots
        patch.setattr(PgBackend, "index_files", lambda self, key: None)
        _long(pg)
    blob = pg._backend.snapshot_bytes(KEY)
    assert blob is not None and not is_index_snapshot(blob)
    expected = pg.load(KEY, snapshot=False).state
    pg.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{pg.schema}".snapshot_records')
        conn.execute(f'DELETE FROM "{pg.schema}".schema_version WHERE version > 6')
    again = make_pg()
    loaded = again.load(KEY)  # the store's first use migrates
    with psycopg.connect(dsn) as conn:
        top = conn.execute(f'SELECT max(version) FROM "{pg.schema}".schema_version').fetchone()
    assert top == (SCHEMA_VERSION,) and SCHEMA_VERSION >= 7
    assert loaded.snapshot_seq > 0 and loaded.state == expected  # the old snapshot still opens
    assert again.session(KEY).state == expected
    assert again.write_snapshot(KEY).written  # the next one is an index snapshot
    blob = again._backend.snapshot_bytes(KEY)
    assert blob is not None and is_index_snapshot(blob)
    opened = make_pg().session(KEY)
    assert "indexed" in repr(opened.state.messages) and opened.state == expected


def test_a_session_replaced_under_the_same_key_never_reads_old_records(
    make_pg: StoreFactory,
) -> None:
    pg = make_pg()
    _long(pg)
    assert pg.delete(KEY)
    _long(pg, count=30)
    assert isinstance(pg, PostgresStore)
    assert make_pg().session(KEY).state == make_pg().load(KEY, snapshot=False).state


def test_a_sealed_session_opens_from_its_index_snapshot(
    make_pg: StoreFactory, dsn: str, tmp_path: Path
) -> None:
    from sessionledger.eventlog import FileKeyStore, LocalKeyFile

    keys = FileKeyStore(tmp_path / "keys")
    sealed = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    _long(sealed, count=90)
    blob = sealed._backend.snapshot_bytes(KEY)
    assert blob is not None and is_index_snapshot(blob)
    assert b"question 3" not in blob and b"question 3" not in b"".join(
        _records(dsn, sealed.schema, KEY).values()
    )
    other = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    w = other.session(KEY)
    assert "indexed" in repr(w.state.messages)
    contents = [m.get("content") for m in projections.history(w.state, max_messages=8)]
    assert contents[-1] == "tail 4"
    assert w.state.messages[3].message["content"].startswith("question 3")
    assert w.state == other.load(KEY, snapshot=False).state


def test_records_written_without_their_snapshot_leave_the_old_one_valid(
    make_pg: StoreFactory, dsn: str
) -> None:
    """A writer killed between writing records and the snapshot that covers them."""
    pg = make_pg()
    _long(pg)
    expected = pg.load(KEY, snapshot=False).state
    size = len(_records(dsn, pg.schema, KEY)["index"])
    PgIndexFiles(pg, KEY).write("index", size, b"\x07" * 64 * 3)  # records of lines to come
    PgIndexFiles(pg, KEY).write("ids", 0, _records(dsn, pg.schema, KEY)["ids"][:16])  # same
    assert len(_records(dsn, pg.schema, KEY)["index"]) == size + 192
    opened = make_pg().session(KEY)
    assert "300 indexed" in repr(opened.state.messages) and opened.state == expected
    assert make_pg().snapshot_status(KEY).health == "valid"


def test_a_listing_again_reuses_unchanged_rows_and_never_a_stale_one(
    make_pg: StoreFactory,
) -> None:
    pg = make_pg()
    for n in range(3):
        pg.session(f"k:{n}").append_message("user", f"hello {n}")
    first = projections.list_sessions(pg)
    again = projections.list_sessions(pg)
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))
    w = pg.session("k:1")
    w.update_metadata(set={"title": "now titled", "tags": ["x"]})
    other = make_pg()  # another store object (another process) sees the change too
    for listing in (projections.list_sessions(pg), projections.list_sessions(other)):
        row = next(r for r in listing if r.key == "k:1")
        assert (row.title, row.tags, row.seq) == ("now titled", ("x",), w.seq)
        assert [r for r in listing if r.key != "k:1"] == [r for r in first if r.key != "k:1"]
    assert pg.delete("k:1")
    w2 = pg.session("k:1")
    w2.append_message("user", "hello 1")  # the same content again: a new session, new head
    row = next(r for r in projections.list_sessions(pg) if r.key == "k:1")
    assert (row.title, row.seq, row.head) == ("", 1, w2.state.head)


def test_a_connection_given_back_by_another_thread_is_not_used_again(
    make_pg: StoreFactory,
) -> None:
    import threading

    pg = make_pg(pool_size=2)
    assert isinstance(pg, PostgresStore)
    conn = pg._getconn()
    assert pg._held_connection() is conn
    done = threading.Thread(target=pg._putconn, args=(conn,))
    done.start()
    done.join()
    assert pg._held_connection() is None  # no longer this thread's
    again = pg._getconn()
    assert pg._held_connection() is again
    pg._putconn(again)
    assert pg._held_connection() is None


def test_a_row_written_before_the_catalog_kept_conversations_is_completed(
    make_pg: StoreFactory, dsn: str
) -> None:
    """Such a row's preview is not trusted at open: the first append writes the catalog whole."""
    pg = make_pg()
    _long(pg, count=30)
    table = f'"{pg.schema}".sessions'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {table} SET conversations = NULL")
    w = make_pg().session(KEY)
    w.append_message("user", "one more")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT conversations IS NOT NULL, seq FROM {table}").fetchone()
    assert row == (True, w.seq)


def test_a_first_id_lookup_after_opening_reads_only_the_id_records(
    make_pg: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg = make_pg()
    _long(pg, count=40)
    first = pg.load(KEY, snapshot=False).state.messages[5]
    asked: list[Any] = []
    real = PgIndexFiles._query

    def spy(files: PgIndexFiles, query: bytes, args: Any, *, fetch: bool = True) -> Any:
        asked.append(args)
        return real(files, query, args, fetch=fetch)

    monkeypatch.setattr(PgIndexFiles, "_query", spy)
    w = make_pg().session(KEY)
    assert w.append_message("user", "new", id="evt-new") == w.seq
    assert asked == [(KEY.encode(), ["ids"])]  # not the message records again
    assert w.append_message("user", "again", id=first.id) == first.seq
    assert len(asked) == 2 and asked[1]["lo"] <= first.seq  # the hit confirmed on its line

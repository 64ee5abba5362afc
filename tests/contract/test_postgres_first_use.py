"""The schema check at a PostgreSQL store's first use: every kind of first use, two stores
at once, and the connection left clean (adversarial review of the first-use check)."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from pg_support import StoreFactory

from sessionledger.eventlog import MemoryStore, SchemaVersionError
from sessionledger.eventlog._pg_schema import SCHEMA_VERSION
from sessionledger.projections import search

pytestmark = pytest.mark.postgres


def _tables(dsn: str, schema: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
    return {r[0] for r in rows}


def test_search_as_a_new_stores_first_use_creates_the_schema(
    make_pg: StoreFactory, dsn: str
) -> None:
    pg = make_pg()  # nothing sent: no schema yet
    assert search(pg, "hello") == []
    assert {"sessions", "schema_version", "search_docs"} <= _tables(dsn, pg.schema)


def test_search_as_first_use_refuses_a_newer_schema_and_writes_nothing(
    make_pg: StoreFactory, dsn: str
) -> None:
    pg = make_pg()
    pg.ensure_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{pg.schema}".schema_version (version, description) VALUES (999, %s)',
            ("from the future",),
        )
    before = _tables(dsn, pg.schema)
    newer = make_pg()
    with pytest.raises(SchemaVersionError):
        search(newer, "hello")
    assert _tables(dsn, pg.schema) == before  # no search tables made in a newer schema


def test_more_first_uses_refuse_a_newer_schema_and_write_nothing(
    make_pg: StoreFactory, dsn: str
) -> None:
    pg = make_pg()
    pg.ensure_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{pg.schema}".schema_version (version, description) VALUES (999, %s)',
            ("from the future",),
        )
    mem = MemoryStore()
    mw = mem.session("telegram:1")
    mw.append_message("user", "hello")
    data = mem.read_bytes("telegram:1")
    uses: dict[str, Callable[[Any], object]] = {
        "batch": lambda s: s.batch("telegram:1").__enter__(),
        "trash": lambda s: s.trash(),
        "purge": lambda s: s.purge_trash(),
        "cleanup": lambda s: s.cleanup(older_than=timedelta(days=1)),
        "delete": lambda s: s.delete("telegram:1"),
        "read_bytes": lambda s: s.read_bytes("telegram:1"),
        "committed": lambda s: s.committed("telegram:1", "x"),
        "archive": lambda s: s.archive("telegram:1"),
        "restore": lambda s: s.restore("nothing"),
        "import_bytes": lambda s: s.import_bytes("telegram:1", data),
        "open": lambda s: s.open("telegram:1"),
        "load": lambda s: s.load("telegram:1"),
    }
    for what, use in uses.items():
        newer = make_pg()
        with pytest.raises(SchemaVersionError):
            use(newer)
        newer.close()
        assert what
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{pg.schema}".sessions').fetchone() == (0,)


def test_two_stores_first_use_on_an_older_schema_at_once(
    make_pg: StoreFactory, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    pg = make_pg()
    w = pg.session("telegram:42")
    w.append_message("user", "hello")
    w.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{pg.schema}".schema_version WHERE version > 3')
    stores = [make_pg() for _ in range(6)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def first(store: object, n: int) -> None:
        barrier.wait()
        try:
            if n % 2:
                assert store.exists("telegram:42")  # type: ignore[attr-defined]
            else:
                assert store.keys() == ["telegram:42"]  # type: ignore[attr-defined]
        except BaseException as exc:
            errors.append(exc)

    caplog.set_level(logging.DEBUG, logger="psycopg")
    threads = [threading.Thread(target=first, args=(s, n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT version FROM "{pg.schema}".schema_version ORDER BY version'
        ).fetchall()
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_first_use_on_older_and_newer_schema_logs_nothing(
    make_pg: StoreFactory, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="psycopg")
    pg = make_pg()
    assert pg.keys() == []  # creates
    fresh = make_pg()
    assert not fresh.exists("telegram:1")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{pg.schema}".schema_version WHERE version > 5')
    older = make_pg()
    assert not older.exists("telegram:1")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{pg.schema}".schema_version (version, description) VALUES (999, %s)',
            ("from the future",),
        )
    newer = make_pg()
    with pytest.raises(SchemaVersionError):
        newer.exists("telegram:1")
    with pytest.raises(SchemaVersionError):
        newer.exists("telegram:1")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_first_statement_failing_by_itself_leaves_the_connection_clean(
    make_pg: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    from sessionledger.eventlog import EventLogError
    from sessionledger.eventlog._pg_common import run

    caplog.set_level(logging.DEBUG, logger="psycopg")
    make_pg().ensure_schema()
    pg = make_pg(pool_size=1)
    db = pg._db
    with pytest.raises(EventLogError), db.reading("probe", via_run=True) as conn:
        run(conn, b"SELECT 1 / 0", ())
    assert db.checked  # the schema was current: the statement's own error
    assert conn.pgconn.transaction_status == 0 and not conn.closed
    assert not pg.exists("telegram:1")
    w = pg.session("telegram:1")
    assert w.append_message("user", "hi") == 1
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_idle_status_of_a_closed_or_broken_connection(dsn: str) -> None:
    from sessionledger.eventlog._pg_conn import _idle_status
    from sessionledger.eventlog._pg_io import idle_ok

    conn = psycopg.connect(dsn, autocommit=True)
    assert _idle_status(conn) and idle_ok(conn) and idle_ok(conn)
    with psycopg.connect(dsn, autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    assert conn.broken and not _idle_status(conn) and not idle_ok(conn)
    conn.close()
    assert not _idle_status(conn) and not idle_ok(conn)


def test_idle_ok_sees_a_connection_the_server_ended_while_it_was_idle(dsn: str) -> None:
    """As soon as the server's FATAL message arrived, whether or not the socket is closed yet
    (a backend gone from pg_stat_activity may not have closed it)."""
    import select

    from sessionledger.eventlog._pg_io import idle_ok

    for wait_until_gone in (False, True):
        conn = psycopg.connect(dsn, autocommit=True)
        pid = conn.info.backend_pid
        assert idle_ok(conn) and idle_ok(conn)
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            poller = select.poll()
            poller.register(conn.pgconn.socket, select.POLLIN)
            assert poller.poll(10_000)  # the FATAL message (and maybe the close) arrived
            deadline = time.monotonic() + 10
            while (
                wait_until_gone
                and killer.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
            ):
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert not idle_ok(conn)
        assert not idle_ok(conn)
        conn.close()


class _HoldingProxy:
    """A TCP proxy to the server that, once the server closes its side, keeps the client's
    side open until released: what a client sees between a terminated backend's FATAL
    message and its closed socket (a window of microseconds, wider under load)."""

    def __init__(self, dsn: str) -> None:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        self._to = (str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
        self._listen = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listen.getsockname()[1])
        self.server_closed = threading.Event()
        self.release = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        client, _ = self._listen.accept()
        upstream = socket.create_connection(self._to)
        with client, upstream, self._listen:
            while True:
                ready, _, _ = select.select([client, upstream], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        if sock is upstream:
                            self.server_closed.set()
                            self.release.wait(30)
                        return
                    (upstream if sock is client else client).sendall(data)

    def close(self) -> None:
        self.release.set()
        self._thread.join(10)


def test_idle_ok_sees_a_fatal_message_before_the_socket_closes(dsn: str) -> None:
    """The server's FATAL message arrived, its closed socket not yet (the backend still
    exiting): the check must say the connection is ended. With 8ceca0c's two consume_input
    reads it said usable (the message only buffered, the socket open), and the statement went
    to an ended session (an append: a CommitUnknownError); held open by a proxy here, the
    window is certain rather than a matter of load."""
    from sessionledger.eventlog import PostgresStore
    from sessionledger.eventlog._pg_io import idle_ok

    proxy = _HoldingProxy(dsn)
    pg = PostgresStore(
        f"host=127.0.0.1 port={proxy.port} dbname=test user=postgres sslmode=disable",
        schema=f"t_{uuid.uuid4().hex[:12]}",
    )
    try:
        conn = pg._getconn()  # the store's own connection (through the proxy)
        pg._putconn(conn)
        assert idle_ok(conn)
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        assert proxy.server_closed.wait(10)
        time.sleep(0.05)  # the FATAL message is on the client's socket, the socket still open
        assert not idle_ok(conn)
    finally:
        proxy.close()
        pg.close()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{pg.schema}" CASCADE')


def test_a_connection_dropped_in_the_first_pipeline_is_not_lent_again(
    make_pg: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    from sessionledger.eventlog import EventLogError
    from sessionledger.eventlog._pg_common import run

    caplog.set_level(logging.DEBUG, logger="psycopg")
    make_pg().ensure_schema()
    pg = make_pg(pool_size=2)
    db = pg._db
    with pytest.raises(EventLogError), db.reading("probe", via_run=True) as conn:
        run(conn, b"SELECT pg_terminate_backend(pg_backend_pid())", ())
    assert not db.checked  # nothing known of the schema: checked at the next use
    assert conn.closed
    assert not pg.exists("telegram:1")
    assert db.checked
    w = pg.session("telegram:1")
    assert w.append_message("user", "hi") == 1
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.anyio
async def test_an_async_stores_first_uses_refuse_a_newer_schema(dsn: str, schema: str) -> None:
    from sessionledger.eventlog import AsyncPostgresStore

    setup = await AsyncPostgresStore.connect(dsn, schema=schema, pool_size=2)
    await setup.ensure_schema()
    await setup.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".schema_version (version, description) VALUES (999, %s)',
            ("from the future",),
        )
    for use in ("session", "state", "keys", "ensure_schema"):
        store = await AsyncPostgresStore.connect(dsn, schema=schema, pool_size=2)
        try:
            with pytest.raises(SchemaVersionError):
                if use == "session":
                    await store.session("k:1")
                elif use == "state":
                    await store.state("k:1")
                elif use == "keys":
                    await store.keys()
                else:
                    await store.ensure_schema()
        finally:
            await store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{schema}".sessions').fetchone() == (0,)


@pytest.mark.parametrize("name", ['r18 "quoted"', "R18 Mixed 'case'"])
def test_a_schema_name_with_quotes_is_created_and_used(dsn: str, name: str) -> None:
    from psycopg import sql

    from sessionledger.eventlog import PostgresStore

    name = f"{name} {uuid.uuid4().hex[:8]}"
    store = PostgresStore(dsn, schema=name, pool_size=2)
    try:
        assert store.keys() == []  # the first use creates it
        w = store.session("telegram:1")
        assert w.append_message("user", "hello quoted world") == 1
        assert store.keys() == ["telegram:1"]
        assert [h.key for h in search(store, "quoted")] == ["telegram:1"]
        again = PostgresStore(dsn, schema=name, pool_size=2)
        assert again.exists("telegram:1")
        again.close()
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.parametrize("start", ["none", "older"])
def test_a_schema_made_current_by_another_process_between_check_and_look(
    make_pg: StoreFactory, dsn: str, start: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first uses at once: this store's check fails (no schema yet, or an older one), the
    other process creates or migrates it and commits, then this store looks: current. Its
    statement must run, not raise the check's error."""
    from sessionledger.eventlog import _pg_conn
    from sessionledger.eventlog._pg_schema import is_current, migrate

    other = make_pg()
    if start == "older":
        other.ensure_schema()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DELETE FROM "{other.schema}".schema_version WHERE version > 3')
    real = is_current

    done: list[bool] = []

    def after_the_other(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> bool:
        if not done:  # the other process, committed before this one looks
            done.append(True)
            with psycopg.connect(dsn, autocommit=True) as theirs:
                migrate(theirs, schema, "the other process")
        return real(conn, schema)

    monkeypatch.setattr(_pg_conn, "is_current", after_the_other)
    pg = make_pg()
    assert not pg.exists("telegram:1")
    assert done and pg._db.checked

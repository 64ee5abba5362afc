"""PostgreSQL index snapshots under races: lazy reads after another writer, a replaced session,
and a fork while the forking thread holds a connection."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from pg_support import StoreFactory

from sessionledger.eventlog import EventLogError, PostgresStore, StorageError

pytestmark = pytest.mark.postgres

KEY = "agent:telegram:7"


def _long(store: Any, key: str = KEY, count: int = 120, word: str = "question") -> None:
    with store.batch(key) as w:
        for n in range(count):
            w.append_message("user", f"{word} {n}")
    assert store.write_snapshot(key).written
    with store.batch(key) as w:
        for n in range(3):
            w.append_message("user", f"tail {n}")


def test_a_lazy_read_after_delete_and_recreate_never_serves_the_new_session(
    make_pg: StoreFactory,
) -> None:
    pg = make_pg()
    _long(pg)
    reader = make_pg()
    w = reader.session(KEY)
    assert "120 indexed" in repr(w.state.messages)
    pg.delete(KEY)
    _long(pg, word="other")  # the same shape: the same offsets, another session
    try:
        got = [m.message["content"] for m in w.state.messages[:5]]
    except EventLogError:
        return  # refused: fine
    assert got == [f"question {n}" for n in range(5)]


def test_a_lazy_read_after_another_writer_appended_reads_the_opened_messages(
    make_pg: StoreFactory,
) -> None:
    pg = make_pg()
    _long(pg)
    w = make_pg().session(KEY)
    assert "120 indexed" in repr(w.state.messages)
    with pg.batch(KEY) as other:
        for n in range(50):
            other.append_message("user", f"later {n}")
    assert [m.message["content"] for m in w.state.messages[:3]] == [
        f"question {n}" for n in range(3)
    ]
    assert w.state.messages[-1].message["content"] == "tail 2"


def test_a_forked_child_never_reads_on_the_parents_held_connection(
    make_pg: StoreFactory,
) -> None:
    _long(make_pg(), key="other:1", count=600)
    pg = make_pg()
    assert isinstance(pg, PostgresStore)
    w = pg.session("other:1")
    assert "600 indexed" in repr(w.state.messages)
    with pg.batch(KEY) as b:
        b.append_message("user", "in the batch")
        parent = pg._held_connection()
        assert parent is not None
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                used: list[Any] = []
                real = psycopg.Connection.execute

                def spy(conn: Any, *a: Any, **k: Any) -> Any:
                    used.append(conn)
                    return real(conn, *a, **k)

                psycopg.Connection.execute = spy  # type: ignore[method-assign,assignment]
                ok = w.state.messages[300].message["content"] == "question 300"
                code = 0 if ok and used and all(c is not parent for c in used) else 3
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pg.load(KEY).state.messages[-1].message["content"] == "in the batch"


def test_tampered_id_records_never_lose_an_id(make_pg: StoreFactory, dsn: str) -> None:
    pg = make_pg()
    _long(pg)
    expected = pg.load(KEY, snapshot=False).state
    table = f'"{pg.schema}".snapshot_records'
    with psycopg.connect(dsn, autocommit=True) as conn:  # ids of another session's shape
        conn.execute(
            f"UPDATE {table} SET data = overlay(data placing %s from 17) WHERE name = 'ids'",
            (b"\x00" * 32,),
        )
    w = make_pg().session(KEY)
    for n in (0, 1, 60, 119):
        m = expected.messages[n]
        assert w.append_message("user", "again", id=m.id) == m.seq
    assert w.seq == expected.seq
    with psycopg.connect(dsn, autocommit=True) as conn:  # truncated
        conn.execute(f"UPDATE {table} SET data = substring(data from 1 for 20) WHERE name = 'ids'")
    w = make_pg().session(KEY)
    m = expected.messages[100]
    assert w.append_message("user", "again", id=m.id) == m.seq and w.seq == expected.seq


@pytest.mark.parametrize("leaving", ["raising", "normally"])
def test_a_forked_child_leaving_the_parents_batch_sends_nothing_on_its_connection(
    make_pg: StoreFactory, leaving: str
) -> None:
    """The child of a fork inside ``store.batch`` that leaves the block (by SystemExit, or
    normally: refused, nothing written) must not roll back or commit the parent's
    transaction on the shared socket: the parent keeps the session's row lock until its own
    block ends."""
    import threading

    pg = make_pg()
    pg.session(KEY).append_message("user", "first")
    other = make_pg()
    parent = os.getpid()
    done = threading.Event()

    def append() -> None:
        other.session(KEY).append_message("user", "from another writer")
        done.set()

    t = threading.Thread(target=append, daemon=True)
    try:
        with pg.batch(KEY) as b:
            b.append_message("user", "in the batch")
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child leaves the block
                if leaving == "raising":
                    raise SystemExit(0)
            else:
                _, status = os.waitpid(pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0
                t.start()
                assert not done.wait(1.0)  # waits on the parent's row lock
    except StorageError:
        if os.getpid() != parent:  # pragma: no cover - the child, refused
            os._exit(0)
        raise
    finally:
        if os.getpid() != parent:  # pragma: no cover - the child
            os._exit(0 if leaving == "raising" else 1)
    t.join(10)
    assert done.is_set()
    contents = [m.message["content"] for m in pg.load(KEY).state.messages]
    assert contents == ["first", "in the batch", "from another writer"]

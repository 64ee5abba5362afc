"""Search: full text over every message, a projection kept current, on file, memory, PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from threaded import run_threads

from sessionledger import replay
from sessionledger.eventlog import (
    BaseStore,
    FileStore,
    InvalidEventError,
    MemoryStore,
    StorageError,
)
from sessionledger.projections import (
    SearchHit,
    drop_search,
    list_conversations,
    rebuild_search,
    refresh_search,
    search,
)


def _where(hits: list[SearchHit]) -> list[tuple[str, int, int]]:
    return sorted((h.key, h.conversation, h.seq) for h in hits)


def _fill(store: BaseStore) -> None:
    tg = store.session("agent:telegram:42")
    tg.append_message("user", "Plan a trip to Kyoto in April")  # 1
    tg.append_message("assistant", "Kyoto blossoms peak in early April.")  # 2
    store.new_session("agent:telegram:42")  # 3
    tg.append_message("user", "Now Osaka, please")  # 4
    tg.append_message(
        "assistant",
        None,
        tool_calls=[
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "Osaka castle"}'},
            }
        ],
    )  # 5
    slack = store.session("agent:slack:7")
    slack.append_message("user", [{"type": "text", "text": "Is Kyoto busy in spring?"}])


def test_finds_messages_across_sessions_and_conversations(store: BaseStore) -> None:
    _fill(store)
    hits = search(store, "kyoto")
    assert _where(hits) == [
        ("agent:slack:7", 0, 1),
        ("agent:telegram:42", 0, 1),
        ("agent:telegram:42", 0, 2),
    ]
    assert hits == sorted(hits, key=lambda h: -h.score)
    first = next(h for h in hits if h.seq == 1 and h.key == "agent:telegram:42")
    assert "[Kyoto]" in first.snippet and first.role == "user"
    # The conversation of a hit is the one list_conversations names.
    osaka = search(store, "Osaka")
    assert {h.conversation for h in osaka} == {3}
    assert 3 in {c.start_seq for c in list_conversations(store, "agent:telegram:42")}
    assert _where(search(store, "castle")) == [("agent:telegram:42", 3, 5)]  # tool arguments
    assert _where(search(store, "KYOTO april")) == [
        ("agent:telegram:42", 0, 1),
        ("agent:telegram:42", 0, 2),
    ]
    assert search(store, "nowhere") == []


def test_filters(store: BaseStore) -> None:
    _fill(store)
    assert _where(search(store, "kyoto", channel="slack")) == [("agent:slack:7", 0, 1)]
    assert {h.key for h in search(store, "kyoto", prefix="agent:tele")} == {"agent:telegram:42"}
    assert {h.role for h in search(store, "kyoto", role="assistant")} == {"assistant"}
    now = datetime.now(UTC)
    assert search(store, "kyoto", since=now + timedelta(minutes=1)) == []
    assert len(search(store, "kyoto", until=now + timedelta(minutes=1))) == 3
    assert len(search(store, "kyoto", limit=1)) == 1
    with pytest.raises(InvalidEventError, match="no word"):
        search(store, "  --  ")
    with pytest.raises(InvalidEventError, match="limit"):
        search(store, "kyoto", limit=0)
    with pytest.raises(InvalidEventError, match="aware"):
        search(store, "kyoto", since=datetime(2026, 1, 1))


@pytest.mark.parametrize("query", ['kyoto"', "kyoto OR", "NEAR(kyoto", "-kyoto", "kyoto*", "a:b"])
def test_no_query_is_a_syntax_error(query: str) -> None:
    store = MemoryStore()
    store.session("k").append_message("user", "kyoto")
    assert isinstance(search(store, query), list)


def test_kept_current_incrementally_and_rebuildable(store: BaseStore) -> None:
    _fill(store)
    assert len(search(store, "kyoto")) == 3
    assert refresh_search(store) == 0  # nothing moved
    store.session("agent:slack:7").append_message("assistant", "Kyoto is busy in April.")
    assert refresh_search(store) == 1  # only the session that moved is read
    assert len(search(store, "kyoto", refresh=False)) == 4
    store.session("agent:line:1").append_message("user", "kyoto by train")
    assert len(search(store, "kyoto", refresh=False)) == 4  # not caught up yet
    assert len(search(store, "kyoto")) == 5
    store.delete("agent:line:1")
    assert len(search(store, "kyoto")) == 4  # a deleted session leaves the index
    before = _where(search(store, "kyoto"))
    drop_search(store)
    assert _where(search(store, "kyoto")) == before
    assert rebuild_search(store) == 2
    assert _where(search(store, "kyoto")) == before


def test_a_cut_log_is_indexed_again(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none") as store:
        s = store.session("k")
        s.append_message("user", "kyoto one")
        s.append_message("user", "kyoto two")
        assert len(search(store, "kyoto")) == 2
        s.close()
        data = store.read_bytes("k")
        cut_at = data.rstrip(b"\n").rfind(b"\n") + 1
        store.cut("k", cut_at, reason="test")
        store.session("k").append_message("user", "osaka three")
        assert _where(search(store, "kyoto")) == [("k", 0, 1)]
        assert _where(search(store, "osaka")) == [("k", 0, 2)]


def test_two_store_objects_catch_up_at_once_without_duplicates(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none") as writer:
        for n in range(40):
            writer.session(f"s{n}").append_message("user", f"kyoto {n}")
    stores = [FileStore(tmp_path / "s", durability="none") for _ in range(3)]
    run_threads(*(partial(refresh_search, s) for s in stores))
    hits = search(stores[0], "kyoto", limit=100)
    assert len(hits) == 40 and len(set(_where(hits))) == 40
    for s in stores:
        s.close()


def test_the_index_file_is_never_followed(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none") as store:
        store.session("k").append_message("user", "kyoto")
        target = tmp_path / "elsewhere"
        target.write_bytes(b"")
        (tmp_path / "s" / ".search.sqlite3").symlink_to(target)
        with pytest.raises(StorageError, match="not a regular file"):
            search(store, "kyoto")
        assert target.read_bytes() == b""


def test_index_files_are_not_logs(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none") as store:
        store.session("k").append_message("user", "kyoto")
        search(store, "kyoto")
        assert store.keys() == ["k"]
        assert replay.verify(store).ok
        assert (tmp_path / "s" / ".search.sqlite3").stat().st_mode & 0o077 == 0


def test_orders_and_the_relevance_window(store: BaseStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(store)
    recent = search(store, "kyoto", order="recent")
    assert (recent[0].key, recent[0].seq) == ("agent:slack:7", 1)  # the newest
    assert len(recent) == 3
    from sessionledger.projections import _search_pg, _search_sqlite

    monkeypatch.setattr(_search_sqlite, "RELEVANCE_WINDOW", 1)
    monkeypatch.setattr(_search_pg, "RELEVANCE_WINDOW", 1)
    assert [(h.key, h.seq) for h in search(store, "kyoto")] == [("agent:slack:7", 1)]
    assert len(search(store, "kyoto", until=recent[0].ts)) == 1  # narrowing reaches older ones
    with pytest.raises(InvalidEventError, match="order"):
        search(store, "kyoto", order="size")  # type: ignore[arg-type]


@pytest.mark.postgres
def test_the_postgres_index_connection_closes_with_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc
    import os

    import psycopg

    from sessionledger.eventlog import PostgresStore

    dsn = os.environ.get("SESSIONLEDGER_TEST_PG")
    if not dsn:
        pytest.skip("PostgreSQL tests need a server: set SESSIONLEDGER_TEST_PG")
    opened: list[psycopg.Connection[Any]] = []
    real = psycopg.Connection.connect

    def connect(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
        conn = real(*args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(psycopg.Connection, "connect", connect)
    schema = f"t_{os.urandom(6).hex()}"
    gc.disable()  # nothing here may rely on the collector
    try:
        store = PostgresStore(dsn, schema=schema)
        with store:
            store.session("agent:telegram:1").append_message("user", "kyoto in april")
            assert len(search(store, "kyoto")) == 1
            assert not all(conn.closed for conn in opened)
        # Leaving ``with store:`` closed every connection, the index's too (the store is still
        # referenced and the collector is off: nothing was left to a finalizer).
        assert opened and all(conn.closed for conn in opened)
        store.close()  # closing again is harmless
        again = PostgresStore(dsn, schema=schema)
        assert len(search(again, "kyoto")) == 1
        again.close()
        assert all(conn.closed for conn in opened)
        assert again is not None and store is not None
    finally:
        gc.enable()
        with real(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_on_close_runs_each_hook_once(tmp_path: Path) -> None:
    calls: list[str] = []
    store = FileStore(tmp_path / "s", durability="none")
    store.on_close(lambda: calls.append("a"))
    store.close()
    store.close()
    assert calls == ["a"]
    with pytest.raises(InvalidEventError, match="callable"):
        store.on_close(42)  # type: ignore[arg-type]


@pytest.mark.postgres
def test_postgres_index_refreshes_the_planner_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large catch-up is followed by ANALYZE (a server without autovacuum would otherwise
    plan every word as rare and read all its matches)."""
    import os

    import psycopg

    from sessionledger.eventlog import PostgresStore
    from sessionledger.projections import _search_pg

    dsn = os.environ.get("SESSIONLEDGER_TEST_PG")
    if not dsn:
        pytest.skip("PostgreSQL tests need a server: set SESSIONLEDGER_TEST_PG")
    monkeypatch.setattr(_search_pg, "ANALYZE_AFTER", 5)
    schema = f"t_{os.urandom(6).hex()}"

    def analyzed() -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT last_analyze FROM pg_stat_user_tables "
                "WHERE schemaname = %s AND relname = 'search_docs'",
                (schema,),
            ).fetchone()
        return row is not None and row[0] is not None

    try:
        with PostgresStore(dsn, schema=schema) as store:
            s = store.session("agent:telegram:1")
            for n in range(3):
                s.append_message("user", f"kyoto {n}")
            assert len(search(store, "kyoto")) == 3
            assert not analyzed()  # 3 docs: below the threshold
            for n in range(3):
                s.append_message("user", f"osaka {n}")
            assert len(search(store, "osaka")) == 3
            # Every search is planned for its own words (psycopg prepares repeated queries).
            backend = _search_pg.PgBackend(store)
            conn = backend._db()
            assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_custom_plan",)
            backend.close()
            deadline = time.monotonic() + 5
            while not analyzed():  # the statistics view is updated a moment after
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_slow_first_use_does_not_hold_up_other_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building a store's index (a PostgreSQL schema check, opening the SQLite file) happens
    outside the module's lock: another store searches meanwhile; racing first uses of one
    store end with one index, the loser's closed."""
    import threading

    from sessionledger.projections import _search

    slow, fast = MemoryStore(), MemoryStore()
    fast.session("a").append_message("user", "kyoto")
    entered, release = threading.Event(), threading.Event()
    built: list[Any] = []
    real = _search._new_backend

    def new_backend(store: BaseStore) -> Any:
        if store is slow:
            entered.set()
            assert release.wait(10)
        got = real(store)
        built.append(got)
        return got

    monkeypatch.setattr(_search, "_new_backend", new_backend)
    worker = threading.Thread(target=search, args=(slow, "kyoto"))
    worker.start()
    try:
        assert entered.wait(10)
        assert [h.key for h in search(fast, "kyoto")] == ["a"]  # not blocked by `slow`
    finally:
        release.set()
        worker.join(10)
    assert not worker.is_alive()
    # Four first uses of one store at once, all building: one index is kept, three closed.
    shared = MemoryStore()
    shared.session("b").append_message("user", "kyoto")
    barrier = threading.Barrier(4, timeout=10)
    closed: list[Any] = []

    def racing(store: BaseStore) -> Any:
        got = real(store)
        if store is shared:
            barrier.wait()
            monkeypatch.setattr(got, "close", lambda got=got: closed.append(got))
        return got

    monkeypatch.setattr(_search, "_new_backend", racing)
    racers = [threading.Thread(target=refresh_search, args=(shared,)) for _ in range(4)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(10)
    kept = _search._backends[shared]
    assert len(closed) == 3 and kept not in closed
    assert [h.key for h in search(shared, "kyoto")] == ["b"]
    slow.close()
    fast.close()
    shared.close()

"""Answers that were wrong without an error: a newer format appended to, a header id reused,
a rolled-back event still in the live state, forged content listed by a keyed catalog, an empty
key taken for no key. Each is refused or corrected the same way on every store.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionledger import projections, replay
from sessionledger.eventlog import (
    BaseStore,
    FileStore,
    Header,
    InvalidEventError,
    MemoryStore,
    MessageAppended,
    NewerFormatError,
    StorageError,
)
from sessionledger.eventlog.codec import encode_lines

SECRET = "the secret"


def pg_dsn() -> str:
    """The PostgreSQL test server's DSN ("" without one: those parts are skipped)."""
    return os.environ.get("SESSIONLEDGER_TEST_PG", "")


def _drop(schema: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _stores(tmp_path: Path) -> Iterator[tuple[str, Callable[[], BaseStore]]]:
    yield "file", lambda: FileStore(tmp_path / "file", durability="none")
    yield "memory", MemoryStore
    dsn = pg_dsn()
    if dsn:
        from sessionledger.eventlog import PostgresStore

        schema = f"wrong_{datetime.now(UTC).strftime('%H%M%S%f')}"
        try:
            yield "postgres", lambda: PostgresStore(dsn, schema=schema)
        finally:
            _drop(schema)


def test_an_id_equal_to_the_headers_id_is_refused_on_every_store(tmp_path: Path) -> None:
    for name, make in _stores(tmp_path):
        store = make()
        try:
            writer = store.session("k")
            writer.append_message("user", "one")
            header_id = writer.state.id
            with pytest.raises(InvalidEventError, match="header's id"):
                writer.append_message("user", "two", id=header_id)
            assert writer.seq == 1, name
            assert replay.verify(store).ok, name
        finally:
            store.close()


def _log(version: int) -> bytes:
    now = datetime.now(UTC)
    header = Header(seq=0, ts=now, id="h", key="k", created_at=now, version=version)
    message = MessageAppended.of(
        seq=1, ts=now, id="e1", message={"role": "user", "content": "from the future"}
    )
    data, _ = encode_lines([header, message])
    return data


def test_a_newer_format_is_read_but_never_appended_to(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    store.path_for("k").write_bytes(_log(3))
    before = store.read_bytes("k")
    assert store.load("k").state.message_dicts[0]["content"] == "from the future"
    with pytest.raises(NewerFormatError, match="format version 3"):
        store.session("k")
    with pytest.raises(NewerFormatError):
        store.open("k")
    assert store.read_bytes("k") == before


def test_a_newer_format_is_never_appended_to_on_any_store(tmp_path: Path) -> None:
    for name, make in _stores(tmp_path):
        store = make()
        try:
            store.import_bytes("k", _log(3))
            before = store.read_bytes("k")
            assert store.load("k").state.message_dicts[0]["content"] == "from the future", name
            with pytest.raises(NewerFormatError, match="format version 3"):
                store.session("k").append_message("user", "now")
            assert store.read_bytes("k") == before, name
        finally:
            store.close()


def test_the_same_format_is_appended_to(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    store.path_for("k").write_bytes(_log(1))
    assert store.session("k").append_message("user", "more") == 2


@pytest.mark.parametrize("empty", ["", b""])
def test_an_empty_hash_key_is_refused(tmp_path: Path, empty: Any) -> None:
    with pytest.raises(InvalidEventError, match="hash_key is empty"):
        FileStore(tmp_path, hash_key=empty)
    with pytest.raises(InvalidEventError, match="hash_key is empty"):
        MemoryStore(hash_key=empty)


def _forge(store: FileStore, key: str) -> None:
    """Keep the genuine header line, replace the lines after it with a forged chain."""
    data = store.read_bytes(key)
    header_line = data[: data.find(b"\n") + 1]
    header = msgspec.json.decode(header_line)
    now = datetime.now(UTC)
    forged = MessageAppended.of(
        seq=1, ts=now, id="f1", message={"role": "user", "content": "FORGED preview"}
    )
    meta_free, _ = encode_lines([forged], prev_h=header["h"])  # chained, but unkeyed
    store.path_for(key).write_bytes(header_line + meta_free)


def test_a_keyed_catalog_shows_only_what_verifies(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", hash_key=SECRET)
    with store.session("real") as w:
        w.append_message("user", "genuine")
    with store.session("victim") as w:
        w.append_message("user", "what was said")
    assert {r.key: r.preview for r in projections.list_sessions(store)}["victim"] == (
        "what was said"
    )
    _forge(store, "victim")
    for fresh in (store, FileStore(tmp_path, durability="none", hash_key=SECRET)):
        rows = {r.key: r for r in projections.list_sessions(fresh)}
        assert "FORGED" not in rows["victim"].preview
        assert rows["victim"].messages == 0
        assert rows["real"].preview == "genuine"
    assert not replay.verify(store).ok


def test_a_forged_catalog_file_is_not_believed(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", hash_key=SECRET)
    with store.session("k") as w:
        w.append_message("user", "genuine")
    projections.list_sessions(store)
    blob = (tmp_path / ".catalog").read_bytes()
    assert b"genuine" in blob
    (tmp_path / ".catalog").write_bytes(blob.replace(b"genuine", b"FORGEDX"))
    fresh = FileStore(tmp_path, durability="none", hash_key=SECRET)
    assert [r.preview for r in projections.list_sessions(fresh)] == ["genuine"]
    # Unsealed (written by an unkeyed store object): also rebuilt, not believed.
    FileStore(tmp_path, durability="none")  # the files stay; only reading differs
    assert [r.preview for r in projections.list_sessions(fresh)] == ["genuine"]


def test_postgres_state_shows_no_rolled_back_event(monkeypatch: pytest.MonkeyPatch) -> None:
    if not pg_dsn():
        pytest.skip(
            "PostgreSQL tests need a server: set SESSIONLEDGER_TEST_PG (see docs/postgres.md)"
        )
    import psycopg

    from sessionledger.eventlog import PostgresStore
    from sessionledger.eventlog._pg_io import _PgIO

    schema = f"rolled_{datetime.now(UTC).strftime('%H%M%S%f')}"
    store = PostgresStore(pg_dsn(), schema=schema)
    try:
        writer = store.session("k")
        writer.append_message("user", "one")

        def refused(self: _PgIO, *args: Any, **kwargs: Any) -> None:
            raise psycopg.errors.CheckViolation("refused by the database")

        monkeypatch.setattr(_PgIO, "send", refused)
        with pytest.raises(StorageError, match="nothing was written"):
            writer.append_message("user", "two")
        assert [m["content"] for m in writer.state.message_dicts] == ["one"]
        assert writer.seq == 1
        monkeypatch.undo()
        assert writer.append_message("user", "two") == 2
    finally:
        store.close()
        _drop(schema)

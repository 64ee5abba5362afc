"""Encryption at rest on PostgreSQL: the same sealed bytes, no plaintext in any table."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pg_support import StoreFactory

from sessionledger import projections, replay
from sessionledger.eventlog import (
    WITHHELD,
    FileKeyStore,
    FileStore,
    InvalidEventError,
    KeyUnavailableError,
    LocalKeyFile,
)

SECRETS = ("Zanzibar-hospital-7731", "Title-Okapi-9902", "Summary-Axolotl-5523", "Answer-Quokka")


def _all_table_bytes(dsn: str, schema: str) -> bytes:
    """Every value of every table in ``schema``, as text, concatenated."""
    out: list[bytes] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        assert tables
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"'):
                for value in row:
                    if isinstance(value, bytes | memoryview):
                        out.append(bytes(value))
                    else:
                        out.append(str(value).encode())
    return b"\n".join(out)


def _write(store: object, key: str = "telegram:42") -> None:
    s = store.session(key, metadata={"title": SECRETS[1]})  # type: ignore[attr-defined]
    s.append_message("user", f"I was at {SECRETS[0]}")
    s.append_message("assistant", SECRETS[3])
    s.compact(f"said {SECRETS[2]}", upto=1)
    s.append_message("user", "more")


def test_no_plaintext_in_any_table(
    make_pg: StoreFactory, dsn: str, schema: str, tmp_path: Path
) -> None:
    provider = LocalKeyFile(tmp_path / "master.key")
    keys = FileKeyStore(tmp_path / "keys")
    store = make_pg(key_provider=provider, key_store=keys)
    _write(store)
    store.session("telegram:42").close()
    store.write_snapshot("telegram:42")
    _write(store, "ended")
    ended = store.session("ended")
    ended.clear(reason="new")
    ended.close()
    store.write_snapshot("ended")
    assert projections.list_sessions(store)
    assert projections.search(store, SECRETS[0]) == []  # sealed sessions: not indexed
    dump = _all_table_bytes(dsn, schema)
    assert b"$sealed" in dump
    assert [s for s in SECRETS if s.encode() in dump] == []
    # Another process (store object) reads it back with the keys, from the snapshot too.
    other = make_pg(key_provider=LocalKeyFile(tmp_path / "master.key"), key_store=keys)
    state = other.load("telegram:42").state
    assert state.metadata["title"] == SECRETS[1]
    assert [m.message["content"] for m in state.messages][-2:] == [SECRETS[3], "more"]
    assert other.load("ended").state.ended[0].title == SECRETS[1]
    # The same bytes as a file store would hold: export and re-import into a sealed file store.
    data = other.read_bytes("telegram:42")
    files = FileStore(tmp_path / "fs", key_provider=provider, key_store=keys)
    assert files.import_bytes("telegram:42", data) == "created"
    assert files.load("telegram:42").state.metadata["title"] == SECRETS[1]


def test_listings_open_with_the_keys_and_stay_empty_without(
    make_pg: StoreFactory, dsn: str, schema: str, tmp_path: Path
) -> None:
    keys = FileKeyStore(tmp_path / "keys")
    store = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    _write(store)
    with make_pg().session("plain:1") as plain:  # no title or preview: looked at, left as is
        plain.append_message("assistant", "")
    rows = {r.key: r for r in projections.list_sessions(store)}
    row = rows["telegram:42"]
    assert (row.title, row.summary) == (SECRETS[1], f"said {SECRETS[2]}")
    assert row.preview == f"I was at {SECRETS[0]}"
    assert (rows["plain:1"].title, rows["plain:1"].preview) == ("", "")
    [conv] = projections.list_conversations(store, "telegram:42")
    assert (conv.title, conv.preview) == (SECRETS[1], f"I was at {SECRETS[0]}")
    bare = {r.key: r for r in projections.list_sessions(make_pg())}  # no keys: the envelope
    assert (bare["telegram:42"].title, bare["telegram:42"].preview) == ("", "")
    assert bare["telegram:42"].messages == row.messages
    assert [s for s in SECRETS if s.encode() in _all_table_bytes(dsn, schema)] == []


def test_erase_redact_and_shared_writers(
    make_pg: StoreFactory, dsn: str, schema: str, tmp_path: Path
) -> None:
    keys = FileKeyStore(tmp_path / "keys")
    a = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    b = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    _write(a)
    wb = b.session("telegram:42")
    wb.append_message("user", "from b")  # b catches up on a's sealed events, then appends
    assert [m.message["content"] for m in wb.state.messages][-2:] == ["more", "from b"]
    a.redact("telegram:42", 2, by="ops")
    state = b.load("telegram:42").state
    assert state.messages[1].message[WITHHELD] == "redacted"
    a.erase("telegram:42", by="ops", reason="request")
    assert all(m.message.get(WITHHELD) for m in b.load("telegram:42").state.messages)
    assert replay.verify(make_pg()).ok  # no keys needed
    with pytest.raises(KeyUnavailableError):
        make_pg().load("telegram:42")
    with pytest.raises(InvalidEventError, match="key_store"):
        make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"))


def test_an_ended_preview_follows_redactions_through_snapshots(
    make_pg: StoreFactory, tmp_path: Path
) -> None:
    keys = FileKeyStore(tmp_path / "keys")
    store = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    s = store.session("e")
    s.append_message("user", SECRETS[0])  # seq 1: the preview
    s.append_message("assistant", SECRETS[3])  # seq 2: not a preview message
    s.clear(reason="new")
    s.append_message("user", "next")
    s.close()
    store.redact("e", 2)
    assert store.write_snapshot("e").health == "valid"
    other = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    loaded = other.load("e")
    assert loaded.snapshot_seq == loaded.state.seq  # from the sealed snapshot
    assert loaded.state.ended[0].preview == [{"role": "user", "content": SECRETS[0]}]
    assert loaded.state.ended[0].preview_seqs == [1]
    store.redact("e", 1)
    assert store.write_snapshot("e").health == "valid"
    assert other.load("e").state.ended[0].preview == []


def test_an_ended_preview_redacted_before_the_end_reads_the_same_from_a_snapshot(
    make_pg: StoreFactory, tmp_path: Path
) -> None:
    """A preview message redacted before its conversation ended is a placeholder in the
    preview the log gives; the sealed snapshot gives the same (it dropped the whole preview)."""
    keys = FileKeyStore(tmp_path / "keys")
    store = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    s = store.session("e")
    s.append_message("user", SECRETS[0])  # seq 1: redacted before the end
    s.append_message("assistant", "a reply")
    s.append_message("user", "a later question")
    s.close()
    store.redact("e", 1)
    s = store.session("e")
    s.clear(reason="new")
    s.append_message("user", "next")
    s.close()
    other = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    from_log = other.load("e")
    assert from_log.snapshot_seq < from_log.state.seq  # no snapshot yet: from the log
    rows = projections.list_conversations(other, "e")
    assert [r.preview for r in rows if not r.current] == ["a later question"]
    assert store.write_snapshot("e").health == "valid"
    third = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    loaded = third.load("e")
    assert loaded.snapshot_seq == loaded.state.seq  # from the sealed snapshot
    assert loaded.state.ended == from_log.state.ended
    rows = projections.list_conversations(third, "e")
    assert [r.preview for r in rows if not r.current] == ["a later question"]


@pytest.mark.anyio
async def test_async_postgres_seals_and_erases(dsn: str, schema: str, tmp_path: Path) -> None:
    from sessionledger.eventlog import AsyncPostgresStore

    keys = FileKeyStore(tmp_path / "keys")
    store = AsyncPostgresStore(
        dsn, schema=schema, key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys
    )
    try:
        s = await store.session("k")
        await s.append_message("user", SECRETS[0])
        await s.append_message("user", "kept")
        assert await store.redact("k", 1) > 0
        state = await store.state("k")
        assert [m.message.get("content") for m in state.messages] == [None, "kept"]
        assert SECRETS[0].encode() not in _all_table_bytes(dsn, schema)
    finally:
        await store.close()

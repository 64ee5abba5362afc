"""The pure pieces of the PostgreSQL store (no server needed): key parts, catalog columns,
byte-offset reads, notification payloads, the migration list, printable targets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import InvalidEventError, MemoryStore, PostgresStore, SchemaVersionError
from sessionledger.eventlog._pg_common import (
    PgTarget,
    catalog_query,
    catalog_values,
    event_row,
    key_parts,
    notify_from,
    notify_payload,
    notify_prefix,
    tail_bytes,
    text,
)
from sessionledger.eventlog._pg_schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    channel_name,
    check_prefix,
    with_check,
)
from sessionledger.projections import SessionID


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "", ":", "x:y", "\x00"]), max_size=6).map("".join))
def test_key_parts_read_keys_like_session_id(key: str) -> None:
    sid = SessionID.from_key(key)
    expected = (None, None, None) if sid is None else (sid.agent, sid.channel, sid.peer)
    assert key_parts(key) == expected


def test_catalog_values_follow_the_fold() -> None:
    store = MemoryStore()
    s = store.session("a:b")
    s.append_message("assistant", "hi first")
    s.append_message("user", [{"type": "image_url"}])  # no text: keep looking
    s.append_message("tool", "ignored", tool_call_id="x")
    s.append_message("user", "the question")
    s.append_message("user", "later")
    s.update_metadata(set={"title": "T\x00itle"})
    s.compact("summary \x00 text", 2)
    values = catalog_values(s.state)
    assert msgspec.json.decode(values.preview) == [
        {"role": "assistant", "content": "hi first"},
        {"role": "user", "content": []},
        {"role": "user", "content": "the question"},
    ]
    assert values.title == "T\ufffditle" and values.summary == "summary \ufffd text"
    assert msgspec.json.decode(values.metadata) == {"title": "T\x00itle"}
    assert (values.seq, values.messages, values.head) == (7, 5, s.state.head)
    assert values.live_tokens == s.state.live_tokens


def test_preview_keeps_at_most_eight_messages_and_cuts_long_text() -> None:
    store = MemoryStore()
    s = store.session("k")
    for _ in range(12):
        s.append_message("assistant", "x" * 5000)
    preview = msgspec.json.decode(catalog_values(s.state).preview)
    assert len(preview) == 8 and all(len(m["content"]) == 2000 for m in preview)


def test_tail_bytes_slices_from_any_offset() -> None:
    lines = [b"header\n", b"one\n", b"two\n"]
    rows: list[tuple[Any, ...]] = []
    pos = 0
    for line in lines:
        rows.append((pos, line))
        pos += len(line)
    data = b"".join(lines)
    for offset in range(len(data) + 3):
        start = max(i for i, r in enumerate(rows) if r[0] <= offset)
        assert tail_bytes(rows[start:], offset) == (len(data), data[offset:])
    assert tail_bytes([], 5) == (5, b"")


@settings(max_examples=200, deadline=None)
@given(
    key=st.one_of(
        st.text(),
        st.sampled_from(['q"uote', "back\\slash", "\x00nul", "\u2028", "k" * 6990, "k" * 7000]),
    ),
    seq=st.one_of(st.integers(0, 10), st.integers(0, 2**62)),
)
def test_a_writers_notify_payload_is_notify_payload(key: str, seq: int) -> None:
    """The payload a writer builds from the key encoded once is byte for byte the one
    encoded whole, long keys (null in the payload) included."""
    assert notify_from(notify_prefix(key), key, seq) == notify_payload(key, seq)


def test_notify_payload_and_event_row() -> None:
    assert msgspec.json.decode(notify_payload("a:b", 3)) == ["a:b", 3]
    assert msgspec.json.decode(notify_payload("k" * 9000, 3)) == [None, 3]
    # PostgreSQL's cap is in bytes: 2,700 three-byte characters are 8,100 bytes
    long = "\u4f60" * 2700
    assert msgspec.json.decode(notify_payload(long, 3)) == [None, 3]
    short = "\u4f60" * 2000
    assert msgspec.json.decode(notify_payload(short, 3)) == [short, 3]
    for key in (long, short, "\u4f60" * 2330, "\u4f60" * 2331, "\U0001f600" * 1749):
        assert notify_from(notify_prefix(key), key, 99) == notify_payload(key, 99)
    line = b'{"type":"message","seq":4,"ts":"2026-01-01T00:00:00Z","id":"e1","message":{}}'
    assert event_row(line) == (4, "e1", "message")
    assert text(None) is None and text("a\x00b") == "a\ufffdb"


def test_migrations_are_numbered_from_one() -> None:
    assert [m[0] for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert MIGRATIONS[-1][0] == SCHEMA_VERSION
    error = SchemaVersionError("db", 9, 1)
    assert "upgrade" in str(error) and (error.found, error.known) == (9, 1)


def test_the_schema_check_goes_ahead_of_any_statement_as_a_cte() -> None:
    prefix = check_prefix('a"b')
    marker = f'"a""b"."sessionledger_schema_v{SCHEMA_VERSION}"()'.encode()
    assert prefix == b"WITH sessionledger_schema_check AS (SELECT " + marker + b") "
    assert with_check(prefix, b"SELECT 1") == prefix + b"SELECT 1"
    # A statement with its own WITH list: the check joins it (one WITH per statement).
    assert with_check(prefix, b"WITH x AS (SELECT 1) SELECT * FROM x") == (
        b"WITH sessionledger_schema_check AS (SELECT " + marker + b"), x AS (SELECT 1) "
        b"SELECT * FROM x"
    )
    assert with_check(prefix, b"with recursive r AS (SELECT 1) SELECT * FROM r") == (
        b"WITH RECURSIVE sessionledger_schema_check AS (SELECT " + marker + b"), "
        b"r AS (SELECT 1) SELECT * FROM r"
    )


def test_target_names_host_port_never_the_password() -> None:
    where = PgTarget("postgresql://bob:hunter2@db.example:6543/agents", "s", 1).where
    assert where == "postgresql://db.example:6543/agents (schema s)"
    assert PgTarget("dbname=x", "s", 1).where == "postgresql://localhost:5432/x (schema s)"


def test_catalog_query_binds_every_filter() -> None:
    class Filter(msgspec.Struct):
        prefix: str | None = "ab"
        agent: str | None = "a"
        channel: str | None = None
        peer: str | None = "p"
        state: str | None = "idle"
        created_after: datetime | None = datetime(2026, 1, 1, tzinfo=UTC)
        created_before: datetime | None = None
        order: str = "created"
        limit: int | None = 20
        offset: int = 40

    query, params = catalog_query("s", Filter())
    assert params == [b"ab", b"ab\xff", b"a", b"p", "idle", Filter().created_after, 20, 40]
    assert b"ORDER BY created_at DESC, key LIMIT %s OFFSET %s" in query
    with pytest.raises(ValueError):
        catalog_query("s", Filter(order="sideways"))


def test_store_refuses_a_bad_schema_name_before_connecting() -> None:
    with pytest.raises(ValueError):
        PostgresStore("postgresql://nobody@127.0.0.1:1/x", schema="")


@pytest.mark.parametrize("schema", ["a%b", "a%sb", "a%%b", "100%", "a\x00b"])
def test_store_refuses_a_schema_name_psycopg_cannot_carry_before_connecting(schema: str) -> None:
    """A '%' in the schema name is read by psycopg as a placeholder in every statement sent
    with parameters ('a%%b' even names another schema, 'a%b'); a NUL cannot be sent at all.
    Such a store could never be used: it is refused with the library's error, before any
    connection (the DSN points nowhere)."""
    pytest.importorskip("psycopg")
    with pytest.raises(InvalidEventError, match="schema"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/x", schema=schema, connect_timeout=0.5)


def test_store_refuses_a_schema_name_postgresql_would_cut_before_connecting() -> None:
    """PostgreSQL cuts a name to 63 bytes: two schema names of 22 three-byte characters that
    differ in the last were one schema (a store on one saw the other's sessions)."""
    pytest.importorskip("psycopg")
    with pytest.raises(InvalidEventError, match="63 bytes"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/x", schema="\u6d4b" * 21 + "a")


@pytest.mark.parametrize("schema", ["s", "a" * 40, "\u6d4b" * 17, "\u6d4b" * 18, "\u6d4b" * 21])
def test_the_notify_channel_fits_postgresqls_63_bytes(schema: str) -> None:
    """pg_notify refuses a channel name of 64 bytes or more ('channel name too long'): cut
    by characters, a schema of 18 three-byte characters made every followed append fail."""
    name = channel_name(schema)
    assert len(name.encode()) <= 63
    assert name == f"sessionlog_{schema}" or len(f"sessionlog_{schema}".encode()) > 63
    assert f"sessionlog_{schema}".startswith(name)


def test_import_eventlog_does_not_import_psycopg() -> None:
    import subprocess
    import sys

    code = "import sys, eventlog; assert 'psycopg' not in sys.modules, 'psycopg imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_idle_status_the_pool_compares_is_libpqs() -> None:
    psycopg = pytest.importorskip("psycopg")
    from sessionledger.eventlog import _pg_conn

    assert psycopg.pq.TransactionStatus.IDLE == _pg_conn._IDLE

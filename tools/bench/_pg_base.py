"""What the PostgreSQL benchmarks share: the server, throwaway schemas, plain psycopg's side.

Invariants:
- The server is ``$SESSIONLEDGER_BENCH_PG`` or else ``$SESSIONLEDGER_TEST_PG``; without either
  every PostgreSQL benchmark reports "n/a" with a note saying how to run it.
- Each benchmark works in schemas of its own (``bench_<random>``), dropped at the end.
- Plain psycopg does the same SQL work a user would write by hand: the same line bytes into a
  table shaped like ``events`` (same keys and indexes), ``INSERT`` then ``COMMIT``; the same
  ``SELECT`` of the same rows on an open connection. It keeps no catalog, checks nothing and
  decodes nothing: that is the floor the store is measured against.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ._core import Context, Row
from ._write import _append_all, _messages

ENV = ("SESSIONLEDGER_BENCH_PG", "SESSIONLEDGER_TEST_PG")
RIVAL = "plain psycopg"


def dsn() -> str | None:
    """The benchmark server's DSN, or None."""
    for name in ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


def missing(group: str, what: str) -> list[Row]:
    """The row a PostgreSQL benchmark reports without a server."""
    return [
        Row(group, what, "ms", None, note=f"no PostgreSQL: set {ENV[0]} or {ENV[1]}", rival=RIVAL)
    ]


@contextmanager
def schema(server: str) -> Iterator[str]:
    """A fresh schema name, dropped (with everything in it) afterwards."""
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def plain_table(server: str, schema_name: str) -> str:
    """Create ``<schema>.plain``, shaped like the store's ``events`` table; return its name."""
    import psycopg

    table = f'"{schema_name}".plain'
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema_name}"')
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (key bytea NOT NULL, seq bigint NOT NULL, "
            "pos bigint NOT NULL, id bytea NOT NULL, line bytea NOT NULL, "
            "PRIMARY KEY (key, seq), UNIQUE (key, id))"
        )
    return table


def lines(ctx: Context, count: int) -> list[tuple[str, bytes]]:
    """(event id, line) of ``count`` workload messages as the store encodes them."""
    from sessionledger.eventlog import MemoryStore, decode_log

    cached: list[tuple[str, bytes]] | None = ctx.cache.get(f"pg-lines:{count}")
    if cached is not None:
        return cached
    msgs = (_messages(ctx) * (count // len(_messages(ctx)) + 1))[:count]
    store = MemoryStore()
    _append_all(store.session("bench:plain"), msgs)
    data = store.read_bytes("bench:plain")
    events = decode_log(data).events
    out = [(e.id, line) for e, line in zip(events, data.splitlines(keepends=True)[1:], strict=True)]
    ctx.cache[f"pg-lines:{count}"] = out
    return out


class PlainWriter:
    """Plain psycopg: one connection, ``INSERT`` of a line then ``COMMIT``."""

    def __init__(self, server: str, table: str, key: str, *, sync: bool = True) -> None:
        import psycopg

        self.conn = psycopg.connect(server)
        if not sync:
            self.conn.execute("SET synchronous_commit TO off")
            self.conn.commit()
        self.sql = f"INSERT INTO {table} (key, seq, pos, id, line) VALUES (%s, %s, %s, %s, %s)"
        self.key = key.encode()
        self.seq = 0
        self.pos = 0

    def append(self, event_id: str, line: bytes) -> None:
        """Insert one line and commit."""
        self.seq += 1
        self.conn.execute(self.sql, (self.key, self.seq, self.pos, event_id.encode(), line))
        self.conn.commit()
        self.pos += len(line)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def both(pair: tuple[float, float | None]) -> tuple[float, float]:
    """Ours and the rival's median from :func:`medians` run with both sides."""
    ours, theirs = pair
    assert theirs is not None
    return ours, theirs


def message_fields(m: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """(role, content, other fields) of a workload message, for ``append_message``."""
    fields = dict(m)
    return fields.pop("role"), fields.pop("content", None), fields

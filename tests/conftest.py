"""Shared pytest configuration: async tests run on asyncio and on trio; ``store`` is one store of
each backend in turn (a test module may define its own ``store`` instead)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionledger.eventlog import BaseStore, FileStore, MemoryStore


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test once per backend."""
    backend: str = request.param
    return backend


@pytest.fixture(params=["file", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    """A file, a memory and a PostgreSQL store (the last skipped without a server)."""
    if request.param == "postgres":
        yield from _postgres_store()
        return
    made: BaseStore = (
        FileStore(tmp_path / "s", durability="none") if request.param == "file" else MemoryStore()
    )
    with made:
        yield made


def _postgres_store() -> Iterator[BaseStore]:
    dsn = os.environ.get("SESSIONLEDGER_TEST_PG")
    if not dsn:
        pytest.skip(
            "PostgreSQL tests need a server: set SESSIONLEDGER_TEST_PG (see docs/postgres.md)"
        )
    import psycopg

    from sessionledger.eventlog import PostgresStore

    schema = f"t_{os.urandom(6).hex()}"
    made = PostgresStore(dsn, schema=schema)
    try:
        yield made
    finally:
        made.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

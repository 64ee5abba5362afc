"""Fixtures of the PostgreSQL tests: the server from ``SESSIONLEDGER_TEST_PG``, one schema per test.

Every test may name ``dsn``, ``schema`` and ``make_pg`` (``conftest.py`` shares them).
Without the variable every PostgreSQL test is skipped with a message saying how to run it.
Each test gets a fresh schema named ``t_<random>`` that is dropped afterwards, so parallel runs
and leftovers never interfere.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from hashlib import blake2b
from pathlib import Path
from typing import Any

import pytest

from sessionledger.eventlog import PostgresStore

ENV = "SESSIONLEDGER_TEST_PG"
SKIP_REASON = (
    f"PostgreSQL tests need a server: set {ENV}, e.g. "
    f"{ENV}=postgresql://postgres@127.0.0.1:5432/test (see docs/postgres.md)"
)


def pg_dsn() -> str:
    """The DSN of the test server, or skip the test with how to run it."""
    dsn = os.environ.get(ENV)
    if not dsn:
        pytest.skip(SKIP_REASON)
    return dsn


def drop_schema(dsn: str, schema: str) -> None:
    """Drop a test schema and everything in it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def dsn() -> str:
    """The test server's DSN (skips without ``SESSIONLEDGER_TEST_PG``)."""
    return pg_dsn()


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A fresh schema name for this test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        drop_schema(dsn, name)


StoreFactory = Callable[..., PostgresStore]


@pytest.fixture
def make_pg(dsn: str, schema: str) -> Iterator[StoreFactory]:
    """Open PostgresStores on this test's schema (each another 'process'); closed afterwards."""
    stores: list[PostgresStore] = []

    def make(**kwargs: Any) -> PostgresStore:
        kwargs.setdefault("schema", schema)
        kwargs.setdefault("pool_size", 4)
        store = PostgresStore(dsn, **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


class SchemaPerStore:
    """For the PostgreSQL contract classes: each store a test makes gets the schema its
    ``tmp_path`` names; after the test its pools are closed and its schemas dropped."""

    _dsn: str
    _schemas: set[str]
    _closers: list[Callable[[], object]]

    @pytest.fixture(autouse=True)
    def _server(self, dsn: str) -> Iterator[None]:
        self._dsn = dsn
        self._schemas = set()
        self._closers = []
        yield
        for close in self._closers:  # the suites leave some stores open
            close()
        for name in self._schemas:
            drop_schema(dsn, name)

    def schema_for(self, tmp_path: Path) -> str:
        """The schema of ``tmp_path`` (one per store directory a suite would use)."""
        name = "t_" + blake2b(f"{_RUN}:{tmp_path}".encode(), digest_size=8).hexdigest()
        self._schemas.add(name)
        return name

    def close_after(self, close: Callable[[], object]) -> None:
        """Call ``close`` (a store's) when the test is over."""
        self._closers.append(close)


_RUN = uuid.uuid4().hex

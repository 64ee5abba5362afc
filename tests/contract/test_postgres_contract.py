# ruff: noqa: F811 - the fixture imported from pg_support is named as a test argument
"""The store contract on the PostgreSQL store (skipped without ``SESSIONLEDGER_TEST_PG``).

Each test's ``tmp_path`` names its own schema, so "reopen" is a new store on the same schema;
the schemas are dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from hashlib import blake2b
from pathlib import Path
from typing import Any

import pytest
from pg_support import drop_schema, dsn  # noqa: F401
from store_contract import StoreContract

from sessionledger.eventlog import BaseStore, PostgresStore

_RUN = uuid.uuid4().hex

pytestmark = pytest.mark.postgres


class TestPostgresStore(StoreContract):
    _dsn: str
    _schemas: set[str]
    _stores: list[PostgresStore]

    @pytest.fixture(autouse=True)
    def _server(self, dsn: str) -> Iterator[None]:
        self._dsn = dsn
        self._schemas = set()
        self._stores = []
        yield
        for store in self._stores:  # the suite leaves some open; close their pools
            store.close()
        for schema in self._schemas:
            drop_schema(dsn, schema)

    def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
        schema = "t_" + blake2b(f"{_RUN}:{tmp_path}".encode(), digest_size=8).hexdigest()
        self._schemas.add(schema)
        kwargs.setdefault("pool_size", 4)
        store = PostgresStore(self._dsn, schema=schema, **kwargs)
        self._stores.append(store)
        return store

"""The store contract on the PostgreSQL store (skipped without ``SESSIONLEDGER_TEST_PG``).

Each test's ``tmp_path`` names its own schema, so "reopen" is a new store on the same schema;
the schemas are dropped afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_support import SchemaPerStore
from store_contract import StoreContract

from sessionledger.eventlog import BaseStore, PostgresStore

pytestmark = pytest.mark.postgres


class TestPostgresStore(SchemaPerStore, StoreContract):
    def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
        kwargs.setdefault("pool_size", 4)
        store = PostgresStore(self._dsn, schema=self.schema_for(tmp_path), **kwargs)
        self.close_after(store.close)
        return store

"""Shared pytest configuration: async tests run on asyncio and on trio; ``store`` is one store of
each backend in turn (a test module may define its own ``store`` instead); the PostgreSQL
fixtures of ``pg_support`` (``dsn``, ``schema``, ``make_pg``) are shared with every test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sessionledger.eventlog import BaseStore, FileStore, MemoryStore

if TYPE_CHECKING:  # imported by pytest as a plugin: importing it here first would stop that
    from pg_support import StoreFactory

pytest_plugins = ["pg_support"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test once per backend."""
    backend: str = request.param
    return backend


@pytest.fixture(params=["file", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    """A file, a memory and a PostgreSQL store (the last skipped without a server)."""
    if request.param == "postgres":
        make: StoreFactory = request.getfixturevalue("make_pg")
        yield make()
        return
    made: BaseStore = (
        FileStore(tmp_path / "s", durability="none") if request.param == "file" else MemoryStore()
    )
    with made:
        yield made

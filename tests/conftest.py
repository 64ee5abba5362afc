"""Shared pytest configuration: async tests run on asyncio and on trio; ``store`` is one store of
each backend in turn (a test module may define its own ``store`` instead); the PostgreSQL
fixtures of ``pg_support`` (``dsn``, ``schema``, ``make_pg``) are shared with every test, and so
are the nanobot drop-in's ``workspace`` and ``manager``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sessionledger.eventlog import BaseStore, FileStore, MemoryStore

if TYPE_CHECKING:  # imported by pytest as a plugin: importing it here first would stop that
    from pg_support import StoreFactory

    from sessionledger.tools.nanobot import SessionManager

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


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A nanobot workspace directory (not created: the drop-in manager makes what it needs)."""
    return tmp_path / "ws"


@pytest.fixture
def manager(workspace: Path) -> Iterator[SessionManager]:
    """The nanobot drop-in ``SessionManager`` over ``workspace``, closed after the test."""
    from sessionledger.tools.nanobot import SessionManager

    with SessionManager(workspace) as m:
        yield m

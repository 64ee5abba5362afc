"""pytest plugin: the Agents SDK's ``SQLiteSession`` becomes an ``EventLogSession``.

Load with ``-p sessionledger.tools.peer._agents_plugin``. ``SQLiteSession(session_id,
db_path=":memory:", sessions_table=..., messages_table=..., session_settings=None)`` is mapped
to an ``EventLogSession`` on a ``MemoryStore`` of its own (``:memory:``, as SQLite's in-memory
database is private to its connection) or on the ``FileStore`` at ``<db_path>.ledger/<messages
table>``, one store per directory per process, shared like SQLite's file.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from sessionledger.eventlog import FileStore, MemoryStore, Store
from sessionledger.tools.openai_agents import EventLogSession

from ._swap import swap

_stores: dict[Path, FileStore] = {}
_guard = threading.Lock()


def _store_for(db_path: str | Path, messages_table: str) -> tuple[Store, bool]:
    if str(db_path) == ":memory:":
        return MemoryStore(), True
    root = Path(f"{Path(db_path).expanduser().resolve()}.ledger") / messages_table
    with _guard:
        store = _stores.get(root)
        if store is None:
            store = _stores[root] = FileStore(root, durability="none")
        return store, False


def pytest_configure(config: pytest.Config) -> None:
    """Swap the class before the SDK's test modules import it."""
    from agents.memory import SessionABC
    from agents.memory.sqlite_session import SQLiteSession

    class LedgerSQLiteSession(EventLogSession, SessionABC):
        """``SQLiteSession``'s constructor over an event-log store."""

        def __init__(
            self,
            session_id: str,
            db_path: str | Path = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ) -> None:
            store, owned = _store_for(db_path, messages_table)
            super().__init__(session_id, store, session_settings=session_settings)
            self.db_path = db_path
            self.sessions_table = sessions_table
            self.messages_table = messages_table
            self._owned = owned

    LedgerSQLiteSession.__name__ = LedgerSQLiteSession.__qualname__ = "SQLiteSession"
    swap(SQLiteSession, LedgerSQLiteSession)

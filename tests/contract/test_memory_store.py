"""The store contract on the in-memory reference store (no persistence: reopen reuses it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from store_contract import StoreContract

from sessionledger.eventlog import BaseStore, MemoryStore


class TestMemoryStore(StoreContract):
    persistent = False

    def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
        return MemoryStore(**kwargs)

    def make_peer(self, store: BaseStore, tmp_path: Path, **kwargs: Any) -> BaseStore:
        assert isinstance(store, MemoryStore)
        return store.peer()

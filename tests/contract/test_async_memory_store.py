"""The async store contract on the in-memory store (asyncio and trio; no persistence)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from async_store_contract import AsyncStoreContract

from sessionledger.eventlog import AsyncBaseStore, AsyncMemoryStore


class TestAsyncMemoryStore(AsyncStoreContract):
    persistent = False

    def make_store(self, tmp_path: Path, **kwargs: Any) -> AsyncBaseStore:
        return AsyncMemoryStore(**kwargs)

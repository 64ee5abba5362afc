"""The async store contract on the file store (asyncio and trio)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from async_store_contract import AsyncStoreContract

from sessionledger.eventlog import AsyncBaseStore, AsyncFileStore


class TestAsyncFileStore(AsyncStoreContract):
    def make_store(self, tmp_path: Path, **kwargs: Any) -> AsyncBaseStore:
        return AsyncFileStore(tmp_path / "sessions", **kwargs)

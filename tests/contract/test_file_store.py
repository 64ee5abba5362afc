"""The store contract on the embedded file store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from store_contract import StoreContract

from sessionledger.eventlog import BaseStore, FileStore


class TestFileStore(StoreContract):
    def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
        return FileStore(tmp_path / "sessions", **kwargs)

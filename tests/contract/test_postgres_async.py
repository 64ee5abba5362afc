"""The async store contract on AsyncPostgresStore, on asyncio and trio, plus its own behaviours.

Skipped without ``SESSIONLEDGER_TEST_PG``; each ``tmp_path`` names its own schema, dropped after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from async_store_contract import AsyncStoreContract
from pg_support import SchemaPerStore

from sessionledger.eventlog import AsyncBaseStore, AsyncPostgresStore, ConflictError, PostgresStore

pytestmark = pytest.mark.postgres


class TestAsyncPostgresStore(SchemaPerStore, AsyncStoreContract):
    def make_store(self, tmp_path: Path, **kwargs: Any) -> AsyncBaseStore:
        kwargs.setdefault("pool_size", 8)
        store = AsyncPostgresStore(self._dsn, schema=self.schema_for(tmp_path), **kwargs)
        self.close_after(store.postgres.close)
        return store


@pytest.mark.anyio
async def test_async_and_sync_writers_share_one_session(dsn: str, schema: str) -> None:
    store = await AsyncPostgresStore.connect(dsn, schema=schema, pool_size=8)
    other = PostgresStore(dsn, schema=schema, pool_size=2)
    try:
        w = await store.session("k:1")

        async def append(n: int) -> None:
            for i in range(10):
                await w.append_message("user", f"{n}-{i}")

        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(append, n)
        assert other.session("k:1").append_message("user", "from sync") == 51
        with pytest.raises(ConflictError) as info:
            await w.append_message("user", "stale", expected_seq=50)
        assert info.value.actual == 51
        assert await w.refresh() == 51
        assert [e.seq for e in other.load("k:1").events] == list(range(1, 52))
        assert (await store.state("k:1")).seq == 51
        assert await store.committed("k:1", other.load("k:1").events[-1].id) == 51
    finally:
        other.close()
        await store.close()


@pytest.mark.anyio
async def test_batch_is_one_transaction_on_one_thread_and_rolls_back_whole(
    dsn: str, schema: str
) -> None:
    store = await AsyncPostgresStore.connect(dsn, schema=schema, pool_size=4)
    other = PostgresStore(dsn, schema=schema, pool_size=2)
    try:
        w = await store.session("b:1")
        async with store.batch("b:1") as bw:
            for i in range(5):
                assert await bw.append_message("user", f"m{i}") == i + 1
            # Inside the block nothing is committed yet: another store sees none of it.
            assert not other.exists("b:1") or other.state("b:1").seq == 0
        assert other.state("b:1").seq == 5
        with pytest.raises(RuntimeError):
            async with store.batch("b:1") as bw:
                await bw.append_message("user", "never")
                raise RuntimeError("abort the batch")
        assert other.state("b:1").seq == 5
        with anyio.move_on_after(0.2):  # cancelled inside: rolled back as well
            async with store.batch("b:1") as bw:
                await bw.append_message("user", "cancelled")
                await anyio.sleep(5)
        assert other.state("b:1").seq == 5
        assert await w.append_message("user", "after") == 6  # the writer's state was rebuilt
        assert [m.message["content"] for m in (await store.state("b:1")).messages][-2:] == [
            "m4",
            "after",
        ]
    finally:
        other.close()
        await store.close()

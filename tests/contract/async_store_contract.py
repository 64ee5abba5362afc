"""The async store contract: the async twin of ``store_contract``, run on asyncio and trio.

A backend's test file subclasses :class:`AsyncStoreContract` and says how to make the store.
``make_store`` must return a store over the same sessions each time it is called with the same
``tmp_path``; a backend without persistence sets ``persistent = False`` and :meth:`reopen`
closes the writers and reuses the same object. Logs written through the async API must be the
very format the sync API writes: every test checks the bytes with the sync codec.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from logcheck import check_log
from store_contract import EVERY_KIND

from sessionledger.eventlog import (
    AsyncBaseStore,
    AsyncSessionWriter,
    ConflictError,
    InvalidEventError,
    MessageAppended,
    SessionNotFoundError,
    StoreClosedError,
    decode_log,
    fold,
    verify_chain,
)

KEY = "telegram:42"


async def write_conversation(s: AsyncSessionWriter) -> None:
    """A realistic session with every kind of event, written through the async API."""
    await s.append_message("user", "Plan a trip to Kyoto", media=["/tmp/map.png"])
    await s.append_message(
        "assistant",
        None,
        tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "web_search"}}],
    )
    await s.append_message("tool", "Early April.", tool_call_id="call_1", name="web")
    await s.append_message_dict({"role": "assistant", "content": "Go in April \u2028 \U0001f338"})
    await s.update_metadata(set={"title": "Kyoto trip", "_last_summary": "old"}, unset=["x"])
    await s.mark_consolidated(2)
    done = await s.compact("The user plans Kyoto.", 3, tokens_before=900, tokens_after=120)
    assert done.tokens_saved == 780 and done.removed_messages == 3
    await s.append_message("assistant", "partial")
    await s.retract()
    await s.trim(1, "retain_suffix")
    await s.set_lifecycle("idle")
    await s.clear()
    await s.append_message("user", "New topic")
    await s.set_lifecycle("archived", "archive")


class AsyncStoreContract(abc.ABC):
    """What every async store must do; subclass it and implement :meth:`make_store`."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    persistent: ClassVar[bool] = True

    @abc.abstractmethod
    def make_store(self, tmp_path: Path, **kwargs: Any) -> AsyncBaseStore:
        """An async store over the sessions kept at ``tmp_path`` (the same ones every call)."""

    async def reopen(self, store: AsyncBaseStore, tmp_path: Path, **kw: Any) -> AsyncBaseStore:
        """Close ``store`` and return a store over the same sessions."""
        if self.persistent:
            await store.close()
            return self.make_store(tmp_path, **kw)
        for key in await store.keys():
            await (await store.session(key)).close()
        return store

    # -- sessions and the write API ----------------------------------------------------------

    async def test_new_session(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            assert await store.keys() == [] and not await store.exists(KEY)
            s = await store.session(KEY, metadata={"channel": "telegram"})
            assert s.seq == 0 and s.state.metadata == {"channel": "telegram"}
            assert (await store.session(KEY)).state is s.state
            assert await store.exists(KEY) and await store.keys() == [KEY]
            assert (await store.load(KEY)).state == s.state
            assert await store.state(KEY) is s.state

    async def test_every_kind_survives_reopen(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        s = await store.session(KEY)
        await write_conversation(s)
        state = s.state.copy()
        data = await store.read_bytes(KEY)
        assert len(check_log(data)) == state.seq == 14
        decoded = decode_log(data)
        assert {type(e) for e in decoded.events} == set(EVERY_KIND)
        assert decoded.header is not None and fold(decoded.header, decoded.events) == state
        assert [m.message["content"] for m in state.messages] == ["New topic"]
        store = await self.reopen(store, tmp_path)
        assert await store.read_bytes(KEY) == data
        again = await store.session(KEY)
        assert again.state == state
        assert await again.append_message("user", "after reopen") == 15
        check_log(await store.read_bytes(KEY))
        await store.close()

    async def test_async_iteration_of_events(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            s = await store.session(KEY)
            for i in range(5):
                await s.append_message("user", str(i))
            seen = [e async for e in store.events(KEY)]
            assert [e.seq for e in seen] == [1, 2, 3, 4, 5]
            assert [e.message["content"] for e in seen if isinstance(e, MessageAppended)] == [
                "0",
                "1",
                "2",
                "3",
                "4",
            ]
            with pytest.raises(SessionNotFoundError):
                [e async for e in store.events("nope")]

    async def test_absent_session(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            assert not await store.exists("nope")
            with pytest.raises(SessionNotFoundError):
                await store.load("nope")
            with pytest.raises(SessionNotFoundError):
                await store.read_bytes("nope")
            with pytest.raises(SessionNotFoundError):
                await store.open("nope")
            assert await store.delete("nope") is False

    async def test_expected_seq_conflict_writes_nothing(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            s = await store.session(KEY)
            assert await s.append_message("user", "a", expected_seq=0) == 1
            before = await store.read_bytes(KEY)
            with pytest.raises(ConflictError) as info:
                await s.append_message("user", "b", expected_seq=0)
            assert (info.value.expected, info.value.actual) == (0, 1)
            assert await store.read_bytes(KEY) == before and s.seq == 1

    async def test_retried_id_returns_original_seq(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        s = await store.session(KEY)
        assert await s.append_message("user", "a", id="evt-1") == 1
        assert await s.append_message("user", "b") == 2
        assert await s.append_message("user", "a", id="evt-1") == 1
        store = await self.reopen(store, tmp_path)
        s = await store.session(KEY)
        assert await s.append_message("user", "a", id="evt-1") == 1
        assert s.seq == 2
        await store.close()

    async def test_bad_input_writes_nothing(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            s = await store.session(KEY)
            await s.append_message("user", "x")
            before = await store.read_bytes(KEY)
            bad: list[Callable[[], Awaitable[int]]] = [
                lambda: s.append_message("", "x"),
                lambda: s.append_message("user", object()),
                lambda: s.mark_consolidated(5),
                lambda: s.trim(2, "file_cap"),
                lambda: s.trim(1, "nope"),  # type: ignore[arg-type]
                lambda: s.retract(3),
                lambda: s.set_lifecycle("gone"),  # type: ignore[arg-type]
                lambda: s.append_message("user", "x", id=""),
                lambda: s.append_message("user", "x", expected_seq=-1),
            ]
            for call in bad:
                with pytest.raises(InvalidEventError):
                    await call()
            assert await store.read_bytes(KEY) == before and s.seq == 1

    @pytest.mark.parametrize("durability", ["always", "batch", "none"])
    async def test_durabilities(self, tmp_path: Path, durability: str) -> None:
        store = self.make_store(tmp_path, durability=durability)
        assert store.durability == durability
        s = await store.session(KEY)
        for i in range(10):
            assert await s.append_message("user", str(i)) == i + 1
        await s.flush()
        if durability != "none":
            assert s.durable_seq == 10
        store = await self.reopen(store, tmp_path, durability=durability)
        assert (await store.load(KEY)).state.seq == 10
        await store.close()

    async def test_hash_key(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path, hash_key="secret") as store:
            s = await store.session(KEY)
            await s.append_message("user", "x")
            data = await store.read_bytes(KEY)
            check_log(data, store.hash_key)
            assert verify_chain(data).problems != []

    async def test_delete_is_for_good(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            s = await store.session(KEY)
            await s.append_message("user", "x")
            assert await store.delete(KEY) is True
            assert s.closed and not await store.exists(KEY)
            fresh = await store.session(KEY)
            assert fresh is not s and fresh.seq == 0

    async def test_closed_store_and_writer_raise(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        s = await store.session(KEY)
        await s.append_message("user", "x")
        await s.close()
        with pytest.raises(StoreClosedError):
            await s.append_message("user", "y")
        s = await store.session(KEY)  # a closed writer is replaced by a fresh one
        assert s.seq == 1
        await store.close()
        assert s.closed
        with pytest.raises(StoreClosedError):
            await store.session(KEY)
        with pytest.raises(StoreClosedError):
            await s.append_message("user", "y")

    async def test_sync_store_reads_what_async_wrote(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        s = await store.session(KEY)
        await write_conversation(s)
        state = s.state.copy()
        await s.close()
        assert store.sync.load(KEY).state == state
        sync_writer = store.sync.session(KEY)
        assert sync_writer.append_message("user", "sync") == state.seq + 1
        sync_writer.close()
        assert (await store.load(KEY)).state.seq == state.seq + 1
        await store.close()

    # -- many writers ------------------------------------------------------------------------

    async def test_50_tasks_one_session(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            s = await store.session(KEY)

            async def work(task: int) -> None:
                for i in range(20):
                    await s.append_message("user", f"{task}:{i}")

            async with anyio.create_task_group() as tg:
                for task in range(50):
                    tg.start_soon(work, task)
            data = await store.read_bytes(KEY)
        assert check_log(data) == list(range(1, 1001))
        contents = [
            e.message["content"] for e in decode_log(data).events if isinstance(e, MessageAppended)
        ]
        assert sorted(contents) == sorted(f"{t}:{i}" for t in range(50) for i in range(20))
        for task in range(50):  # each task's own appends stay in order
            mine = [c for c in contents if c.startswith(f"{task}:")]
            assert mine == [f"{task}:{i}" for i in range(20)]

    async def test_50_tasks_many_sessions(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:

            async def work(task: int) -> None:
                for i in range(20):
                    s = await store.session(f"chat:{(task + i) % 10}")
                    await s.append_message("user", f"{task}:{i}")

            async with anyio.create_task_group() as tg:
                for task in range(50):
                    tg.start_soon(work, task)
            seen: list[str] = []
            for n in range(10):
                data = await store.read_bytes(f"chat:{n}")
                assert len(check_log(data)) == 100
                seen += [
                    e.message["content"]
                    for e in decode_log(data).events
                    if isinstance(e, MessageAppended)
                ]
        assert sorted(seen) == sorted(f"{t}:{i}" for t in range(50) for i in range(20))

    async def test_concurrent_session_calls_share_one_log(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            got: list[AsyncSessionWriter] = []

            async def open_it() -> None:
                got.append(await store.session(KEY))

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(open_it)
            assert len(got) == 10 and all(w.state is got[0].state for w in got)  # one log

    # -- cancellation and shutdown -----------------------------------------------------------

    async def test_cancelled_before_the_write_writes_nothing(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            s = await store.session(KEY)
            await s.append_message("user", "kept")
            before = await store.read_bytes(KEY)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await s.append_message("user", "never")
            assert scope.cancelled_caught
            assert await store.read_bytes(KEY) == before and s.seq == 1

    async def test_close_syncs_pending_and_is_shielded(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        s = await store.session(KEY)
        for i in range(5):
            await s.append_message("user", str(i))
        with anyio.CancelScope() as scope:
            scope.cancel()
            await store.close()  # shielded: runs to the end although cancelled
        assert s.closed
        store = await self.reopen(store, tmp_path) if self.persistent else store
        assert (await store.load(KEY)).state.seq == 5
        await store.close()

"""Async parity: every public method of a sync store has its twin on each async store, and
every projection and replay function that takes a store has its awaitable twin in ``aio``."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from sessionledger import aio, projections, replay
from sessionledger.eventlog import (
    AsyncFileStore,
    AsyncMemoryStore,
    AsyncPostgresStore,
    FileStore,
    MemoryStore,
    PostgresStore,
)

#: Not I/O: the same plain (sync) attribute or method on the async store.
PLAIN = {
    "hash_key",
    "max_open_files",
    "on_end",
    "on_close",  # registers a hook; runs when the store closes
    "open_files",
    "open_report",
    "path_for",
    "peer",
    "quarantine_path",
    "quarantined",
    "snapshot_every",
    "snapshot_path",
    "trash_ttl",
    "token_counter",
    "durability",
    "follow_waker",  # builds a waker; its own waits are async
    "events",  # an async iterator: ``async for e in store.events(key)``
    "session",  # awaitable, and an async context manager
    "open",
}
PAIRS = [
    (FileStore, AsyncFileStore),
    (MemoryStore, AsyncMemoryStore),
    (PostgresStore, AsyncPostgresStore),
]


def public(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def is_context_manager_function(func: object) -> bool:
    """A method made by ``contextlib.contextmanager`` (its twin is an async context manager)."""
    return inspect.isgeneratorfunction(getattr(func, "__wrapped__", None))


def is_async_context_manager_function(func: object) -> bool:
    return inspect.isasyncgenfunction(getattr(func, "__wrapped__", None))


@pytest.mark.parametrize(("sync", "twin"), PAIRS, ids=lambda c: c.__name__)
def test_every_sync_store_method_has_its_async_twin(sync: type, twin: type) -> None:
    # No exceptions list: a sync method without its twin fails here until the twin exists.
    missing, not_awaited = [], []
    for name in public(sync):
        if not hasattr(twin, name):
            missing.append(name)
            continue
        member = inspect.getattr_static(sync, name)
        if name in PLAIN or not callable(member) or isinstance(member, property):
            continue
        if is_context_manager_function(member):  # ``with`` -> ``async with``
            if not is_async_context_manager_function(getattr(twin, name)):
                not_awaited.append(name)
        elif not inspect.iscoroutinefunction(getattr(twin, name)):
            not_awaited.append(name)
    assert missing == [], f"{twin.__name__} lacks {missing}"
    assert not_awaited == [], f"{twin.__name__}: not awaitable: {not_awaited}"


def store_functions() -> list[tuple[str, str]]:
    found = []
    for module in (projections, replay):
        for name in module.__all__:
            func = getattr(module, name)
            if inspect.isfunction(func):
                params = list(inspect.signature(func).parameters)
                if params and params[0] == "store":
                    found.append((module.__name__, name))
    return found


def test_the_walk_finds_a_missing_twin() -> None:
    """The walk is not vacuous: a sync method with no twin, or a sync ``with`` method whose
    twin is not ``async with``, is reported."""

    class Sync(MemoryStore):
        def extra(self) -> None:
            """Only on the sync side."""

        @contextlib.contextmanager
        def block(self) -> Iterator[None]:
            yield

    class Async(AsyncMemoryStore):
        def block(self) -> None:
            """Not an async context manager."""

    with pytest.raises(AssertionError, match=r"lacks \['extra'\]"):
        test_every_sync_store_method_has_its_async_twin(Sync, Async)

    class AsyncWithExtra(Async):
        async def extra(self) -> None:
            """The twin."""

    with pytest.raises(AssertionError, match=r"not awaitable: \['block'\]"):
        test_every_sync_store_method_has_its_async_twin(Sync, AsyncWithExtra)


def test_every_function_that_takes_a_store_has_an_awaitable_twin() -> None:
    funcs = store_functions()
    assert len(funcs) >= 20
    for module, name in funcs:
        twin = getattr(aio, name, None)
        assert twin is not None, f"aio lacks {name} (from {module})"
        if name != "follow":  # async already, and takes either kind of store
            assert inspect.iscoroutinefunction(twin), name
            assert twin.__wrapped__ is getattr(
                projections if module.endswith("projections") else replay, name
            )
    assert set(aio.__all__) >= {name for _, name in funcs}


@pytest.mark.anyio
async def test_the_twins_work_on_an_async_store(tmp_path: Path) -> None:
    store = AsyncFileStore(tmp_path, durability="none")
    async with store.session("tg:1") as w:
        await w.append_message("user", "Plan a trip")
        await w.append_message("assistant", "Kyoto")
    assert [r.key for r in await aio.list_sessions(store)] == ["tg:1"]
    assert (await aio.verify(store)).ok and (await aio.recover(store)).ok
    assert (await aio.state_at(store, "tg:1", seq=1)).seq == 1
    assert len(await aio.timeline(store, "tg:1")) == 2
    assert (await aio.store_usage(store)) == projections.store_usage(store.sync)
    # lifecycle, trash, hooks, latest_session on the async store itself
    ended: list[str] = []
    store.on_end(lambda state, reason: ended.append(reason))
    assert await store.latest_session("tg:") == "tg:1"
    assert await store.archive("tg:1") and ended == ["archive"]
    assert (await store.state("tg:1")).lifecycle == "archived"
    seq = await store.new_session("tg:1")
    assert (await store.state("tg:1")).lifecycle == "active"
    far = (await store.state("tg:1")).updated_at.replace(year=2100)
    report = await store.cleanup(0, now=far)
    assert report.trashed == ["tg:1"] and not await store.exists("tg:1")
    (entry,) = await store.trash()
    assert await store.restore(entry) == "tg:1" and await store.exists("tg:1")
    async with store.session("tg:1") as w:  # writes on after all of that
        assert await w.append_message("user", "back") == seq + 2  # after the "active" event
    await store.close()


@pytest.mark.anyio
async def test_async_memory_lifecycle_and_peer() -> None:
    store = AsyncMemoryStore()
    other = store.peer()
    async with store.session("k") as a, other.session("k") as b:
        assert await a.append_message("user", "a") == 1
        assert await b.append_message("user", "b") == 2
        assert await a.append_message("user", "c") == 3
    assert await store.reset("k") == 4
    assert (await other.state("k")).messages == []
    await anyio.lowlevel.checkpoint()
    await store.close()
    await other.close()

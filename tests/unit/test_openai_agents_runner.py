"""``EventLogSession`` under the Agents SDK's own ``Runner``: limits, compaction, encryption,
async stores. The model and the compaction endpoint are fakes; everything else is the SDK's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from agents import Agent, ModelSettings, Runner, SessionSettings, set_tracing_disabled
from agents.extensions.memory import EncryptedSession
from agents.items import ModelResponse
from agents.memory import OpenAIResponsesCompactionSession
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from sessionledger.eventlog import (
    AsyncFileStore,
    AsyncMemoryStore,
    FileStore,
    MemoryStore,
    Retracted,
)
from sessionledger.tools.openai_agents import EventLogSession, SessionClosedError

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)  # no exporter: the runs here never leave the process


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the SDK's Runner and compaction use asyncio primitives


class ScriptedModel(Model):
    """Answers every call with ``reply <n>`` and records the input it was given."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        given = args[1] if len(args) > 1 else kwargs["input"]
        self.inputs.append(list(given) if isinstance(given, list) else [given])
        n = len(self.inputs)
        message = ResponseOutputMessage(
            id=f"msg_{n}",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=f"reply {n}", annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=f"resp_{n}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


class FakeResponses:
    """``client.responses.compact``: replaces the history with one summary message."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        summary = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"summary {len(self.calls)}"}],
        }
        return SimpleNamespace(output=[summary], usage=None)


def items(n: int) -> list[Any]:
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


@pytest.mark.parametrize(("stored", "limit"), [(6, 10), (60, 100), (6, 4), (6, 0), (6, -1)])
async def test_get_items_is_exactly_the_newest_limit(stored: int, limit: int) -> None:
    session = EventLogSession("s", MemoryStore())
    await session.add_items(items(stored))
    got = await session.get_items(limit)
    expected = items(stored) if limit < 0 else items(stored)[max(0, stored - limit) :]
    assert got == expected


async def test_session_settings_are_taken_as_the_sdk_takes_them() -> None:
    assert EventLogSession("a", MemoryStore()).session_settings == SessionSettings()
    from_dict = EventLogSession("b", MemoryStore(), session_settings={"limit": 2})
    assert from_dict.session_settings == SessionSettings(limit=2)
    await from_dict.add_items(items(5))
    assert await from_dict.get_items() == items(5)[3:]
    assert await from_dict.get_items(4) == items(5)[1:]
    with pytest.raises(TypeError):
        EventLogSession("c", MemoryStore(), session_settings=cast(Any, {"limt": 2}))


async def test_runner_with_a_session_limit_sends_the_newest_items(tmp_path: Path) -> None:
    model = ScriptedModel()
    agent = Agent(name="a", model=model)
    store = FileStore(tmp_path / "store")
    session = EventLogSession("chat", store, session_settings=SessionSettings(limit=3))
    for turn in range(4):
        await Runner.run(agent, f"q{turn}", session=session)
    # Each turn stores the user input and the reply; the model sees the newest 3 plus the input.
    assert [len(given) for given in model.inputs] == [1, 3, 4, 4]
    last = model.inputs[-1]
    assert last[-1]["content"] == "q3"
    assert len(await session.get_items(None)) == 3
    assert len(await session.get_items(100)) == 8
    store.close()


async def test_automatic_compaction_replaces_the_suffix_through_the_snapshot(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "store")
    underlying = EventLogSession("chat", store, session_settings={"limit": 2})
    await underlying.add_items(items(30))  # an old history the model never sees whole
    responses = FakeResponses()
    session = OpenAIResponsesCompactionSession(
        "chat",
        underlying,
        client=cast(Any, SimpleNamespace(responses=responses)),
        should_trigger_compaction=lambda _ctx: True,
    )
    agent = Agent(name="a", model=ScriptedModel(), model_settings=ModelSettings(store=False))
    await Runner.run(agent, "new question", session=session)
    assert len(responses.calls) == 1
    stored = await underlying.get_items(-1)
    # What the model never saw stays; what it saw (the newest 2 stored items, the input and the
    # reply) became the summary.
    assert stored[:28] == items(28)
    assert [i.get("content") for i in stored[28:]] == [
        [{"type": "input_text", "text": "summary 1"}]
    ]
    assert any(isinstance(e, Retracted) for e in store.events("chat"))
    store.close()


async def test_without_the_snapshot_hook_the_sdk_skips_that_compaction() -> None:
    class NoHook(EventLogSession):
        _get_compaction_snapshot = None  # type: ignore[assignment]

    underlying = NoHook("chat", MemoryStore(), session_settings={"limit": 2})
    await underlying.add_items(items(30))
    responses = FakeResponses()
    session = OpenAIResponsesCompactionSession(
        "chat",
        underlying,
        client=cast(Any, SimpleNamespace(responses=responses)),
        should_trigger_compaction=lambda _ctx: True,
    )
    agent = Agent(name="a", model=ScriptedModel(), model_settings=ModelSettings(store=False))
    await Runner.run(agent, "new question", session=session)
    assert responses.calls == []  # this is what the hook fixes
    assert len(await underlying.get_items(-1)) == 32


async def test_encrypted_session_over_the_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    underlying = EventLogSession("chat", store)
    # EncryptedSession is typed for SessionABC; it wraps any Session at runtime.
    session = EncryptedSession("chat", cast(Any, underlying), encryption_key="k" * 32, ttl=600)
    model = ScriptedModel()
    agent = Agent(name="a", model=model)
    await Runner.run(agent, "secret question", session=session)
    await Runner.run(agent, "second", session=session)
    assert [m.get("content") for m in model.inputs[1] if m.get("role") == "user"] == [
        "secret question",
        "second",
    ]
    assert b"secret question" not in store.read_bytes("chat")
    assert len(await session.get_items(2)) == 2
    store.close()


@pytest.mark.parametrize("kind", ["file", "memory"])
async def test_an_async_store_serves_the_whole_protocol(tmp_path: Path, kind: str) -> None:
    store = AsyncFileStore(tmp_path / "store") if kind == "file" else AsyncMemoryStore()
    session = EventLogSession("chat", store)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items(items(5))
    assert await session.get_items(3) == items(5)[2:]
    assert await session.pop_item() == items(5)[-1]
    snap = await session._get_compaction_snapshot(2)
    assert snap.items == items(5)[2:4] and not snap.complete
    assert await snap.replace_suffix(1, [{"role": "user", "content": "S"}])
    assert await session.get_items() == [*items(3), {"role": "user", "content": "S"}]
    assert not await snap.replace_suffix(0, [])  # stale: the suffix changed since
    await session.clear_session()
    assert await session.get_items() == []
    await session.aclose()
    await store.close()


async def test_a_stale_snapshot_replaces_nothing() -> None:
    session = EventLogSession("chat", MemoryStore())
    await session.add_items(items(4))
    snap = await session._get_compaction_snapshot(10)
    assert snap.complete and snap.items == items(4)
    await session.add_items(items(1))
    assert not await snap.replace_suffix(0, [{"role": "user", "content": "S"}])
    assert len(await session.get_items()) == 5


async def test_prune_prefix_trims_the_expired_oldest_items() -> None:
    session = EventLogSession("chat", MemoryStore())
    await session.add_items(items(6))
    snap = await session._get_compaction_snapshot(
        2, prune_prefix=lambda item: item["content"] in ("m0", "m1", "m3")
    )
    assert await snap.replace_suffix(0, [{"role": "user", "content": "S"}])
    assert await session.get_items() == [*items(4)[2:], {"role": "user", "content": "S"}]


async def test_a_closed_session_refuses_every_call() -> None:
    session = EventLogSession("chat", MemoryStore())
    session.close()
    with pytest.raises(SessionClosedError, match="EventLogSession is closed"):
        await session.add_items([])
    with pytest.raises(RuntimeError):
        await session.get_items()


async def test_validation_before_pop_withdraws_nothing_when_it_raises() -> None:
    session = EventLogSession("chat", MemoryStore())
    await session.add_items(items(2))

    def reject(item: Any) -> None:
        raise ValueError(item["content"])

    with pytest.raises(ValueError, match="m1"):
        await session._pop_item_with_validation(reject)
    assert await session.get_items() == items(2)
    assert await session._pop_item_with_validation(lambda item: None) == items(2)[1]


async def test_a_cancelled_write_settles_before_the_cancellation_is_raised() -> None:
    import asyncio
    import threading

    session = EventLogSession("chat", MemoryStore())
    await session.add_items(items(2))
    entered, release = threading.Event(), threading.Event()

    def slow_check(item: Any) -> None:
        entered.set()
        assert release.wait(timeout=10)

    pop = asyncio.ensure_future(session._pop_item_with_validation(slow_check))
    assert await asyncio.to_thread(entered.wait, 5)
    pop.cancel()
    await asyncio.sleep(0)
    assert not pop.done()  # the pop is under way: it is not abandoned half-done
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await pop
    assert await session.get_items() == items(1)  # it finished, then the cancellation came

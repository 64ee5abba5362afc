"""``tools.openai_agents.EventLogSession`` against the OpenAI Agents SDK's own session protocol."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from sessionledger.eventlog import (
    Cleared,
    FileStore,
    InvalidEventError,
    MemoryStore,
    MessageAppended,
    Retracted,
)
from sessionledger.tools.openai_agents import (
    ITEM_KEY,
    EventLogSession,
    item_from_message,
    message_from_item,
)

agents = pytest.importorskip("agents", reason="the openai-agents extra is not installed")
from agents.memory import Session as SDKSession  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402

USER = {"role": "user", "content": "Plan a trip to Kyoto"}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "web_search",
    "arguments": '{"q": "Kyoto"}',
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "temples"}
REPLY = {
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "id": "msg_1",
    "content": [{"type": "output_text", "text": "Go in spring.", "annotations": []}],
}
ITEMS: list[dict[str, Any]] = [USER, CALL, OUTPUT, REPLY]


def as_items(items: list[dict[str, Any]]) -> Any:
    return cast(Any, items)


def test_it_is_an_sdk_session_by_the_sdks_own_protocol(tmp_path: Path) -> None:
    session = EventLogSession("chat-1", tmp_path / "store")
    assert isinstance(session, SDKSession)
    session.close()


def test_items_round_trip_through_message_dicts() -> None:
    for item in [*ITEMS, {"role": "user", ITEM_KEY: 1}, {"no": "type"}]:
        message = message_from_item(item)
        assert isinstance(message["role"], str) and message["role"]
        assert item_from_message(message) == item
    assert message_from_item(USER) == USER  # chat messages are stored as they are
    assert message_from_item(CALL)["role"] == "function_call"


@pytest.mark.anyio
async def test_add_get_pop_clear(anyio_backend: str) -> None:
    store = MemoryStore()
    session = EventLogSession("chat-1", store)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items(as_items(ITEMS))
    assert await session.get_items() == ITEMS
    assert await session.get_items(limit=2) == ITEMS[-2:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=99) == ITEMS
    assert await session.pop_item() == REPLY
    assert await session.get_items() == ITEMS[:-1]
    await session.clear_session()
    assert await session.get_items() == []
    events = list(store.events("chat-1"))
    assert [type(e) for e in events] == [MessageAppended] * 4 + [Retracted, Cleared]


@pytest.mark.anyio
async def test_every_item_is_one_message_event_kept_whole(anyio_backend: str) -> None:
    store = MemoryStore()
    session = EventLogSession("chat-1", store)
    await session.add_items(as_items(ITEMS))
    events = [e for e in store.events("chat-1") if isinstance(e, MessageAppended)]
    assert [item_from_message(e.message) for e in events] == ITEMS
    assert events[0].message == USER


@pytest.mark.anyio
async def test_returned_items_are_copies(anyio_backend: str) -> None:
    session = EventLogSession("chat-1", MemoryStore())
    await session.add_items(as_items([REPLY]))
    got = await session.get_items()
    got[0]["content"][0]["text"] = "changed"  # type: ignore[index, typeddict-item]
    assert await session.get_items() == [REPLY]


@pytest.mark.anyio
async def test_session_settings_limit_is_the_default(anyio_backend: str) -> None:
    session = EventLogSession("chat-1", MemoryStore(), session_settings=SessionSettings(limit=1))
    await session.add_items(as_items(ITEMS))
    assert await session.get_items() == [REPLY]
    assert await session.get_items(limit=3) == ITEMS[-3:]


@pytest.mark.anyio
async def test_bad_items_write_nothing(anyio_backend: str) -> None:
    store = MemoryStore()
    session = EventLogSession("chat-1", store)
    await session.add_items(as_items([USER]))
    before = store.read_bytes("chat-1")
    with pytest.raises(InvalidEventError):
        await session.add_items(as_items([USER, {"role": "user", "content": object()}]))
    with pytest.raises(InvalidEventError):
        await session.add_items(cast(Any, [USER, "not a dict"]))
    assert store.read_bytes("chat-1") == before


@pytest.mark.anyio
async def test_a_file_store_session_survives_reopening(anyio_backend: str, tmp_path: Path) -> None:
    first = EventLogSession("chat-1", tmp_path / "store")
    await first.add_items(as_items(ITEMS))
    await first.pop_item()
    first.close()
    second = EventLogSession("chat-1", FileStore(tmp_path / "store"))
    assert await second.get_items() == ITEMS[:-1]
    second.close()
    assert second.store.keys() == ["chat-1"]


def test_runner_persists_turns_through_the_session(tmp_path: Path) -> None:
    """A real ``Runner.run`` (asyncio-only in the SDK) with the SDK's scripted model: no network."""
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    set_tracing_disabled(True)
    model = ScriptedModel([[assistant_message("Go in spring.")], [assistant_message("Yes.")]])
    agent = Agent(name="planner", instructions="Plan trips.", model=model)
    session = EventLogSession("chat-9", tmp_path / "store")

    async def main() -> list[Any]:
        result = await Runner.run(agent, "Plan a trip to Kyoto", session=session)
        assert result.final_output == "Go in spring."
        await Runner.run(agent, "Really?", session=session)
        return cast(list[Any], await session.get_items())

    items = asyncio.run(main())
    texts = [
        i["content"] if isinstance(i["content"], str) else i["content"][0]["text"] for i in items
    ]
    assert texts == ["Plan a trip to Kyoto", "Go in spring.", "Really?", "Yes."]
    # The second run's model call saw the first turn, replayed from the log, before its input.
    second_input = model.calls[1].input
    assert isinstance(second_input, list) and len(second_input) == 3
    session.close()
    roles = [
        e.message["role"]
        for e in FileStore(tmp_path / "store").events("chat-9")
        if isinstance(e, MessageAppended)
    ]
    assert roles == ["user", "assistant", "user", "assistant"]

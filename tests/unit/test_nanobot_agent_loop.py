"""A real nanobot 0.2.2 ``AgentLoop`` on the drop-in, end to end, with a scripted provider."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from nanobot.agent.loop import AgentLoop
from nanobot.bus.queue import MessageBus
from nanobot.providers.base import LLMProvider, LLMResponse, ToolCallRequest
from nanobot.webui.session_list_index import list_webui_sessions

from sessionledger.tools.nanobot import SessionManager


class ScriptedProvider(LLMProvider):  # type: ignore[misc]  # nanobot is untyped
    """Replies from a script; records the messages of every call."""

    def __init__(self, script: list[LLMResponse]) -> None:
        super().__init__()
        self.script = list(script)
        self.calls: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> LLMResponse:
        self.calls.append(json.loads(json.dumps(messages, default=str)))
        return self.script.pop(0) if self.script else LLMResponse(content="(title)")

    def get_default_model(self) -> str:
        return "scripted"


def test_an_agent_loop_converses_on_the_drop_in(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "notes.txt").parent.mkdir(parents=True)
    (workspace / "notes.txt").write_text("Kyoto in April\n")
    provider = ScriptedProvider(
        [
            LLMResponse(content="Hello! How can I help?"),
            LLMResponse(
                content="",
                tool_calls=[
                    ToolCallRequest(id="call_1", name="read_file", arguments={"path": "notes.txt"})
                ],
                finish_reason="tool_calls",
            ),
            LLMResponse(content="Your notes say: Kyoto in April."),
            LLMResponse(content="You asked about your notes."),
        ]
    )
    manager = SessionManager(workspace)
    loop = AgentLoop(
        bus=MessageBus(), provider=provider, workspace=workspace, session_manager=manager
    )

    async def converse() -> list[str]:
        replies = []
        for text in ("hi", "what is in notes.txt?", "what did I ask before?"):
            out = await loop.process_direct(text, session_key="websocket:abc")
            assert out is not None
            replies.append(out.content)
        return replies

    replies = asyncio.run(converse())
    assert replies == [
        "Hello! How can I help?",
        "Your notes say: Kyoto in April.",
        "You asked about your notes.",
    ]
    # The last call saw the whole conversation, the tool round trip included.
    last = [m for m in provider.calls[-1] if m["role"] != "system"]
    assert [m["role"] for m in last] == [
        "user", "assistant", "user", "assistant", "tool", "assistant", "user",
    ]  # fmt: skip
    assert "Kyoto in April" in str(last[4]["content"])

    session = manager.get_or_create("websocket:abc")
    assert [m["role"] for m in session.messages][-2:] == ["user", "assistant"]
    events = list(manager.store.events("websocket:abc"))
    assert sum(type(e).__name__ == "MessageAppended" for e in events) == len(session.messages)

    # nanobot's web UI sidebar lists it, under nanobot's file stem.
    rows = list_webui_sessions(manager)
    assert [(r["key"], Path(r["path"]).name) for r in rows] == [
        ("websocket:abc", "websocket_abc.jsonl")
    ]
    assert rows[0]["preview"] == "hi"
    manager.close()

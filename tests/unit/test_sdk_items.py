"""Agents SDK items in every projection: history, token counts, search, timeline, ``show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessionledger import replay
from sessionledger.eventlog import AGENTS_ITEM_KEY, FileStore, MemoryStore, estimate_tokens
from sessionledger.projections import (
    history,
    legal_start,
    orphaned_tool_indices,
    search,
)
from sessionledger.tools.cli import main
from sessionledger.tools.openai_agents._items import ITEM_KEY, message_from_item

CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": json.dumps({"city": "Kyoto", "days": 3, "notes": "x" * 400}),
    "id": "fc_1",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 24C in Kyoto"}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "The user wants weather; call the tool."}],
}
USER = {"role": "user", "content": "Weather in Kyoto?"}
ANSWER = {
    "role": "assistant",
    "type": "message",
    "content": [{"type": "output_text", "text": "Sunny, 24C."}],
}


def _items() -> list[dict[str, Any]]:
    return [USER, REASONING, CALL, OUTPUT, ANSWER]


def _store() -> MemoryStore:
    store = MemoryStore()
    s = store.session("sdk")
    for item in _items():
        s.append_message_dict(message_from_item(item))
    s.record_usage(model="gpt-x", prompt_tokens=1200, completion_tokens=80, cached_tokens=1000)
    return store


def test_the_adapter_and_the_core_agree_on_the_key() -> None:
    assert ITEM_KEY == AGENTS_ITEM_KEY


def test_history_passes_items_as_the_sdk_would() -> None:
    msgs = history(_store().state("sdk"))
    assert msgs[0] == {"role": "user", "content": "Weather in Kyoto?"}
    assert msgs[1:4] == [REASONING, CALL, OUTPUT]  # the items themselves, unchanged
    assert msgs[4]["role"] == "assistant"


def test_an_output_without_its_call_is_an_orphan() -> None:
    messages = [message_from_item(i) for i in (USER, OUTPUT, USER, CALL, OUTPUT)]
    assert legal_start(messages) == 2
    assert orphaned_tool_indices(messages) == []  # call_1 is declared somewhere in the list
    assert orphaned_tool_indices(messages[:2]) == [1]
    store = MemoryStore()
    s = store.session("k")
    for m in messages:
        s.append_message_dict(m)
    got = history(store.state("k"), max_messages=4)  # window starts at the orphan output
    assert got[0] == USER and got[1:] == [CALL, OUTPUT]


def test_token_counts_reflect_the_item_size() -> None:
    small = estimate_tokens(message_from_item(OUTPUT))
    big = estimate_tokens(message_from_item(CALL))
    assert big >= len(json.dumps(CALL)) // 4 > small > 4
    state = _store().state("sdk")
    assert [m.tokens for m in state.messages][2] == big


def test_search_finds_item_payloads() -> None:
    store = _store()
    assert {h.seq for h in search(store, "kyoto")} == {1, 3, 4}
    assert [h.seq for h in search(store, "tool", role="reasoning")] == [2]


def test_timeline_describes_items_and_usage() -> None:
    entries = replay.timeline(_store(), "sdk")
    text = [e.summary for e in entries]
    assert "get_weather(" in text[2] and "[call_1]" in text[2]
    assert "Sunny, 24C in Kyoto" in text[3]
    assert "call the tool" in text[1]
    assert text[5].startswith("usage: gpt-x 1200 prompt + 80 completion = 1280 tokens")


def test_show_renders_items_and_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "240")
    root = tmp_path / "s"
    with FileStore(root, durability="none") as store:
        s = store.session("sdk")
        for item in _items():
            s.append_message_dict(message_from_item(item))
        s.record_usage(model="gpt-x", prompt_tokens=1200, completion_tokens=80)
    assert main(["show", "sdk", "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert "function_call get_weather(" in out
    assert "function_call_output [call_1]: Sunny, 24C in Kyoto" in out
    assert "reasoning: The user wants weather" in out
    assert "gpt-x: 1,200 prompt + 80 completion = 1,280 tokens" in out
    assert " ? " not in out

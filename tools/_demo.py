"""The README's main job: write a realistic agent conversation, reopen it, show what was kept.

Writes into a file store (default ``./sessions``), closes it, reopens it the way an agent does
at start-up, verifies the chain, and prints the session, its LLM history and the session list.
Running it again appends a new conversation under a new key: nothing is ever overwritten.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import eventlog
from eventlog import FileStore, SessionWriter


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def write_conversation(s: SessionWriter) -> None:
    """Append a multi-turn trip-planning conversation with tool calls, like a real agent."""
    s.update_metadata(set={"title": "Kyoto trip", "tags": ["travel"], "agent": "demo"})
    s.append_message("system", "You are a helpful travel agent.")
    s.append_message("user", "Plan a 3-day trip to Kyoto in April.", media=["/tmp/map.png"])
    s.append_message(
        "assistant",
        None,
        tool_calls=[_tool_call("call_1", "web_search", {"q": "Kyoto cherry blossom 2027"})],
        reasoning_content="I should check when the blossoms peak.",
    )
    s.append_message(
        "tool",
        "Cherry blossoms in Kyoto usually peak in early April. Maruyama Park, the "
        "Philosopher's Path and Arashiyama are the best-known spots. " * 8,
        tool_call_id="call_1",
        name="web_search",
    )
    s.append_message(
        "assistant",
        "Day 1: Higashiyama and Maruyama Park. Day 2: Arashiyama bamboo grove and "
        "Tenryu-ji. Day 3: Fushimi Inari at sunrise, then Nishiki Market.",
    )
    s.append_message("user", "/usage", _command=True)
    s.append_message("user", "Can you find a ryokan near Gion under 30,000 yen?")
    s.append_message(
        "assistant",
        None,
        tool_calls=[
            _tool_call("call_2", "hotel_search", {"area": "Gion", "max_price": 30000}),
            _tool_call("call_3", "weather", {"city": "Kyoto", "month": "April"}),
        ],
    )
    s.append_message(
        "tool",
        json.dumps([{"name": "Gion Yoshiima", "price": 28000}, {"name": "Ryokan Motonago"}]),
        tool_call_id="call_2",
        name="hotel_search",
    )
    s.append_message("tool", "Mild, 9-18 C, some rain.", tool_call_id="call_3", name="weather")
    s.append_message(
        "assistant",
        "Gion Yoshiima is 28,000 yen a night and a 5-minute walk from Yasaka Shrine. "
        "Pack a light rain jacket: April is mild with some rain.",
    )
    s.mark_consolidated(2)
    s.append_message("user", "Book it for April 3 to 6, please.")
    s.append_message("assistant", "Done: Gion Yoshiima, April 3-6. Confirmation KY-2231.")


def run_demo(root: str | Path = "sessions", console: Console | None = None) -> str:
    """Run the demo against the file store at ``root``; return the session key it wrote."""
    console = console or Console()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    key = f"demo:telegram:{stamp}"
    with FileStore(root, durability="batch") as store:
        write_conversation(store.session(key))
    console.print(f"[bold]wrote[/] {key} to {Path(root).resolve()}")

    # Reopen as an agent would after a restart: a fresh store object reads the log back.
    with FileStore(root, durability="batch") as store:
        writer = store.open(key)
        state = writer.state
        console.print(
            f"[bold]reopened[/] seq={state.seq} head={state.head[:12]}... "
            f"messages={len(state.messages)} tokens={state.live_tokens} "
            f"last_consolidated={state.last_consolidated}"
        )
        _print_events(console, store, key)
        _print_projections(console, store, state)
    return key


def _print_events(console: Console, store: FileStore, key: str) -> None:
    table = Table(title=f"events of {key}", show_lines=False)
    for name in ("seq", "type", "role", "content"):
        table.add_column(name, overflow="fold")
    for event in store.events(key):
        role = ""
        text = ""
        match event:
            case eventlog.MessageAppended():
                role = str(event.message.get("role", ""))
                content = event.message.get("content")
                text = (
                    content
                    if isinstance(content, str)
                    else json.dumps(event.message.get("tool_calls") or content)
                )
            case eventlog.MetadataChanged():
                text = json.dumps(event.set)
            case eventlog.Consolidated():
                text = f"last_consolidated -> {event.upto}"
            case _:
                text = ""
        if len(text) > 80:
            text = text[:79] + "…"
        table.add_row(str(event.seq), str(event.__struct_config__.tag or ""), role, text)
    console.print(table)


def _print_projections(console: Console, store: FileStore, state: eventlog.SessionState) -> None:
    """Print the LLM history and the session list once the projections package has them."""
    import projections

    history = getattr(projections, "history", None)
    if history is not None:
        table = Table(title="LLM history (what the model gets next turn)")
        table.add_column("role")
        table.add_column("content", overflow="fold")
        for message in history(state, max_messages=120, include_timestamps=True):
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(message.get("tool_calls"))
            table.add_row(str(message.get("role")), (text or "")[:120])
        console.print(table)
    list_sessions = getattr(projections, "list_sessions", None)
    if list_sessions is not None:
        table = Table(title="sessions (newest first)")
        for name in ("key", "title", "preview", "messages", "tokens"):
            table.add_column(name, overflow="fold")
        for row in list_sessions(store, limit=5):
            table.add_row(row.key, row.title, row.preview, str(row.messages), str(row.tokens))
        console.print(table)

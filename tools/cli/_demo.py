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

from sessionledger import eventlog, projections, replay
from sessionledger.eventlog import BaseStore, FileStore, SessionWriter

from ._render_events import timeline_table


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


def _print_events(console: Console, store: BaseStore, key: str) -> None:
    console.print(f"[bold]the log[/] ({store.load(key).path}), as `sessionledger show` prints it:")
    console.print(timeline_table(list(store.events(key))))


def _print_projections(console: Console, store: BaseStore, state: eventlog.SessionState) -> None:
    """Print the LLM history the next model call gets, and the session list."""
    table = Table(title="LLM history: what the model gets on the next turn")
    table.add_column("role")
    table.add_column("content", overflow="fold")
    for message in projections.history(state, max_messages=120, include_timestamps=True):
        content = message.get("content")
        text = content if isinstance(content, str) and content else ""
        if message.get("tool_calls"):
            names = [c["function"]["name"] for c in message["tool_calls"]]
            text = (text + "\n" if text else "") + "calls " + ", ".join(names)
        table.add_row(str(message.get("role")), text[:160])
    console.print(table)
    table = Table(title="sessions in the store (newest first)")
    for name in ("key", "title", "preview", "messages", "tokens"):
        table.add_column(name, overflow="fold")
    for row in projections.list_sessions(store, limit=5):
        table.add_row(row.key, row.title, row.preview, str(row.messages), str(row.tokens))
    console.print(table)
    report = replay.verify(store, state.key)
    console.print(
        f"[bold]verified[/] {state.key}: {report.sessions[0].lines} lines, hash chain "
        + ("[green]intact[/]" if report.ok else f"[red]{report.problems}[/]")
    )
    console.print(
        f"next: [bold]sessionledger show {state.key}[/], [bold]sessionledger ls[/], "
        f"[bold]sessionledger history {state.key} --at 5[/]"
    )

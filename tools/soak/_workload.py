"""Realistic agent traffic for the soak scenarios: messages of every size, tool calls, metadata.

Every event is written with an explicit id, so a scenario can check that exactly the events it
was told about are in the log, each once, at the seq the writer returned. Invariant: an operation
is only chosen when the writer's state allows it, so the workload itself never raises
``InvalidEventError``.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from sessionledger.eventlog import SessionState

_TEXTS = (
    "Plan a trip to Kyoto",
    "\u4eac\u90fd\u306e\u5929\u6c17\u306f\uff1f \U0001f338",
    "line one\u2028line two\u2029 and a NUL-free \x7f control",
    "tool output: " + "0123456789abcdef" * 8,
)


class Writer(Protocol):
    """The part of ``SessionWriter`` the workload drives."""

    @property
    def state(self) -> SessionState: ...

    def append_message(
        self, role: str, content: Any = None, *, id: str | None = None, **fields: Any
    ) -> int: ...

    def update_metadata(
        self, set: dict[str, Any] | None = None, *, id: str | None = None
    ) -> int: ...

    def record_usage(
        self, *, prompt_tokens: int = 0, completion_tokens: int = 0, id: str | None = None
    ) -> int: ...

    def retract(self, count: int = 1, *, id: str | None = None) -> int: ...

    def mark_consolidated(self, upto: int, *, id: str | None = None) -> int: ...

    def trim(self, drop: int, reason: Any, *, id: str | None = None) -> int: ...


def content(rng: random.Random, *, big: float = 0.02) -> str:
    """Message text: mostly short, sometimes kilobytes, rarely hundreds of kilobytes."""
    roll = rng.random()
    base = rng.choice(_TEXTS)
    if roll < big:
        return base + "x" * rng.randrange(64_000, 300_000)
    if roll < 0.2:
        return base + "y" * rng.randrange(1_000, 9_000)
    return f"{base} #{rng.randrange(1_000_000)}"


def one_event(writer: Writer, rng: random.Random, event_id: str, *, big: float = 0.02) -> int:
    """Append one realistic event with id ``event_id``; return its seq."""
    live = len(writer.state.messages)
    roll = rng.random()
    if roll < 0.08:
        return writer.update_metadata({"title": content(rng, big=0), "turn": live}, id=event_id)
    if roll < 0.12:
        return writer.record_usage(
            prompt_tokens=rng.randrange(5000), completion_tokens=7, id=event_id
        )
    if roll < 0.14 and live:
        return writer.retract(1, id=event_id)
    if roll < 0.16 and live:
        return writer.mark_consolidated(rng.randrange(live + 1), id=event_id)
    if roll < 0.17 and live > 4:
        return writer.trim(2, "file_cap", id=event_id)
    if roll < 0.30:
        return writer.append_message(
            "assistant",
            None,
            id=event_id,
            tool_calls=[{"id": event_id, "type": "function", "function": {"name": "search"}}],
        )
    if roll < 0.40:
        return writer.append_message(
            "tool", content(rng, big=big), id=event_id, tool_call_id=event_id
        )
    role = "user" if roll < 0.7 else "assistant"
    return writer.append_message(role, content(rng, big=big), id=event_id)

"""Render a session's events as a readable timeline (``sessionledger show`` and ``tail``).

Tool calls and their results are paired: a result is printed folded under the assistant event
that called it (when both are shown), not as a row of its own. Long content is cut with a marker
saying how much was cut. Non-message events are shown as what they did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from sessionledger.eventlog import (
    WITHHELD,
    Cleared,
    Compacted,
    Consolidated,
    ConversationResumed,
    Erased,
    Event,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    Redacted,
    Retracted,
    Trimmed,
    UnknownEvent,
    UsageRecorded,
)
from sessionledger.projections import describe_item, sdk_item

from ._common import cut, human_bytes

ROLE_STYLES = {
    "user": "bold cyan",
    "assistant": "bold green",
    "tool": "yellow",
    "system": "magenta",
}
CONTENT_LIMIT = 160


def content_text(message: dict[str, Any]) -> str:
    """The displayable text of a message's content (text parts of list content joined)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
        return " ".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _call_text(call: Any) -> str:
    if not isinstance(call, dict):
        return str(call)
    raw_fn = call.get("function")
    fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
    name = fn.get("name") or call.get("name") or "?"
    args = fn.get("arguments", "")
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args else {}
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in parsed.items())
    else:
        args = json.dumps(args, ensure_ascii=False)
    return f"{name}({cut(str(args), 100)})"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _note(event: Erased | Redacted) -> str:
    who = f" by {event.by}" if event.by else ""
    why = f": {event.reason}" if event.reason else ""
    return who + why


def render_event(event: Event) -> tuple[str, str, Text]:
    """Return (kind, role-or-type label, rendered body) for one non-paired event."""
    match event:
        case MessageAppended():
            message = event.message
            role = str(message.get("role", "?"))
            withheld = message.get(WITHHELD)
            if withheld:
                return "message", role, Text(f"[{withheld}]", style="dim italic")
            item = sdk_item(message)
            if item is not None:  # an Agents SDK item: a call, its output, reasoning ...
                return "message", role, Text(describe_item(item, CONTENT_LIMIT))
            body = Text(cut(_one_line(content_text(message)), CONTENT_LIMIT))
            flags = []
            if message.get("_command"):
                flags.append("command")
            if message.get("_channel_delivery"):
                flags.append("channel delivery")
            media = message.get("media")
            if isinstance(media, list) and media:
                flags.append(f"{len(media)} media: {', '.join(str(m) for m in media[:3])}")
            if message.get("reasoning_content"):
                flags.append("reasoning")
            if flags:
                body.append(f"{'  ' if body.plain else ''}[{'; '.join(flags)}]", style="dim")
            return "message", role, body
        case MetadataChanged():
            parts = [
                f"{k}={cut(json.dumps(v, ensure_ascii=False), 60)}" for k, v in event.set.items()
            ]
            parts += [f"-{k}" for k in event.unset]
            return (
                "metadata",
                "metadata",
                Text("set " + ", ".join(parts) if parts else "(no change)"),
            )
        case Consolidated():
            return "consolidated", "consolidated", Text(f"last_consolidated -> {event.upto}")
        case Compacted():
            saved = event.tokens_before - event.tokens_after
            body = Text(
                f"first {event.upto} messages -> summary; tokens {event.tokens_before} -> "
                f"{event.tokens_after} (saved {saved}); removed {event.removed}, kept {event.kept}: "
            )
            body.append(cut(_one_line(event.summary), 100), style="italic")
            return "compacted", "compacted", body
        case Trimmed():
            return "trimmed", "trimmed", Text(f"dropped the oldest {event.count} ({event.reason})")
        case Cleared():
            what = "all live messages dropped"
            if event.keep:
                what = f"live messages dropped but {len(event.keep)} kept"
            if event.reason:
                what = f"conversation ended ({event.reason}); {what}"
            if event.unset:
                what += f"; metadata -{', -'.join(event.unset)}"
            return "cleared", "cleared", Text(what)
        case ConversationResumed():
            by = f" by {event.by}" if event.by else ""
            return (
                "resumed",
                "resumed",
                Text(
                    f"resumed the conversation of seq {event.start_seq}..{event.end_seq}{by} "
                    f"({event.messages} messages follow)"
                ),
            )
        case UsageRecorded():
            model = event.model or "model ?"
            total = event.total_tokens or event.prompt_tokens + event.completion_tokens
            cached = f", {event.cached_tokens:,} cached" if event.cached_tokens else ""
            call = f" [{event.call_id}]" if event.call_id else ""
            return (
                "usage",
                "usage",
                Text(
                    f"{model}: {event.prompt_tokens:,} prompt + {event.completion_tokens:,} "
                    f"completion = {total:,} tokens{cached}{call}"
                ),
            )
        case Retracted():
            return "retracted", "retracted", Text(f"withdrew the newest {event.count}")
        case LifecycleChanged():
            reason = f" (reason: {event.reason})" if event.reason else ""
            return "lifecycle", "lifecycle", Text(f"-> {event.state}{reason}")
        case Erased():
            return "erased", "erased", Text("content erased (keys destroyed)" + _note(event))
        case Redacted():
            text = f"message seq {event.target} redacted (key destroyed)" + _note(event)
            return "redacted", "redacted", Text(text)
        case UnknownEvent():
            return "unknown", event.type, Text("(unknown event type, kept as is)", style="dim")
    return "unknown", "?", Text("")  # pragma: no cover - the union is exhausted above


def timeline_table(events: Sequence[Event], *, show_header: bool = True) -> Table:
    """A table of events with tool results folded under their calls."""
    results: dict[str, MessageAppended] = {}
    for event in events:
        if isinstance(event, MessageAppended) and event.message.get("role") == "tool":
            call_id = event.message.get("tool_call_id")
            if isinstance(call_id, str):
                results.setdefault(call_id, event)
    paired: set[int] = set()
    table = Table(box=None, show_header=show_header, pad_edge=False, expand=False)
    table.add_column("seq", justify="right", style="dim", min_width=4)
    table.add_column("UTC", style="dim", no_wrap=True)
    table.add_column("who", no_wrap=True, min_width=12)
    table.add_column("what", overflow="fold")
    for event in events:
        if event.seq in paired:
            continue
        kind, label, body = render_event(event)
        style = ROLE_STYLES.get(label, "bold blue" if kind != "message" else "")
        calls = event.message.get("tool_calls") if isinstance(event, MessageAppended) else None
        if isinstance(calls, list) and calls:
            lines = Text()
            if body.plain:
                lines.append_text(body)
                lines.append("\n")
            for i, call in enumerate(calls):
                if i:
                    lines.append("\n")
                lines.append("call ", style="bold")
                lines.append(_call_text(call))
                call_id = call.get("id") if isinstance(call, dict) else None
                result = results.get(call_id) if isinstance(call_id, str) else None
                if result is not None and result.seq > event.seq:
                    paired.add(result.seq)
                    text = content_text(result.message)
                    lines.append(
                        f"\n  └ #{result.seq} result ({human_bytes(len(text.encode()))}): ",
                        style="yellow",
                    )
                    lines.append(cut(_one_line(text), 120))
            body = lines
        table.add_row(str(event.seq), event.ts.strftime("%H:%M:%S"), Text(label, style=style), body)
    return table


def event_dict(event: Event) -> dict[str, Any]:
    """An event as a JSON-ready dict (the fields of its line, ``type`` first)."""
    import msgspec

    if isinstance(event, UnknownEvent):
        return {**event.raw, "h": event.h}
    data: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(event))
    if isinstance(event, MessageAppended) and "_open" in event.__dict__:
        data["message"] = event.message  # a sealed message, opened (or its placeholder)
    return data


def select_events(
    events: Iterable[Event],
    *,
    since_seq: int | None = None,
    until_seq: int | None = None,
    since_at: Any = None,
    until_at: Any = None,
) -> list[Event]:
    """Keep events within the given seq and time bounds (inclusive)."""
    out = []
    for event in events:
        if since_seq is not None and event.seq < since_seq:
            continue
        if until_seq is not None and event.seq > until_seq:
            continue
        if since_at is not None and event.ts < since_at:
            continue
        if until_at is not None and event.ts > until_at:
            continue
        out.append(event)
    return out

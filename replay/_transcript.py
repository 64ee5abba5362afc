"""A session as a reader sees it: timeline items with tool calls paired with their results (pure).

Rules:
- One :class:`Item` per event, in seq order. A message item carries the (redacted) message's
  parts; an assistant's tool calls are :class:`ToolCall` s, each paired with the first later
  tool message whose ``tool_call_id`` matches (among the events given and ``following``). That
  tool message's own item says which call it answers (``answers``), so a renderer can show it
  once, beside its call.
- Events that act on earlier messages (consolidated, compacted, trimmed, cleared, retracted)
  say what they replaced or withdrew (:class:`Replaced`: how many live messages and their seq
  range). That needs the state before the event: folded along when ``state`` is given, or asked
  for once from ``state_for(seq)`` at the first such event; without either, counts only.
- Redaction (:class:`Redaction`) is applied here, so every renderer shows the same masked data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from sessionledger.eventlog import (
    WITHHELD,
    Cleared,
    Compacted,
    Consolidated,
    Event,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    Retracted,
    SessionState,
    Trimmed,
    UnknownEvent,
    UsageRecorded,
    apply,
)

from ._redact import MASK, NO_REDACTION, Redaction

_NEEDS_STATE = (Consolidated, Compacted, Trimmed, Cleared, Retracted)


class Replaced(msgspec.Struct, frozen=True, kw_only=True):
    """Live messages an event replaced or withdrew: how many, and their seq range."""

    count: int
    first_seq: int | None = None
    last_seq: int | None = None


class ToolCall(msgspec.Struct, kw_only=True):
    """One tool call of an assistant message, with the tool message that answered it."""

    id: str | None
    name: str
    arguments: Any
    result: Item | None = None


class Item(msgspec.Struct, kw_only=True):
    """One event of the timeline, ready to render."""

    seq: int
    ts: datetime
    #: ``message`` or the event's type tag.
    kind: str
    role: str | None = None
    content: Any = None
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    media: list[str] = []
    tokens: int = 0
    #: The other keys of the message (redacted), e.g. ``timestamp``.
    extra: dict[str, Any] = {}
    #: For a tool message: the seq of the assistant message whose call it answers.
    answers: int | None = None
    #: For other events: one line saying what happened, and its fields.
    summary: str = ""
    detail: dict[str, Any] = {}
    replaced: Replaced | None = None
    #: A compaction's summary text.
    text: str | None = None


_MESSAGE_KEYS = frozenset(
    {"role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "media"}
)


def _tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    out: list[ToolCall] = []
    for call in calls:
        if not isinstance(call, dict):
            out.append(ToolCall(id=None, name="?", arguments=call))
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name", call.get("name", "?"))
        cid = call.get("id")
        out.append(
            ToolCall(
                id=cid if isinstance(cid, str) else None,
                name=name if isinstance(name, str) else str(name),
                arguments=fn.get("arguments", call.get("arguments")),
            )
        )
    return out


def message_item(event: MessageAppended, redaction: Redaction = NO_REDACTION) -> Item:
    """The item of one message event (tool calls not yet paired)."""
    message = redaction.message(event.message)
    role = message.get("role")
    media = message.get("media")
    reasoning = message.get("reasoning_content")
    tcid = message.get("tool_call_id")
    name = message.get("name")
    return Item(
        seq=event.seq,
        ts=event.ts,
        kind="message",
        role=role if isinstance(role, str) else None,
        # Erased or redacted content (encryption at rest) shows as such, never as an empty turn.
        content=f"[{message[WITHHELD]}]" if message.get(WITHHELD) else message.get("content"),
        tool_calls=_tool_calls(message) if message.get("tool_calls") != MASK else [],
        tool_call_id=tcid if isinstance(tcid, str) else None,
        name=name if isinstance(name, str) else None,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        media=[str(m) for m in media] if isinstance(media, list) else [],
        tokens=event.tokens,
        extra={k: v for k, v in message.items() if k not in _MESSAGE_KEYS},
    )


def _span(state: SessionState | None, lo: int, hi: int) -> Replaced | None:
    if state is None:
        return None
    covered = state.messages[max(lo, 0) : max(hi, 0)]
    if not covered:
        return Replaced(count=0)
    return Replaced(count=len(covered), first_seq=covered[0].seq, last_seq=covered[-1].seq)


def _describe(event: Event, state: SessionState | None, redaction: Redaction) -> Item:
    """The item of a non-message event, against the state just before it (when known)."""
    item = Item(seq=event.seq, ts=event.ts, kind=_tag(event))
    match event:
        case MetadataChanged():
            values = redaction.meta(event.set)
            item.detail = {"set": values, "unset": list(event.unset)}
            parts = [f"{k} = {_short(v)}" for k, v in sorted(values.items())]
            parts += [f"{k} removed" for k in event.unset]
            item.summary = "metadata: " + ("; ".join(parts) or "no change")
        case Consolidated():
            before = state.last_consolidated if state is not None else None
            item.detail = {"upto": event.upto, "before": before}
            item.replaced = _span(state, before or 0, event.upto)
            moved = (
                f"cursor {before} -> {event.upto}" if before is not None else f"cursor {event.upto}"
            )
            item.summary = f"consolidated into long-term memory ({moved})"
        case Compacted():
            item.text = redaction.text(event.summary)
            item.detail = {
                "upto": event.upto,
                "tokens_before": event.tokens_before,
                "tokens_after": event.tokens_after,
                "removed": event.removed,
                "kept": event.kept,
                "model": event.model,
            }
            item.replaced = _span(state, 0, event.upto)
            item.summary = (
                f"compacted: a summary stands for the first {event.upto} message(s); tokens "
                f"{event.tokens_before:,} -> {event.tokens_after:,} "
                f"(saved {event.tokens_before - event.tokens_after:,})"
            )
        case Trimmed():
            item.detail = {"count": event.count, "reason": event.reason}
            item.replaced = _span(state, 0, event.count)
            item.summary = f"trimmed the oldest {event.count} message(s) ({event.reason})"
        case Cleared():
            item.detail = {"reason": event.reason, "keep": list(event.keep)}
            if state is not None:
                keep = set(event.keep)
                dropped = [m for i, m in enumerate(state.messages) if i not in keep]
                item.replaced = Replaced(
                    count=len(dropped),
                    first_seq=dropped[0].seq if dropped else None,
                    last_seq=dropped[-1].seq if dropped else None,
                )
            why = f" ({event.reason})" if event.reason else ""
            item.summary = f"cleared the conversation{why}"
        case Retracted():
            item.detail = {"count": event.count}
            if state is not None:
                n = len(state.messages)
                item.replaced = _span(state, n - event.count, n)
            item.summary = f"retracted the newest {event.count} message(s)"
        case LifecycleChanged():
            item.detail = {"state": event.state, "reason": event.reason}
            why = f" ({event.reason})" if event.reason else ""
            item.summary = f"lifecycle: {event.state}{why}"
        case UsageRecorded():
            item.detail = {
                "model": event.model,
                "prompt_tokens": event.prompt_tokens,
                "completion_tokens": event.completion_tokens,
                "cached_tokens": event.cached_tokens,
                "total_tokens": event.total_tokens,
            }
            model = f" {event.model}" if event.model else ""
            item.summary = (
                f"usage{model}: {event.prompt_tokens:,} prompt + "
                f"{event.completion_tokens:,} completion tokens"
            )
        case UnknownEvent():
            item.detail = {
                k: v for k, v in event.raw.items() if k not in ("type", "seq", "ts", "id", "h")
            }
            item.summary = f"{event.type} (an event type this version does not know)"
        case _:
            item.summary = item.kind
    return item


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _tag(event: Event) -> str:
    if isinstance(event, UnknownEvent):
        return event.type
    tag: str = event.__struct_config__.tag  # type: ignore[assignment]
    return tag


def build_items(
    events: Sequence[Event],
    *,
    state: SessionState | None = None,
    state_for: Callable[[int], SessionState] | None = None,
    following: Sequence[Event] = (),
    redaction: Redaction = NO_REDACTION,
) -> list[Item]:
    """The timeline items of ``events`` (see the module doc).

    ``state`` is the state just before ``events[0]`` and is folded along (changed in place);
    ``state_for(seq)`` gives the state after ``seq`` and is asked at most once.
    """
    items: list[Item] = []
    calls: dict[str, ToolCall] = {}
    call_seq: dict[str, int] = {}
    for event in events:
        if state is None and state_for is not None and isinstance(event, _NEEDS_STATE):
            state = state_for(event.seq - 1)
        if isinstance(event, MessageAppended):
            item = message_item(event, redaction)
            for call in item.tool_calls:
                if call.id is not None:
                    calls[call.id] = call
                    call_seq[call.id] = item.seq
            _pair(item, calls, call_seq)
        else:
            item = _describe(event, state, redaction)
        if state is not None:
            apply(state, event)
        items.append(item)
    for event in following:
        if not calls:
            break
        if isinstance(event, MessageAppended) and event.message.get("role") == "tool":
            _pair(message_item(event, redaction), calls, call_seq)
    return items


def _pair(item: Item, calls: dict[str, ToolCall], call_seq: dict[str, int]) -> None:
    if item.role != "tool" or item.tool_call_id is None:
        return
    call = calls.pop(item.tool_call_id, None)
    if call is not None and call.result is None:
        call.result = item
        item.answers = call_seq.pop(item.tool_call_id)

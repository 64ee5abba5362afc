"""OpenAI Agents SDK items inside messages: what they are, their call ids, how they read (pure).

Rules (the one place they live):
- The Agents SDK adapter stores an item that has no chat ``role`` (``function_call``,
  ``function_call_output``, ``reasoning``, hosted tool calls ...) as ``{"role": <its type>,
  "_agents_item": <the item>}`` (:data:`eventlog.AGENTS_ITEM_KEY`). Such a message is an *item
  message*; every projection reads the item, never the wrapper.
- History passes the item itself to the model, unchanged, as the SDK does with its own
  session's items.
- Pairing: an item whose type ends in ``_call`` (``function_call``, ``custom_tool_call``,
  ``computer_call``, ``local_shell_call``) declares its ``call_id``; one whose type ends in
  ``_call_output`` is the result for its ``call_id`` (an orphan when no call declared it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sessionledger.eventlog import AGENTS_ITEM_KEY


def sdk_item(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Agents SDK item an item message holds (None: an ordinary chat message)."""
    item = message.get(AGENTS_ITEM_KEY)
    return item if isinstance(item, dict) else None


def item_call(message: Mapping[str, Any]) -> tuple[str, str] | None:
    """``("call" | "output", call_id)`` of a call or call-output item message (else None)."""
    item = sdk_item(message)
    if item is None:
        return None
    kind, call_id = item.get("type"), item.get("call_id")
    if not isinstance(kind, str) or not call_id:
        return None
    if kind.endswith("_call_output"):
        return "output", str(call_id)
    if kind.endswith("_call"):
        return "call", str(call_id)
    return None


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _texts(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(
            str(p.get("text")) for p in value if isinstance(p, dict) and p.get("text") is not None
        )
    return ""


def describe_item(item: Mapping[str, Any], limit: int = 160) -> str:
    """One line saying what an SDK item is: a call with its arguments, an output, a reasoning
    summary, or its type."""
    kind = str(item.get("type") or "item")
    call_id = item.get("call_id")
    at = f" [{call_id}]" if call_id else ""
    if kind.endswith("_call_output"):
        output = item.get("output")
        text = _texts(output) or (json.dumps(output, ensure_ascii=False) if output else "")
        return f"{kind}{at}: {_short(text, limit)}"
    if kind.endswith("_call"):
        name = item.get("name") or (item.get("action") or {}).get("type") or kind
        args = item.get("arguments", item.get("input", ""))
        return f"{kind} {name}({_short(args, limit)}){at}"
    if kind == "reasoning":
        summary = _texts(item.get("summary")) or _texts(item.get("content"))
        hidden = " (encrypted)" if item.get("encrypted_content") else ""
        return f"reasoning{hidden}: {_short(summary, limit)}" if summary else f"reasoning{hidden}"
    text = _texts(item.get("content"))
    return f"{kind}: {_short(text, limit)}" if text else kind

"""Rule 4 of the history as it was written before its per-shape build (commit 7a9044d), kept
as the reference the differential tests compare ``projections._history._entries`` with: one
message in, its entry and charged tokens out (None: skipped). Test-only; plain on purpose."""

from __future__ import annotations

from typing import Any

from test_sanitize_props import reference as sanitize_reference

from sessionledger.eventlog import AGENTS_ITEM_KEY, WITHHELD, MessageAppended
from sessionledger.projections import attachment_hints

_KEPT_KEYS = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking_blocks")
_KEEPS_EMPTY_ASSISTANT = ("tool_calls", "reasoning_content", "thinking_blocks")


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def reference_build(
    event: MessageAppended, include_timestamps: bool
) -> tuple[dict[str, Any], int] | None:
    """One message's history entry and charged tokens (None when it is skipped)."""
    message = event.message
    if message.get("_command") or message.get(WITHHELD):
        return None
    item = message.get(AGENTS_ITEM_KEY)
    if item is not None and isinstance(item, dict):
        return dict(item), event.tokens
    role = message.get("role")
    content = message.get("content", "")
    added = 0
    if role == "assistant":
        if isinstance(content, str):
            content = sanitize_reference(content)
            if not content and not any(k in message for k in _KEEPS_EMPTY_ASSISTANT):
                return None
    elif role == "user" and isinstance(content, str):
        media = message.get("media")
        if isinstance(media, list) and media:
            crumbs = "\n".join(f"[image: {p}]" for p in media if isinstance(p, str) and p)
            if content:
                added += 1 + _utf8_len(crumbs)
                content = f"{content}\n{crumbs}"
            else:
                added += _utf8_len(crumbs)
                content = crumbs
        if "cli_apps" in message or "mcp_presets" in message:
            for hint in attachment_hints(message):
                added += (1 if content else 0) + _utf8_len(hint)
                content = f"{content}\n{hint}" if content else hint
        if include_timestamps:
            timestamp = message.get("timestamp")
            if timestamp:
                prefix = f"[Message Time: {timestamp}]\n"
                added += _utf8_len(prefix)
                content = prefix + content
    entry: dict[str, Any] = {"role": role, "content": content}
    for key in _KEPT_KEYS:
        if key in message:
            entry[key] = message[key]
    return entry, event.tokens + (added + 3) // 4

"""SDK items as message dicts and back (pure).

Invariants:
- An item with a non-empty string ``role`` (a chat message) is stored as the message dict
  exactly, so the history, catalog and previews read it like any message.
- Any other item (``function_call``, ``function_call_output``, ``reasoning`` ...) is stored as
  ``{"role": <its type, or "item">, "_agents_item": <the item>}`` and read back as the item.
  An item that has a role and happens to hold an ``_agents_item`` key is wrapped too, so
  reading back is never ambiguous.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sessionledger.eventlog import InvalidEventError

#: The key under which an item without a role is kept inside its message dict.
ITEM_KEY: Final = "_agents_item"


def message_from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message dict an SDK item is stored as (see the module's invariants)."""
    if not isinstance(item, Mapping):
        raise InvalidEventError(f"an item must be a dict, not {type(item).__name__}")
    role = item.get("role")
    if isinstance(role, str) and role and ITEM_KEY not in item:
        return dict(item)
    kind = item.get("type")
    return {"role": kind if isinstance(kind, str) and kind else "item", ITEM_KEY: dict(item)}


def item_from_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK item a stored message dict holds (the inverse of :func:`message_from_item`)."""
    if ITEM_KEY in message:
        return dict(message[ITEM_KEY])
    return dict(message)


def window(count: int, limit: int | None) -> int:
    """Where the newest ``limit`` of ``count`` items start, as the SDK's SQLite session reads:
    ``None`` or a negative limit is everything, 0 is nothing."""
    if limit is None or limit < 0:
        return 0
    return max(0, count - limit)

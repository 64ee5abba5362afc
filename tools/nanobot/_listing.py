"""``list_sessions`` and ``read_session_metadata`` as nanobot answers them, read from the views.

Rows come from each view's first line plus a preview scan of at most
:data:`PREVIEW_MAX_RECORDS` message lines and :data:`PREVIEW_MAX_CHARS` characters (nanobot's
limits), so a listing costs what nanobot's costs, never a whole history. The title is the
metadata ``title`` with model-thinking blocks stripped, unless ``title_user_edited`` is true.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from sessionledger import projections

from . import _compat
from ._views import mark_of

PREVIEW_MAX_RECORDS: Final = 200
PREVIEW_MAX_CHARS: Final = 1_000_000


def title_of(metadata: object) -> str:
    """The listed title: metadata ``title`` without ``<think>`` blocks (unless user-edited)."""
    if not isinstance(metadata, dict):
        return ""
    title = metadata.get("title")
    if not isinstance(title, str):
        return ""
    return title if metadata.get("title_user_edited") is True else _compat.strip_think(title)


def _preview_fn() -> Callable[[Mapping[str, Any]], str]:
    module = _compat.nanobot_module()
    found = getattr(module, "_message_preview_text", None) if module is not None else None
    return found if callable(found) else projections.preview_text


def scan_preview(lines: Iterable[bytes]) -> str:
    """The first user message's preview within the scan limits, else the first assistant's."""
    text_of = _preview_fn()
    fallback = ""
    records = chars = 0
    for line in lines:
        if not line.strip():
            continue
        records += 1
        chars += len(line)
        if records > PREVIEW_MAX_RECORDS or chars > PREVIEW_MAX_CHARS:
            break
        try:
            item = msgspec.json.decode(line)
        except msgspec.DecodeError:
            break
        if not isinstance(item, dict) or item.get("_type") == "metadata":
            continue
        text = text_of(item)
        if not text:
            continue
        if item.get("role") == "user":
            return str(text)
        if not fallback and item.get("role") == "assistant":
            fallback = str(text)
    return fallback


def view_row(path: Path) -> dict[str, Any] | None:
    """nanobot's ``list_sessions`` row for a view file, or None when it is not a view."""
    try:
        with path.open("rb") as f:
            head_line = f.readline(1 << 24)
            try:
                head = msgspec.json.decode(head_line.strip())
            except msgspec.DecodeError:
                return None
            if not isinstance(head, dict) or mark_of(head) is None:
                return None
            preview = scan_preview(f)
    except OSError:
        return None
    key = head.get("key")
    if not isinstance(key, str):
        return None
    return {
        "key": key,
        "created_at": head.get("created_at"),
        "updated_at": head.get("updated_at"),
        "title": title_of(head.get("metadata")),
        "preview": preview,
        "path": str(path),
    }


def metadata_record(head: dict[str, Any], key: str) -> dict[str, Any]:
    """``read_session_metadata``'s answer from a view's first line."""
    metadata = head.get("metadata")
    return {
        "key": head.get("key") or key,
        "created_at": head.get("created_at"),
        "updated_at": head.get("updated_at"),
        "metadata": metadata if isinstance(metadata, dict) else {},
    }

"""Text clean-up shared by the history and the catalog (pure).

Invariants:
- :func:`sanitize_assistant_text` removes exactly three kinds of replay artefact, as nanobot's
  session manager does: one leading ``[Message Time: ...]`` prefix (with its newline), whole
  lines that are a local image breadcrumb (``[image: /...]`` or ``[image: ~...]``), and whole
  lines that are a bare ``message(...)`` / ``generate_image(...)`` call echo. Lines are split
  as :meth:`str.splitlines` splits them, rejoined with ``\\n``, and the result is stripped.
- :func:`preview_text` is at most :data:`PREVIEW_MAX_CHARS` characters; a longer text is cut
  to one character less, right-stripped, and ends in ``…``.
- Nothing here reads or writes anything; every function is a function of its arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

PREVIEW_MAX_CHARS: Final = 120
ELLIPSIS: Final = "\u2026"

_TIME_PREFIX = re.compile(r"\A\[Message Time: [^\]]+\]\n?")
_LOCAL_IMAGE_LINE = re.compile(r"\[image: [/~][^\]]+\]\s*")
_CALL_ECHO_LINE = re.compile(r"\s*(?:message|generate_image)\([^)]*\)\s*")
_WHITESPACE = re.compile(r"\s+")


def sanitize_assistant_text(text: str) -> str:
    """Strip replay artefacts (time prefix, local image breadcrumbs, call echoes) from text."""
    text = _TIME_PREFIX.sub("", text, count=1)
    kept = [
        line
        for line in text.splitlines()
        if not _LOCAL_IMAGE_LINE.fullmatch(line) and not _CALL_ECHO_LINE.fullmatch(line)
    ]
    return "\n".join(kept).strip()


def image_breadcrumb(path: str) -> str:
    """The placeholder an image attachment leaves in replayed text: ``[image: <path>]``."""
    return f"[image: {path}]"


def content_text(content: Any) -> str | None:
    """The text of message content: a string as is, the text parts of a list joined by spaces.

    Returns None for any other content (no text to show).
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return None


def preview_text(message: Mapping[str, Any]) -> str:
    """One-line display text of a message: sanitised, whitespace folded, at most 120 chars."""
    text = content_text(message.get("content"))
    if not text:
        return ""
    text = _WHITESPACE.sub(" ", sanitize_assistant_text(text)).strip()
    if len(text) > PREVIEW_MAX_CHARS:
        text = text[: PREVIEW_MAX_CHARS - 1].rstrip() + ELLIPSIS
    return text


def session_preview(messages: Iterable[Mapping[str, Any]]) -> str:
    """The preview of a session: the first user message with text, else the first assistant's.

    Messages whose preview is empty are skipped; the scan stops at the first user match.
    """
    fallback = ""
    for message in messages:
        role = message.get("role")
        if role != "user" and (fallback or role != "assistant"):
            continue
        text = preview_text(message)
        if not text:
            continue
        if role == "user":
            return text
        fallback = text
    return fallback

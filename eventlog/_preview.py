"""The session preview rule, in one place: every preview in the library is chosen here.

A session's (or an ended conversation's) preview is the display text of its first user message
that has any, else of its first assistant message that has any; other roles never count. The
rule is :func:`preview_step` (one message more; :func:`may_change` is its gate), and
:func:`preview_with_role` is its loop (:func:`session_preview` without the role). The
file and memory catalogs run the step as they read a log; PostgreSQL keeps the candidates
(:func:`preview_candidates`: the leading user and assistant messages, up to the one the step
settles on) in a column, and the read side runs the same loop over them.

Display text (:func:`preview_text`): the content's text (:func:`content_text`), without replay
artefacts (:func:`sanitize_assistant_text`), white space folded, at most
:data:`PREVIEW_MAX_CHARS` characters (a longer text is cut to one less, right-stripped, and ends
in ``…``). Pure: nothing here reads or writes anything.

:func:`sanitize_assistant_text` removes exactly three kinds of replay artefact, as nanobot's
session manager does: one leading ``[Message Time: ...]`` prefix (with its newline), whole lines
that are a local image breadcrumb (``[image: /...]`` or ``[image: ~...]``), and whole lines that
are a bare ``message(...)`` / ``generate_image(...)`` call echo. Lines are split as
:meth:`str.splitlines` splits them, rejoined with ``\\n``, and the result is stripped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._events import MessageAppended

PREVIEW_MAX_CHARS: Final = 120
ELLIPSIS: Final = "\u2026"
#: What the preview so far came from (the state :func:`preview_step` carries).
NO_PREVIEW: Final = 0
ASSISTANT_PREVIEW: Final = 1
USER_PREVIEW: Final = 2
#: At most this many candidates are kept for a catalog column, each text cut to
#: :data:`PREVIEW_CHARS` (far more than a preview shows).
PREVIEW_MESSAGES: Final = 8
PREVIEW_CHARS: Final = 2000

_TIME_PREFIX = re.compile(r"\A\[Message Time: [^\]]+\]\n?")
_LOCAL_IMAGE_LINE = re.compile(r"\[image: [/~][^\]]+\]\s*")
_CALL_ECHO_LINE = re.compile(r"\s*(?:message|generate_image)\([^)]*\)\s*")
_WHITESPACE = re.compile(r"\s+")


def sanitize_assistant_text(text: str) -> str:
    """Strip replay artefacts (time prefix, local image breadcrumbs, call echoes) from text.

    Each pattern is tried only where its literal start is (a prefix that does not start with
    ``[Message Time: ``, a line that does not start with ``[image: `` or hold ``age(``, the
    end of ``message(`` and ``generate_image(``, cannot match): a history sanitises hundreds
    of messages, and most have no artefact at all. Those are looked for only in a text that
    has a ``[`` or a ``(`` (one character is found far faster than a word). A text without an
    artefact whose only line break is ``\n`` is just stripped: rejoining its lines with ``\n``
    gives it back less one final ``\n``, which the strip removes anyway.
    """
    if text.startswith("[Message Time: "):
        text = _TIME_PREFIX.sub("", text, count=1)
    if ("[" in text and "[image: " in text) or ("(" in text and "age(" in text):
        lines = [
            line
            for line in text.splitlines()
            if not (line.startswith("[image: ") and _LOCAL_IMAGE_LINE.fullmatch(line))
            and not ("age(" in line and _CALL_ECHO_LINE.fullmatch(line))
        ]
        return "\n".join(lines).strip()
    # The line breaks str.splitlines knows besides "\n" (written out: each test is a memchr).
    if (
        "\r" in text
        or "\x0b" in text
        or "\x0c" in text
        or "\x1c" in text
        or "\x1d" in text
        or "\x1e" in text
        or "\x85" in text
        or "\u2028" in text
        or "\u2029" in text
    ):
        return "\n".join(text.splitlines()).strip()
    return text.strip()


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
    if "[" in text or "(" in text:
        text = _WHITESPACE.sub(" ", sanitize_assistant_text(text)).strip()
    else:  # nothing to sanitise (every pattern needs a bracket): only fold whitespace
        text = " ".join(text.split())
    if len(text) > PREVIEW_MAX_CHARS:
        text = text[: PREVIEW_MAX_CHARS - 1].rstrip() + ELLIPSIS
    return text


def may_change(who: object, role: int) -> bool:
    """Whether a message from ``who`` can change a preview that came from ``role``."""
    return (who == "user" and role != USER_PREVIEW) or (who == "assistant" and role == NO_PREVIEW)


def preview_step(message: Any, preview: str, role: int) -> tuple[str, int]:
    """The preview and its role after one more message (the rule; see the module's first lines).

    Start from ``("", NO_PREVIEW)``; once the role is :data:`USER_PREVIEW` nothing changes it.
    """
    if not isinstance(message, Mapping):
        return preview, role
    who = message.get("role")
    if may_change(who, role):
        text = preview_text(message)
        if text:
            return text, USER_PREVIEW if who == "user" else ASSISTANT_PREVIEW
    return preview, role


def preview_with_role(messages: Iterable[Any]) -> tuple[str, int]:
    """The preview of these messages and the role it came from (the step's loop)."""
    preview, role = "", NO_PREVIEW
    for message in messages:
        preview, role = preview_step(message, preview, role)
        if role == USER_PREVIEW:
            break
    return preview, role


def session_preview(messages: Iterable[Any]) -> str:
    """The preview of a session: the first user message with text, else the first assistant's."""
    return preview_with_role(messages)[0]


def _cut(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and len(content) > PREVIEW_CHARS:
        content = content[:PREVIEW_CHARS]
    elif isinstance(content, list):
        content = [
            {"type": "text", "text": str(p.get("text", ""))[:PREVIEW_CHARS]}
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        ]
    return {"role": message.get("role"), "content": content}


def preview_candidates(messages: Iterable[MessageAppended]) -> list[dict[str, Any]]:
    """The leading user and assistant messages the preview is chosen from (text cut short).

    Up to the message :func:`preview_step` settles on (a user message with display text), at
    most :data:`PREVIEW_MESSAGES`, text cut to :data:`PREVIEW_CHARS`: ``session_preview`` of the
    result is the session's preview.
    """
    return preview_candidates_with_seqs(messages)[0]


def preview_candidates_with_seqs(
    messages: Iterable[MessageAppended],
) -> tuple[list[dict[str, Any]], list[int]]:
    """:func:`preview_candidates` and the seq of each candidate's message, in the same order."""
    candidates: list[dict[str, Any]] = []
    seqs: list[int] = []
    preview, role = "", NO_PREVIEW
    for event in messages:
        message = event.message
        if message.get("role") not in ("user", "assistant"):
            continue
        cut = _cut(message)
        candidates.append(cut)
        seqs.append(event.seq)
        preview, role = preview_step(cut, preview, role)
        if role == USER_PREVIEW or len(candidates) >= PREVIEW_MESSAGES:
            break
    return candidates, seqs

"""The session preview rule, public: one place decides every preview the library shows.

The rule and its parts are :mod:`sessionledger.eventlog._preview`'s: :func:`preview_step` (one
message more), its gate :func:`may_change`, its loop :func:`preview_with_role` /
:func:`session_preview`, the candidates a catalog column keeps (:func:`preview_candidates`), and
the display text (:func:`preview_text`, :func:`content_text`, :func:`sanitize_assistant_text`).

>>> from sessionledger.eventlog.preview import session_preview
>>> session_preview([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "yo"}])
'yo'
"""

from __future__ import annotations

from ._preview import (
    ASSISTANT_PREVIEW,
    ELLIPSIS,
    NO_PREVIEW,
    PREVIEW_CHARS,
    PREVIEW_MAX_CHARS,
    PREVIEW_MESSAGES,
    USER_PREVIEW,
    content_text,
    may_change,
    preview_candidates,
    preview_step,
    preview_text,
    preview_with_role,
    sanitize_assistant_text,
    session_preview,
)

__all__ = (
    "ASSISTANT_PREVIEW",
    "ELLIPSIS",
    "NO_PREVIEW",
    "PREVIEW_CHARS",
    "PREVIEW_MAX_CHARS",
    "PREVIEW_MESSAGES",
    "USER_PREVIEW",
    "content_text",
    "may_change",
    "preview_candidates",
    "preview_step",
    "preview_text",
    "preview_with_role",
    "sanitize_assistant_text",
    "session_preview",
)

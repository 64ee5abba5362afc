"""The read side: LLM history, session catalog, snapshots and stats, all derived from the log."""

from ._sanitize import (
    PREVIEW_MAX_CHARS,
    content_text,
    image_breadcrumb,
    preview_text,
    sanitize_assistant_text,
    session_preview,
)
from ._usage import context_start, context_tokens, token_usage_ratio

__all__ = (
    "PREVIEW_MAX_CHARS",
    "content_text",
    "context_start",
    "context_tokens",
    "image_breadcrumb",
    "preview_text",
    "sanitize_assistant_text",
    "session_preview",
    "token_usage_ratio",
)

"""A whole session gathered for a reader: header, timeline items, head, model's view at the head.

Invariants:
- Everything comes from the log's checked lines (a corrupt line in the middle refuses the export
  with :class:`CorruptLogError`, like ``export_jsonl``; a torn last line is left out), so the
  same log gives the same document, and its ``head`` is the hash a reader checks against the log.
- The store's ``hash_key`` verifies the chain and is never put in a document.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from sessionledger.eventlog import BaseStore, CorruptLogError, initial_state

from ._modelview import ModelView, model_view
from ._redact import NO_REDACTION, Redaction
from ._transcript import Item, build_items


class Document(msgspec.Struct, kw_only=True):
    """One session, ready to render as Markdown or HTML."""

    key: str
    session_id: str
    title: str
    created_at: datetime
    updated_at: datetime
    seq: int
    head: str
    metadata: dict[str, Any]
    live_messages: int
    live_tokens: int
    lifecycle: str
    items: list[Item]
    view: ModelView
    redacted: list[str]


def as_redaction(redact: Redaction | Iterable[str] | None) -> Redaction:
    """A :class:`Redaction` from one, or from field names."""
    if redact is None:
        return NO_REDACTION
    if isinstance(redact, Redaction):
        return redact
    return Redaction.parse(redact)


def session_document(
    store: BaseStore,
    key: str,
    *,
    redact: Redaction | Iterable[str] | None = None,
    max_messages: int = 0,
    max_tokens: int = 0,
) -> Document:
    """Gather session ``key`` for an export (see the module doc).

    Raises:
        SessionNotFoundError: no session ``key``.
        CorruptLogError: a line in the middle of the log is bad (run verify, then repair).
        RedactionError: a field name given to ``redact`` is not understood.
    """
    redaction = as_redaction(redact)
    loaded = store.load(key, snapshot=False)
    if loaded.bad is not None:  # pragma: no cover - load raises first
        raise CorruptLogError(loaded.path, loaded.bad.line, loaded.bad.reason)
    header = loaded.header
    state = initial_state(header)
    items = build_items(loaded.events, state=state, redaction=redaction)
    title = state.metadata.get("title")
    return Document(
        key=header.key,
        session_id=header.id,
        title=title if isinstance(title, str) and "title" not in redaction.metadata else "",
        created_at=header.created_at.astimezone(UTC),
        updated_at=state.updated_at.astimezone(UTC),
        seq=state.seq,
        head=state.head,
        metadata=redaction.meta(state.metadata),
        live_messages=len(state.messages),
        live_tokens=state.live_tokens,
        lifecycle=state.lifecycle,
        items=items,
        view=model_view(
            state, max_messages=max_messages, max_tokens=max_tokens, redaction=redaction
        ),
        redacted=redaction.describe(),
    )

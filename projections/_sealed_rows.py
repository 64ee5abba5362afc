"""What a listing shows of a sealed session: opened where it is listed, never stored opened.

Rules:
- The stored catalog (the file store's ``.catalog``, the PostgreSQL ``sessions`` columns) keeps
  no title, preview, summary or tags of a sealed session (see ``_catalog_row``): its rows say
  ``sealed=True`` and hold only the envelope (counts, times, lifecycle, conversations).
- A store with a key provider opens them when it lists: each sealed row a listing returns (after
  its filters, offset and limit; none of them looks at the content) is completed from the
  session's opened state (loaded from its snapshot) by the catalog's own rules. Nothing opened
  is written anywhere, and nothing is kept after the call.
- A store without a key provider, or a session whose keys it cannot open (another master key, a
  missing key record), lists the row as stored: empty title and preview, ``sealed=True``.
- Erased content and a redacted message read back as withheld, which no title or preview shows.
- A PostgreSQL row does not say whether its session is sealed: with a key provider, a row with
  no title, preview, summary or tags is loaded, and completed only if its session is sealed.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sessionledger.eventlog import BaseStore, EventLogError, SessionState
from sessionledger.eventlog.preview import session_preview

from ._catalog_row import SessionInfo, row_from_state
from ._conversation_row import ConversationInfo
from ._pg_catalog import CatalogRecords


def _can_open(store: BaseStore) -> bool:
    return bool(getattr(store, "encrypted", False))


def _maybe_sealed(store: BaseStore, row: SessionInfo | ConversationInfo) -> bool:
    if row.sealed:
        return True
    blank = not (row.title or row.preview)
    if isinstance(row, SessionInfo):
        blank = blank and not (row.summary or row.tags)
    return blank and isinstance(store, CatalogRecords)


def _opened_state(store: BaseStore, key: str) -> SessionState | None:
    """The session's state opened with the store's keys (None: not sealed, or not openable)."""
    try:
        state = store.load(key).state
    except EventLogError:  # the keys do not open it, or the log is gone or damaged
        return None
    return state if state.sealed else None


def open_sessions(store: BaseStore, rows: list[SessionInfo]) -> list[SessionInfo]:
    """``rows`` with the title, preview, summary and tags of sealed sessions opened, when
    ``store`` holds the keys (see the module rules); the others as they are.

    Public as ``projections.open_sealed_rows``: a viewer lists with ``open_sealed=False``,
    pages, and opens only the page it shows.
    """
    if not _can_open(store) or not any(_maybe_sealed(store, r) for r in rows):
        return rows
    out: list[SessionInfo] = []
    for row in rows:
        state = _opened_state(store, row.key) if _maybe_sealed(store, row) else None
        if state is not None:
            row = _completed(row, row_from_state(state, 0, opened=True).info)
        out.append(row)
    return out


def _completed(row: SessionInfo, opened: SessionInfo) -> SessionInfo:
    return msgspec.structs.replace(
        row,
        title=opened.title,
        preview=opened.preview,
        summary=opened.summary,
        tags=opened.tags,
        sealed=True,
    )


def open_conversations(store: BaseStore, rows: list[ConversationInfo]) -> list[ConversationInfo]:
    """``rows`` with the titles and previews of sealed sessions' conversations opened, when
    ``store`` holds the keys (see the module rules); the others as they are."""
    if not _can_open(store) or not any(_maybe_sealed(store, r) for r in rows):
        return rows
    states: dict[str, SessionState | None] = {}
    out: list[ConversationInfo] = []
    for row in rows:
        if _maybe_sealed(store, row):
            if row.key not in states:
                states[row.key] = _opened_state(store, row.key)
            state = states[row.key]
            if state is not None:
                row = _conversation_opened(row, state)
        out.append(row)
    return out


def _conversation_opened(row: ConversationInfo, state: SessionState) -> ConversationInfo:
    changes: dict[str, Any] = {"sealed": True}
    if row.current:
        info = row_from_state(state, 0, opened=True).info
        changes.update(title=info.title, preview=info.preview)
    else:
        for ended in state.ended:
            if ended.start_seq == row.start_seq and ended.end_seq == row.end_seq:
                changes.update(title=ended.title, preview=session_preview(ended.preview))
                break
    return msgspec.structs.replace(row, **changes)

"""Import JSON session files (``SessionData``: one JSON document per session).

A file holds ``version``, ``session_id``, ``created_at``, ``updated_at``, ``model``,
``workspace_root``, ``messages`` (message dicts) and ``token_usage``. Rules:
- The key is ``session_id``; ``model``, ``workspace_root`` and ``token_usage`` become the
  session's initial metadata.
- A file that is not such a document (bad JSON, missing fields) raises
  :class:`ForeignFormatError` naming it, before anything is imported.
- A message entry that is not a dict with a ``role`` is kept in quarantine and counted.
- The files carry no per-message times: messages take ``created_at``, the last one
  ``updated_at``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic

from sessionledger.eventlog import BaseStore

from ._errors import ForeignFormatError
from ._importing import (
    EPOCH,
    ImportReport,
    Rejected,
    build_session,
    canonical,
    install,
    parse_time,
    read_source,
    source_files,
)

ORIGIN = "session-json"


class SessionData(pydantic.BaseModel):
    """Seed 001's persisted session (validated at the edge; unknown fields ignored)."""

    version: int = 1
    session_id: str = pydantic.Field(min_length=1)
    created_at: str
    updated_at: str
    model: str = ""
    workspace_root: str = ""
    messages: list[Any] = []
    token_usage: dict[str, Any] = {}


def parse_session_json(data: bytes, path: str) -> SessionData:
    """Validate one file's bytes as ``SessionData`` (:class:`ForeignFormatError` if not)."""
    try:
        return SessionData.model_validate_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "document"
        raise ForeignFormatError(
            path, f"not a session JSON file ({where}: {first['msg']})"
        ) from exc


def import_session_json(store: BaseStore, path: str | Path) -> ImportReport:
    """Import one seed-001 session file, or every ``*.json`` file in a directory.

    Raises:
        ForeignFormatError: a file is not a session JSON document (nothing imported).
    """
    files = source_files(Path(path), ".json")
    parsed = [(str(f), parse_session_json(read_source(f), str(f))) for f in files]
    report = ImportReport()
    for source, doc in parsed:
        created = parse_time(doc.created_at) or EPOCH
        updated = max(parse_time(doc.updated_at) or created, created)
        messages: list[dict[str, Any]] = []
        rejected: list[Rejected] = []
        for index, entry in enumerate(doc.messages):
            if isinstance(entry, dict) and isinstance(entry.get("role"), str) and entry["role"]:
                messages.append(entry)
            else:
                what = "not a message (no role)" if isinstance(entry, dict) else "not an object"
                rejected.append(
                    (f"session-json import: messages[{index}]: {what}", 0, 0, canonical(entry))
                )
        times = [created] * len(messages)
        if times:
            times[-1] = updated
        metadata: dict[str, Any] = {
            "model": doc.model,
            "workspace_root": doc.workspace_root,
            "token_usage": doc.token_usage,
        }
        data = build_session(
            store,
            key=doc.session_id,
            origin=ORIGIN,
            created_at=created,
            metadata=metadata,
            messages=list(zip(messages, times, strict=True)),
        )
        notes = [f"{len(rejected)} message entr(ies) kept in quarantine"] if rejected else []
        report.sessions.append(
            install(
                store,
                doc.session_id,
                data,
                source=source,
                messages=len(messages),
                rejected=rejected,
                notes=notes,
            )
        )
    return report

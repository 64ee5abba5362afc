"""Import nanobot session files (the early and the later format, seeds 002 and 003).

A nanobot session file is JSONL: a ``{"_type": "metadata", "key": ..., "created_at": ...,
"updated_at": ..., "metadata": {...}, "last_consolidated": N}`` line, then one message dict per
line. Rules:
- The key comes from the metadata line, never from the file name: nanobot names files
  ``key.replace(":", "_")``, which maps ``a:b`` and ``a_b`` to one name.
- Corrupt lines are salvaged around the way nanobot's ``_repair`` does (skip what does not
  parse, keep the rest); here every skipped line is also kept, verbatim, in the session's
  quarantine and counted. Lines that parse but are not messages (no ``role``) are kept the same
  way, since a log event needs a role.
- A ``last_consolidated`` that is not an integer within the messages is reset to 0 (noted).
- A file with no metadata line naming a key, or with no line that parses at all, is not a
  nanobot session: :class:`ForeignFormatError` names it, before anything is imported.
- Message times come from each message's ``timestamp`` (naive: local time), never going
  backwards; the session's ``created_at`` from the metadata line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
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
    install,
    monotonic,
    parse_time,
    read_source,
    source_files,
)

ORIGIN = "nanobot"


class NanobotMetadataLine(pydantic.BaseModel):
    """The first line of a nanobot session file (extra fields are allowed and ignored)."""

    model_config = pydantic.ConfigDict(extra="allow")

    key: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] | None = None
    last_consolidated: Any = 0


@dataclass(slots=True)
class NanobotSession:
    """A nanobot session file, parsed and salvaged (pure result of :func:`parse_nanobot`)."""

    path: str
    key: str
    created_at: datetime
    metadata: dict[str, Any]
    messages: list[tuple[dict[str, Any], datetime]]
    last_consolidated: int
    rejected: list[Rejected] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_text(value: dict[str, Any]) -> bool:
    """Whether every string in a parsed line is valid Unicode (JSON can escape lone surrogates)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_nanobot(data: bytes, path: str, *, key: str | None = None) -> NanobotSession:
    """Parse a nanobot session file's bytes; ``key`` overrides the metadata line's key.

    Raises:
        ForeignFormatError: no line parses, or no key can be found (not a nanobot session).
    """
    meta: NanobotMetadataLine | None = None
    raw_messages: list[dict[str, Any]] = []
    rejected: list[Rejected] = []
    parsed_any = False
    offset = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        start = offset
        offset += len(raw) + 1
        text = raw.strip()
        if not text:
            continue
        reason = ""
        try:
            value = json.loads(text.decode("utf-8"))
        except UnicodeDecodeError:
            reason = "not UTF-8"
        except (ValueError, RecursionError) as exc:  # ValueError: also ints past 4300 digits
            reason = f"invalid JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else exc}"
        else:
            parsed_any = True
            if not isinstance(value, dict):
                reason = f"a JSON {type(value).__name__}, not an object"
            elif not _is_text(value):
                reason = "a string in it is not valid Unicode (a lone surrogate escape)"
            elif value.get("_type") == "metadata":
                try:
                    meta = NanobotMetadataLine.model_validate(value)
                except pydantic.ValidationError as exc:
                    reason = f"unusable metadata line: {exc.errors()[0]['msg']}"
                else:
                    continue
            elif not isinstance(value.get("role"), str) or not value["role"]:
                reason = "not a message (no role)"
            else:
                raw_messages.append(value)
                continue
        rejected.append((f"nanobot import: {reason}", number, start, raw))
    if not parsed_any:
        raise ForeignFormatError(path, "no line is JSON; not a nanobot session file")
    found = key or (meta.key if meta is not None else None)
    if not found:
        why = "its metadata line names no key" if meta is not None else "it has no metadata line"
        raise ForeignFormatError(
            path, f"{why}, and the file name is not a reliable key (give the key explicitly)"
        )
    notes: list[str] = []
    stamps = [parse_time(m.get("timestamp")) for m in raw_messages]
    created = parse_time(meta.created_at) if meta is not None else None
    if created is None:
        created = next((t for t in stamps if t is not None), None)
        if created is None and meta is not None:
            created = parse_time(meta.updated_at)
        notes.append("no usable created_at; took the first time found")
    created = created or EPOCH
    lc = meta.last_consolidated if meta is not None else 0
    if isinstance(lc, bool) or not isinstance(lc, int) or not 0 <= lc <= len(raw_messages):
        notes.append(f"last_consolidated {lc!r} is not within the messages; reset to 0")
        lc = 0
    times = monotonic(stamps, created)
    if rejected:
        notes.append(f"{len(rejected)} line(s) could not be imported; kept in quarantine")
    return NanobotSession(
        path=path,
        key=found,
        created_at=created,
        metadata=dict(meta.metadata or {}) if meta is not None else {},
        messages=list(zip(raw_messages, times, strict=True)),
        last_consolidated=lc,
        rejected=rejected,
        notes=notes,
    )


def import_nanobot(store: BaseStore, path: str | Path, *, key: str | None = None) -> ImportReport:
    """Import a nanobot sessions directory (every ``*.jsonl`` in it) or one session file.

    Every file is parsed before anything is written. ``key`` (one file only) overrides the
    metadata line's key, for a file whose metadata line is lost.

    Raises:
        ForeignFormatError: a file is not a nanobot session at all (nothing imported).
    """
    files = source_files(Path(path), ".jsonl")
    if key is not None and len(files) != 1:
        raise ForeignFormatError(str(path), "a key can only be given for one file")
    parsed = [parse_nanobot(read_source(f), str(f), key=key) for f in files]
    report = ImportReport()
    for session in parsed:
        data = build_session(
            store,
            key=session.key,
            origin=ORIGIN,
            created_at=session.created_at,
            metadata=session.metadata,
            messages=session.messages,
            last_consolidated=session.last_consolidated,
        )
        report.sessions.append(
            install(
                store,
                session.key,
                data,
                source=session.path,
                messages=len(session.messages),
                rejected=session.rejected,
                notes=session.notes,
            )
        )
    return report

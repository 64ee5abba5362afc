"""Importing a nanobot workspace's own session files, once, with a ledger.

Invariants:
- The ledger (``.nanobot-imports.jsonl`` in the store directory, 0600, append-only JSON lines)
  records every nanobot file imported or skipped (by file name) and every deleted key.
- A file named in the ledger is never imported again; a deleted key is never imported again,
  even while a nanobot file for it is still there. A file that could not be read or imported
  for a passing reason (I/O error, a lock) is not recorded, so the next start retries it.
- The parsing, salvage of corrupt lines (kept in the session's quarantine) and the writing are
  :func:`replay.import_nanobot`'s; this module only decides which files to hand it.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from sessionledger import replay
from sessionledger.eventlog import EventLogError, FileStore

from . import _compat
from ._views import mark_of, read_header

logger = logging.getLogger("sessionledger.tools.nanobot")

LEDGER_NAME = ".nanobot-imports.jsonl"


class Ledger:
    """The record of imported nanobot files and deleted keys."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> tuple[set[str], set[str]]:
        """The file names already handled, and the deleted keys."""
        files: set[str] = set()
        deleted: set[str] = set()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return files, deleted
        for line in data.splitlines():
            try:
                record = msgspec.json.decode(line, type=dict[str, Any])
            except msgspec.DecodeError:
                continue  # a torn last record: the import it names is retried (idempotent)
            if record.get("event") == "deleted" and isinstance(record.get("key"), str):
                deleted.add(record["key"])
            elif isinstance(record.get("file"), str):
                files.add(record["file"])
        return files, deleted

    def imported(self) -> set[str]:
        """The file names whose sessions were imported (not those skipped)."""
        names: set[str] = set()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return names
        for line in data.splitlines():
            try:
                record = msgspec.json.decode(line, type=dict[str, Any])
            except msgspec.DecodeError:
                continue
            if record.get("event") == "imported" and isinstance(record.get("file"), str):
                names.add(record["file"])
        return names

    def record(self, record: dict[str, Any]) -> None:
        """Append one record (with the time)."""
        line = msgspec.json.encode({"at": datetime.now(UTC).isoformat(), **record}) + b"\n"
        fd = os.open(
            self.path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
        )
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def import_workspace(store: FileStore, sessions_dir: Path, ledger: Ledger) -> None:
    """Import every nanobot file in ``sessions_dir`` that the ledger does not name yet."""
    done, deleted = ledger.read()
    for path in sorted(sessions_dir.glob("*.jsonl")):
        if path.name in done or path.is_symlink() or not path.is_file():
            continue
        if mark_of(read_header(path)) is not None:
            continue  # a view of ours (its ledger record lost): the log is the record
        _import_file(store, path, ledger, deleted)


def import_file(store: FileStore, path: Path, ledger: Ledger) -> None:
    """Import one nanobot file now (a migrated legacy file), unless the ledger forbids it."""
    done, deleted = ledger.read()
    if path.name not in done:
        _import_file(store, path, ledger, deleted)


def remove_legacy(stem: str) -> bool:
    """Remove ``<legacy dir>/<stem>.jsonl`` (nanobot deletes both locations); True if removed."""
    path = _compat.legacy_sessions_dir() / f"{stem}.jsonl"
    if path.is_symlink() or not path.is_file():
        return False
    return delete_session_file(path)


def delete_session_file(path: Path) -> bool:
    """Unlink ``path`` as nanobot deletes a session file (a failure is logged, not raised)."""
    try:
        path.unlink()
    except OSError as exc:
        logger.warning("Failed to delete session file %s: %s", path, exc)
        return False
    return True


def _import_file(store: FileStore, path: Path, ledger: Ledger, deleted: set[str]) -> None:
    key: str | None = None
    try:
        parsed = replay.parse_nanobot(path.read_bytes(), str(path))
    except replay.ForeignFormatError:
        # No key in the file: nanobot itself falls back to the file name (lossy, but the
        # only name such a session ever had).
        key = path.stem.replace("_", ":", 1)
        try:
            parsed = replay.parse_nanobot(path.read_bytes(), str(path), key=key)
        except replay.ForeignFormatError as exc:
            logger.warning("Not importing %s: %s", path, exc)
            ledger.record({"event": "skipped", "file": path.name, "why": str(exc)})
            return
    except OSError as exc:
        logger.warning("Cannot read %s: %s", path, exc)
        return  # retried on the next start
    if parsed.key in deleted:
        ledger.record({"event": "skipped", "file": path.name, "key": parsed.key, "why": "deleted"})
        return
    try:
        report = replay.import_nanobot(store, path, key=key)
    except EventLogError as exc:
        logger.warning("Failed to import %s: %s", path, exc)
        return  # retried on the next start
    for item in report.sessions:
        if item.bad_lines:
            logger.warning(
                "Skipped %d corrupt lines in session %s (kept in quarantine)",
                item.bad_lines,
                item.key,
            )
        ledger.record(
            {
                "event": "imported",
                "file": path.name,
                "key": item.key,
                "outcome": item.outcome,
                "messages": item.messages,
                "bad_lines": item.bad_lines,
            }
        )

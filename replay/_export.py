"""Export: a session or a whole store, to our JSONL (byte-identical lines) or nanobot's format.

Invariants:
- Our format: the exported bytes are the log's valid lines exactly as stored, so hashes and
  the chain verify the same anywhere (a torn last line is left out; a corrupt log is refused).
- Nanobot's format: a ``_type: metadata`` line (key, created_at, updated_at as nanobot writes
  them: local time without zone, metadata, last_consolidated), then one live message per line.
  What nanobot cannot hold (compactions, lifecycle, withdrawn messages) is not in it.
- Files are written whole (temporary file, fsync, rename), 0600 in a 0700 directory; an
  existing file is never overwritten: the same bytes are ``unchanged``, other bytes a ``clash``.
- nanobot names files ``key.replace(":", "_")`` (made safe); when two keys map to one name,
  the later is written under our collision-free name instead, and the report says so.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from sessionledger.eventlog import (
    BaseStore,
    CorruptLogError,
    EventLogError,
    InvalidEventError,
    SessionState,
    decode_log,
)
from sessionledger.eventlog.backend import key_to_stem, read_regular_file, write_temp_beside

from ._views import where

Format = Literal["jsonl", "nanobot"]
_UNSAFE = re.compile(r'[<>:"/\\|?*\x00-\x1f]')


@dataclass(slots=True)
class ExportedFile:
    """One session written (or found already there, or refused)."""

    key: str
    path: str
    outcome: Literal["written", "unchanged", "clash"]
    bytes: int
    note: str = ""


@dataclass(slots=True)
class ExportReport:
    """What :func:`export_store` wrote."""

    directory: str
    format: Format
    files: list[ExportedFile] = field(default_factory=list)

    @property
    def clashes(self) -> list[ExportedFile]:
        """Files not written because a different file already had that name."""
        return [f for f in self.files if f.outcome == "clash"]

    @property
    def ok(self) -> bool:
        """True when every session was exported."""
        return not self.clashes


def export_jsonl(store: BaseStore, key: str) -> bytes:
    """The session's log lines exactly as stored (a torn last line left out).

    Raises:
        CorruptLogError: a line in the middle is bad (repair it first).
    """
    data = store.read_bytes(key)
    decoded = decode_log(data, key=store.hash_key)
    problem = decoded.bad or (decoded.torn if decoded.header is None else None)
    if problem is not None:
        raise CorruptLogError(where(store, key), problem.line, problem.reason)
    return data[: decoded.valid_length]


def _local(ts: datetime) -> str:
    """nanobot's time format: local wall time, no zone."""
    return ts.astimezone().replace(tzinfo=None).isoformat()


def nanobot_lines(state: SessionState) -> bytes:
    """A session state in nanobot's JSONL format (pure)."""
    meta = {
        "_type": "metadata",
        "key": state.key,
        "created_at": _local(state.created_at),
        "updated_at": _local(state.updated_at),
        "metadata": state.metadata,
        "last_consolidated": state.last_consolidated,
    }
    lines = [json.dumps(meta, ensure_ascii=False)]
    lines.extend(json.dumps(m.message, ensure_ascii=False) for m in state.messages)
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def export_nanobot(store: BaseStore, key: str) -> bytes:
    """The session's current state as a nanobot session file."""
    return nanobot_lines(store.load(key).state)


def nanobot_name(key: str) -> str:
    """The file name nanobot gives ``key`` (lossy: ``a:b`` and ``a_b`` share it)."""
    return _UNSAFE.sub("_", key.replace(":", "_")).strip() + ".jsonl"


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        return read_regular_file(path) == data
    except EventLogError:  # a symlink, a FIFO, a directory: never ours to overwrite
        return False


def _write_new(path: Path, data: bytes) -> Literal["written", "unchanged", "clash"]:
    if path.is_symlink():
        return "clash"
    if path.exists():
        return "unchanged" if _same_bytes(path, data) else "clash"
    tmp = write_temp_beside(path, data)
    try:
        os.link(tmp, path)  # fails if the name appeared meanwhile: never overwrite
    except FileExistsError:
        return "unchanged" if _same_bytes(path, data) else "clash"
    finally:
        os.unlink(tmp)
    return "written"


def export_store(
    store: BaseStore,
    directory: str | os.PathLike[str],
    *,
    format: Format = "jsonl",
    keys: list[str] | None = None,
) -> ExportReport:
    """Write every session (or ``keys``) of ``store`` into ``directory``, one file each.

    Our format names files by the collision-free key encoding; nanobot's by nanobot's rule.
    """
    if format not in ("jsonl", "nanobot"):
        raise InvalidEventError(f"format must be 'jsonl' or 'nanobot', not {format!r}")
    root = Path(directory).expanduser()
    if not root.exists():
        root.mkdir(mode=0o700, parents=True)
    report = ExportReport(directory=str(root), format=format)
    used: dict[str, str] = {}
    for key in store.keys() if keys is None else keys:
        note = ""
        if format == "jsonl":
            data = export_jsonl(store, key)
            name = key_to_stem(key) + ".jsonl"
        else:
            data = export_nanobot(store, key)
            name = nanobot_name(key)
            if name in used and used[name] != key:
                note = f"nanobot would name it {name}, like {used[name]!r}; used a distinct name"
                name = key_to_stem(key) + ".jsonl"
        used[name] = key
        path = root / name
        outcome = _write_new(path, data)
        if outcome == "clash" and not note:
            note = "a different file already has this name; not overwritten"
        report.files.append(ExportedFile(key, str(path), outcome, len(data), note))
    if report.files:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return report

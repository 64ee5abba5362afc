"""Import our own JSONL logs (an export, or another store's files), and sniff any source.

A log is installed byte for byte: the same lines, the same hashes. It must verify with this
store's hash key (a log chained with another secret cannot be checked here, so it is refused).
A torn last line is left out and kept in the new session's quarantine.
"""

from __future__ import annotations

from pathlib import Path

from sessionledger.eventlog import BaseStore, MessageAppended, decode_log

from ._errors import ForeignFormatError
from ._import_json import import_session_json
from ._import_nanobot import import_nanobot
from ._importing import ImportReport, install, read_source, source_files


def import_log(store: BaseStore, path: str | Path) -> ImportReport:
    """Import session logs in our format: one file, or every ``*.jsonl`` log in a directory.

    Raises:
        ForeignFormatError: a file is not a session log, or has a bad line in the middle, or
            does not verify with this store's hash key (nothing imported).
    """
    files = source_files(Path(path), ".jsonl")
    parsed = []
    for f in files:
        data = read_source(f)
        decoded = decode_log(data, key=store.hash_key)
        if decoded.header is None:
            problem = decoded.bad or decoded.torn
            why = problem.reason if problem is not None else "empty file"
            raise ForeignFormatError(str(f), f"not a session log (line 1: {why})")
        if decoded.bad is not None:
            raise ForeignFormatError(
                str(f), f"line {decoded.bad.line}: {decoded.bad.reason} (repair it first)"
            )
        parsed.append((f, decoded, data))
    report = ImportReport()
    for f, decoded, data in parsed:
        assert decoded.header is not None
        torn = decoded.torn
        rejected = (
            [] if torn is None else [(f"import: {torn.reason}", torn.line, torn.offset, torn.data)]
        )
        report.sessions.append(
            install(
                store,
                decoded.header.key,
                data[: decoded.valid_length],
                source=str(f),
                messages=sum(1 for e in decoded.events if isinstance(e, MessageAppended)),
                rejected=rejected,
            )
        )
    return report


def sniff(path: Path) -> str:
    """Which importer a file or directory needs: ``log``, ``nanobot`` or ``json``."""
    files = source_files(path, ".jsonl") or source_files(path, ".json")
    for f in files:
        if f.name.endswith(".json"):
            return "json"
        head = read_source(f)[:4096].lstrip()
        if head.startswith(b'{"type":"header"'):
            return "log"
        if b'"_type"' in head.split(b"\n", 1)[0] or head.startswith(b"{"):
            return "nanobot"
    raise ForeignFormatError(str(path), "no session log, nanobot session or session JSON in it")


def import_path(store: BaseStore, path: str | Path) -> ImportReport:
    """Import whatever ``path`` holds: our logs, nanobot sessions, or JSON session documents."""
    where = Path(path)
    kind = sniff(where)
    if kind == "log":
        return import_log(store, where)
    if kind == "nanobot":
        return import_nanobot(store, where)
    return import_session_json(store, where)

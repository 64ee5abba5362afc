"""Repair: keep a log's valid prefix, move everything after the first bad line to quarantine.

Never runs implicitly: opening a session or :func:`replay.recover` only report corruption in
the middle of a log; an operator (or a program, on purpose) calls :func:`repair`. Nothing is
deleted: the cut bytes are kept in the session's quarantine, and the report says how many lines
and bytes went there. A file whose first line is not a session header is not a log: repair
refuses it and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionledger.eventlog import BaseStore, NotALogError, decode_log

from ._verify import _check_decoded
from ._views import rebuild_snapshot, refresh_catalog, where


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What :func:`repair` did: the line it cut at, and what went to quarantine."""

    key: str
    path: str
    #: False when the log was sound and nothing was cut.
    repaired: bool
    #: The first bad line (1-based) and why it is bad (0 and "" when nothing was cut).
    line: int = 0
    reason: str = ""
    lines_moved: int = 0
    bytes_moved: int = 0
    quarantine: str | None = None
    #: Events kept (the last valid seq).
    kept_seq: int = 0

    def __str__(self) -> str:
        if not self.repaired:
            return f"{self.path}: nothing to repair (the log is sound up to seq {self.kept_seq})"
        return (
            f"{self.path}: line {self.line} was bad ({self.reason}); kept seq 1..{self.kept_seq}, "
            f"moved {self.lines_moved} line(s), {self.bytes_moved} bytes, to {self.quarantine}"
        )


def _first_bad_offset(data: bytes, line: int) -> int:
    """Byte offset where 1-based ``line`` starts."""
    offset = 0
    for _ in range(line - 1):
        offset = data.index(b"\n", offset) + 1
    return offset


def repair(store: BaseStore, key: str) -> RepairReport:
    """Cut ``key``'s log after its valid prefix, keeping what follows in quarantine.

    The first bad line is the first that fails its hash, is not a valid event, breaks the
    seq, repeats an event id, or is an unfinished last line.

    Raises:
        SessionNotFoundError: no session ``key``.
        NotALogError: the file's first line is not a session header (nothing changed).
        LockedError: a writer holds the session (nothing changed).
    """
    path = where(store, key)
    for _ in range(3):
        data = store.read_bytes(key)
        decoded = decode_log(data, key=store.hash_key)
        check = _check_decoded(decoded, data, key=key, path=path)
        if decoded.header is None:
            raise NotALogError(path, check.problems[0].what if check.problems else "empty")
        if decoded.header.key != key:
            raise NotALogError(path, f"its header names session {decoded.header.key!r}")
        # The first bad line: a duplicated id can come before the line the decoder stopped at.
        line, reason = 0, ""
        dup = [f for f in check.problems if "repeats line" in f.what]
        stop = decoded.bad or decoded.torn
        if dup:
            line, reason = dup[0].line, dup[0].what
        if stop is not None and (not line or stop.line < line):
            line, reason = stop.line, stop.reason
        if not line:
            return RepairReport(key, path, repaired=False, kept_seq=decoded.last_seq)
        offset = _first_bad_offset(data, line)
        cut = store.cut(
            key, offset, reason=f"repair: line {line}: {reason}", expect_length=len(data)
        )
        if cut is None:
            continue  # the log changed since we read it: look again
        moved = data.count(b"\n", offset) + (0 if data.endswith(b"\n") else 1)
        # Lines before the bad one, less the header and any later segment's header.
        kept = decoded.header.seq + (line - 2) - data.count(b'\n{"type":"header"', 0, offset)
        rebuild_snapshot(store, key)
        refresh_catalog(store)
        return RepairReport(
            key,
            path,
            repaired=True,
            line=line,
            reason=reason,
            lines_moved=moved,
            bytes_moved=cut.bytes,
            quarantine=cut.quarantine,
            kept_seq=kept,
        )
    raise NotALogError(path, "it kept changing while being repaired")

"""Verify: read every line of a log and say exactly which line is wrong and why.

Checks, per session: the header (a session log, this format version, the key it is filed
under); every line's chained hash (keyed when a secret is given); contiguous seq; valid events;
unique event ids; a torn last line; and the head against what the snapshot and the catalog
recorded, so a log cut short by whole lines (which still chains) is reported as truncated.
A fork's header names its source session, seq and that seq's hash: while the source exists,
its (sound) log must hold that hash at that seq, so rewriting the source is detected from the
fork too. Verify changes nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessionledger.eventlog import (
    FORMAT_VERSION,
    BaseStore,
    CorruptLogError,
    FileStore,
    Header,
    SessionNotFoundError,
    UnsafePathError,
    decode_log,
)
from sessionledger.eventlog.backend import catalog_source
from sessionledger.eventlog.codec import Decoded, normalize_key

from ._fastscan import scan
from ._report import Finding, SessionVerify, VerifyReport
from ._views import Recorded, Views, where


@dataclass(slots=True)
class Checked:
    """A log's check: the report, and what the head check and recovery need."""

    report: SessionVerify
    header: Header | None
    #: The valid events (light or full), each with its ``seq`` and ``h``.
    events: Sequence[Any]
    #: The slow path's decode (None when the fast path found the log sound).
    decoded: Decoded | None


def check_data(data: bytes, *, key: str | None, path: str, hash_key: bytes = b"") -> Checked:
    """Check one log's bytes (pure): the fast path for a sound log, else the exact problems."""
    fast = scan(data, hash_key, light=True)
    if fast is not None:
        header = fast.header
        ids = {e.id for e in fast.events}
        ids.add(header.id)
        if (
            (key is None or header.key == key)
            and header.version <= FORMAT_VERSION
            and len(ids) == len(fast.events) + 1
        ):
            report = SessionVerify(
                key=key or header.key,
                path=path,
                lines=fast.lines,
                bytes=len(data),
                seq=fast.last_seq,
                head=fast.head,
            )
            return Checked(report, header, fast.events, None)
    decoded = decode_log(data, key=hash_key)
    report = _check_decoded(decoded, data, key=key, path=path)
    return Checked(report, decoded.header, decoded.events, decoded)


def check_log(data: bytes, *, key: str | None, path: str, hash_key: bytes = b"") -> SessionVerify:
    """Check one log's bytes (pure): header, chain, seq, events, unique ids, torn tail."""
    return check_data(data, key=key, path=path, hash_key=hash_key).report


def _check_decoded(decoded: Decoded, data: bytes, *, key: str | None, path: str) -> SessionVerify:
    header = decoded.header
    report = SessionVerify(key=key or "", path=path, bytes=len(data), lines=decoded.lines)
    problems = report.problems
    if header is None:
        problem = decoded.bad or decoded.torn
        reason = problem.reason if problem is not None else "the file is empty"
        problems.append(Finding(path, 1, f"not a session log: {reason}"))
        return report
    if key is None:
        report.key = header.key
    elif header.key != key:
        problems.append(Finding(path, 1, f"the header names session {header.key!r}, not {key!r}"))
    version = max(header.version, decoded.version)
    if version > FORMAT_VERSION:
        problems.append(
            Finding(path, 1, f"format version {version}; this reader knows {FORMAT_VERSION}")
        )
    seen: dict[str, int] = {header.id: 1}
    line = 1
    for event in decoded.events:
        line += 1
        first = seen.setdefault(event.id, line)
        if first != line:
            problems.append(Finding(path, line, f"event id {event.id!r} repeats line {first}"))
    report.seq = decoded.last_seq
    report.head = decoded.head
    if decoded.bad is not None:
        bad = decoded.bad
        rest = data.count(b"\n", bad.offset) - 1
        after = f"; {rest} more line(s) after it not checked (repair moves them to quarantine)"
        problems.append(Finding(path, bad.line, bad.reason + (after if rest > 0 else "")))
        report.lines = bad.line + max(rest, 0)
    if decoded.torn is not None:
        torn = decoded.torn
        report.torn_bytes = len(torn.data)
        problems.append(
            Finding(
                path,
                torn.line,
                f"torn last line ({len(torn.data)} bytes): {torn.reason}; recover cuts it "
                "into quarantine",
            )
        )
    return report


def check_heads(report: SessionVerify, checked: Checked, recorded: list[Recorded]) -> None:
    """Compare the log with what the snapshot and the catalog recorded (adds problems).

    A view that recorded a later seq than the log holds means whole lines are gone: the log is
    reported truncated. A view whose hash at its seq differs means the log was rewritten.
    """
    header = checked.header
    if header is None or (checked.decoded is not None and checked.decoded.bad is not None):
        return
    base = header.seq
    for rec in recorded:
        if rec.health == "corrupt":
            report.problems.append(
                Finding(
                    report.path, 0, f"the snapshot is corrupt ({rec.reason}); recover rebuilds it"
                )
            )
            continue
        if rec.seq < base:
            continue  # a point in an earlier segment: not this file's to check
        if rec.seq > report.seq:
            report.truncated = True
            report.problems.append(
                Finding(
                    report.path,
                    0,
                    f"truncated: the {rec.view} records seq {rec.seq}, but the log ends at seq "
                    f"{report.seq}; whole lines are missing",
                )
            )
            continue
        if rec.head is None:
            if rec.health == "stale":
                report.problems.append(
                    Finding(
                        report.path,
                        rec.seq - base + 1,
                        f"the snapshot at seq {rec.seq} disagrees with the log ({rec.reason})",
                    )
                )
            continue
        at = header.h if rec.seq == base else checked.events[rec.seq - base - 1].h
        links = checked.decoded.links if checked.decoded is not None else {}
        if at != rec.head and links.get(rec.seq) != rec.head:  # a segment header is a head too
            report.problems.append(
                Finding(
                    report.path,
                    rec.seq - base + 1,
                    f"the {rec.view} records head {rec.head[:12]}... at seq {rec.seq}, but the "
                    f"log has {at[:12]}... there: the log was rewritten",
                )
            )


def verify_session(
    store: BaseStore,
    key: str,
    *,
    hash_key: bytes | str | None = None,
    views: Views | None = None,
) -> SessionVerify:
    """Verify one session of ``store`` (raises :class:`SessionNotFoundError` if absent)."""
    secret = store.hash_key if hash_key is None else normalize_key(hash_key)
    path = where(store, key)
    try:
        data = store.read_bytes(key)
    except CorruptLogError as exc:  # a log in segments, one of them missing or not whole
        report = SessionVerify(key=key, path=path)
        report.problems.append(Finding(exc.path, exc.line, exc.reason))
        return report
    except UnsafePathError as exc:
        if os.path.abspath(exc.path) == os.path.abspath(path):
            raise  # the log's own path: refused, as by every entry point
        # one of its closed segments replaced by a symlink, a FIFO, a directory
        report = SessionVerify(key=key, path=path)
        report.problems.append(Finding(exc.path, 1, f"refused: {exc.reason}"))
        return report
    checked = check_data(data, key=key, path=path, hash_key=secret)
    check_heads(checked.report, checked, (views or Views(store)).recorded(key, full=False))
    if checked.header is not None and checked.header.fork_of is not None:
        check_fork(store, checked.report, checked.header, secret)
    return checked.report


def check_fork(store: BaseStore, report: SessionVerify, header: Header, secret: bytes) -> None:
    """Check that a fork's source (when it exists) holds the recorded hash at the fork's seq."""
    source = header.fork_of
    assert source is not None
    try:
        data = store.read_bytes(source)
    except SessionNotFoundError:
        return  # the source is gone: nothing to check against (not a problem of the fork)
    got = check_data(data, key=source, path=where(store, source), hash_key=secret)
    src_header, seq = got.header, header.fork_seq
    what = f"forked from {source!r} at seq {seq}"
    if src_header is None:
        report.problems.append(Finding(report.path, 1, f"{what}: the source is not a sound log"))
        return
    base = src_header.seq
    if seq < base:
        return  # the fork point lies in an earlier segment of the source
    if seq > got.report.seq:
        sound = "is damaged before" if got.report.problems else "ends before"
        report.problems.append(Finding(report.path, 1, f"{what}: the source {sound} that seq"))
        return
    at = src_header.h if seq == base else got.events[seq - base - 1].h
    if at != header.fork_h:
        report.problems.append(
            Finding(
                report.path,
                1,
                f"{what}: the fork records hash {header.fork_h[:12]}..., the source has "
                f"{at[:12]}... there: the source was rewritten",
            )
        )


def verify(
    store: BaseStore, key: str | None = None, *, hash_key: bytes | str | None = None
) -> VerifyReport:
    """Verify one session (``key``) or every session of ``store``; change nothing.

    ``hash_key`` checks the chain with that secret instead of the store's own.

    Raises:
        SessionNotFoundError: ``key`` names no session.
        NotALogError: the store's directory is gone or is not a store.
    """
    started = time.perf_counter()
    report = VerifyReport()
    keys = [key] if key is not None else store.keys()
    views = Views(store)
    for k in keys:
        try:
            report.sessions.append(verify_session(store, k, hash_key=hash_key, views=views))
        except SessionNotFoundError:
            if key is not None:
                raise
            # Deleted while we were verifying the others: not a problem of the store.
    if key is None and isinstance(store, FileStore):
        report.store_problems.extend(_stray_logs(store, keys))
        report.store_problems.extend(
            Finding(str(path), 1, f"{why}; left untouched") for path, why in store.stray_segments()
        )
    report.seconds = time.perf_counter() - started
    return report


def _stray_logs(store: FileStore, keys: list[str]) -> list[Finding]:
    """Log-named files that are no session's own file (a copy, a foreign file): never opened."""
    own = {store.path_for(k).name for k in keys}
    return [
        Finding(
            str(store.root / name),
            1,
            "not the log file of any session key of this store (a copy or a foreign file); "
            "left untouched",
        )
        for name in sorted(catalog_source(store).log_names())
        if name not in own
    ]

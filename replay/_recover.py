"""Recovery after a crash: what an agent runs at start-up, before it opens any session.

For every session: a torn last line (a crash mid-append) is cut into quarantine under the
writer lock, the chain and events are checked, a stale, missing or corrupt snapshot is rebuilt,
and finally the catalog is rebuilt. Corruption in the middle of a log is reported, never
repaired here (that is :func:`replay.repair`, run on purpose).

Invariants:
- A session whose writer lock is held by a live process is never touched: by default recover
  refuses before changing anything (:class:`RecoverRefusedError`); with ``skip_locked`` it
  reports those sessions and recovers the rest.
- Nothing is deleted: every byte cut goes to the session's quarantine.
- Running it twice changes nothing the second time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable

from sessionledger.eventlog import (
    BaseStore,
    EventLogError,
    FileStore,
    LockedError,
    SessionNotFoundError,
)

from ._errors import RecoverRefusedError
from ._report import Finding, RecoverReport, SessionRecover
from ._verify import check_data, check_heads
from ._views import Views, rebuild_catalog, rebuild_snapshot, where

_RETRIES = 3


def recover(
    store: BaseStore, *, keys: Iterable[str] | None = None, skip_locked: bool = False
) -> RecoverReport:
    """Cut torn tails, check every log, rebuild stale snapshots and the catalog, and remove
    what crashed processes left (view temporaries; a trash move or restore half done).

    Args:
        keys: only these sessions (default: all); the catalog is rebuilt either way.
        skip_locked: report sessions a live writer holds instead of refusing to run.

    Raises:
        RecoverRefusedError: a live process holds a session's writer lock (nothing changed).
        SessionNotFoundError: a key in ``keys`` names no session.
    """
    started = time.perf_counter()
    names = store.keys() if keys is None else list(keys)
    for key in names if keys is not None else ():
        if not store.exists(key):
            raise SessionNotFoundError(key)
    locked = [k for k in names if store.writer_lock_held(k)]
    if locked and not skip_locked:
        raise RecoverRefusedError(locked, [where(store, k) for k in locked])
    held = set(locked)
    views = Views(store)
    report = RecoverReport()
    for key in names:
        result = SessionRecover(key=key, path=where(store, key))
        if key in held:
            _locked(result)
        else:
            try:
                _recover_one(store, key, result, views)
            except SessionNotFoundError:
                continue  # deleted meanwhile
        report.sessions.append(result)
    if isinstance(store, FileStore):
        report.leftovers = store.clean_leftovers()
    report.catalog_rebuilt = rebuild_catalog(store)
    report.seconds = time.perf_counter() - started
    return report


def _locked(result: SessionRecover) -> None:
    result.locked = True
    result.problems.append(
        Finding(result.path, 0, "a live writer holds this session's lock; not recovered")
    )


def _recover_one(store: BaseStore, key: str, result: SessionRecover, views: Views) -> None:
    for _ in range(_RETRIES):
        data = store.read_bytes(key)
        checked = check_data(data, key=key, path=result.path, hash_key=store.hash_key)
        check = checked.report
        decoded = checked.decoded
        if decoded is not None and decoded.header is None and _torn_header(data):
            if not _redo_header(store, key, result, len(data)):
                return
            continue
        torn = decoded.torn if decoded is not None else None
        if (
            torn is not None
            and decoded is not None
            and decoded.bad is None
            and decoded.header is not None
        ):
            try:
                cut = store.cut(
                    key,
                    decoded.valid_length,
                    reason=f"recover: {torn.reason}",
                    expect_length=len(data),
                )
            except LockedError:
                _locked(result)
                return
            if cut is None:
                continue  # the log changed under us: read it again
            result.tail_cut += cut.bytes
            result.quarantine = cut.quarantine
            continue  # read the cut log again to check what is left
        recorded = views.recorded(key)
        check_heads(check, checked, recorded)
        # A stale or corrupt snapshot is the view's fault, not the log's: rebuilt, not reported.
        result.problems.extend(p for p in check.problems if not p.what.startswith("the snapshot"))
        if checked.header is None or (decoded is not None and decoded.bad is not None):
            return  # corruption in the middle is reported, never repaired implicitly
        if any(r.view == "snapshot" and r.health != "valid" for r in recorded) or check.truncated:
            result.snapshot_rebuilt = rebuild_snapshot(store, key)
        with contextlib.suppress(EventLogError):  # no keys here: nothing this run can finish
            store.finish_erasures(key)  # keys an erase or redact cut short by a crash left
        return
    result.problems.append(Finding(result.path, 0, "the log kept changing while recovering it"))


def _torn_header(data: bytes) -> bool:
    """A crash while a new session's header was written: one unfinished header line.

    Cut anywhere, even inside its first bytes or before any byte (an empty file: the crash came
    between creating the file and writing the header), the same rule as opening a session.
    """
    start = b'{"type":"header"'
    return b"\n" not in data and (data.startswith(start) or start.startswith(data))


def _redo_header(store: BaseStore, key: str, result: SessionRecover, size: int) -> bool:
    # Opening cuts the torn header into quarantine and writes a fresh one (the writer's rule).
    try:
        writer = store.open(key)
    except LockedError:
        _locked(result)
        return False
    report = store.open_report(key)
    writer.close()
    if report is not None and report.torn is not None:
        result.tail_cut += size
        result.quarantine = report.quarantine
    return True

"""Snapshots of folded sessions, as projections: check, bring up to date, rebuild.

The format and its checks live in ``eventlog`` (stores use snapshots when opening a session);
these are the public entry points. A snapshot never wins over the log: one whose seq or hash
disagrees with the log is reported ``stale`` (or ``corrupt`` when it fails its own digest) and
is ignored when opening.
"""

from __future__ import annotations

from sessionledger.eventlog import BaseStore, SnapshotStatus


def snapshot_status(store: BaseStore, key: str) -> SnapshotStatus:
    """Whether ``key``'s snapshot is missing, valid (and how far behind), stale or corrupt."""
    return store.snapshot_status(key)


def write_snapshot(store: BaseStore, key: str) -> SnapshotStatus:
    """Bring ``key``'s snapshot up to the end of its log (extending a valid one)."""
    return store.write_snapshot(key)


def rebuild_snapshot(store: BaseStore, key: str) -> SnapshotStatus:
    """Replace ``key``'s snapshot by a fold of its whole log."""
    return store.write_snapshot(key, rebuild=True)

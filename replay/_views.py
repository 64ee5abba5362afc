"""The derived views replay checks and rebuilds: snapshots and the session catalog.

Both are projections (rebuildable from the logs, never authoritative). This module is the one
place replay talks to them, so verify and recover read the same recorded points. The catalog is
read as stored (never refreshed first: a refresh would re-read a shortened log and erase the
evidence that whole lines went missing).
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionledger import projections
from sessionledger.eventlog import BaseStore, EventLogError, backend


def where(store: BaseStore, key: str) -> str:
    """Where ``key``'s log lives, for messages (a file path for the file store)."""
    return backend.log_location(store, key)


@dataclass(frozen=True, slots=True)
class Recorded:
    """A point of a session's log that a view recorded.

    ``head`` is the chain hash at ``seq`` when the view keeps it (the catalog); the snapshot is
    checked against the log by the store, which says ``health`` and ``reason``.
    """

    view: str
    seq: int
    head: str | None = None
    health: str = "valid"
    reason: str = ""


def peek_snapshot(store: BaseStore, key: str) -> Recorded | None:
    """The seq and head a stored snapshot records, read without decoding its state.

    For verify: cheap, and only compared with the log (a damaged snapshot can at worst raise a
    false alarm there; recover checks digests and rebuilds). None when there is no snapshot, or
    it cannot be read this way (the caller then asks the store for the full status).
    """
    blob = store.snapshot_bytes(key)
    if blob is None:
        return Recorded("snapshot", -1, None, "missing")
    anchor = backend.peek_snapshot(blob, key)
    if anchor is None:
        return None
    return Recorded("snapshot", *anchor)


class Views:
    """What the views of one store recorded, read once for a whole verify or recover run."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store
        try:
            self.catalog = projections.catalog_heads(store)
        except (EventLogError, OSError, ValueError):
            self.catalog = {}

    def recorded(self, key: str, *, full: bool = True) -> list[Recorded]:
        """The points the snapshot and the catalog recorded for ``key``.

        ``full`` checks the snapshot's digest and anchor through the store (recover);
        otherwise only its recorded seq and head are read (verify compares them itself).
        """
        out: list[Recorded] = []
        peeked = None if full else peek_snapshot(self.store, key)
        if peeked is not None:
            if peeked.health != "missing":
                out.append(peeked)
        else:
            st = projections.snapshot_status(self.store, key)
            if st.health != "missing" or st.reason:  # a reason: one is there, but not read
                out.append(Recorded("snapshot", st.seq, None, st.health, st.reason))
        row = self.catalog.get(key)
        if row is not None:
            out.append(Recorded("catalog", row[0], row[1]))
        return out


def rebuild_snapshot(store: BaseStore, key: str) -> bool:
    """Rebuild ``key``'s snapshot from its whole log; True when one was written."""
    return projections.rebuild_snapshot(store, key).written


def rebuild_catalog(store: BaseStore) -> bool:
    """Rebuild the session catalog from the logs."""
    projections.rebuild_catalog(store)
    return True


def refresh_catalog(store: BaseStore) -> bool:
    """Bring the catalog up to date (a shortened or replaced log's row is re-read whole)."""
    projections.catalog_rows(store)
    return True

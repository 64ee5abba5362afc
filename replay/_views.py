"""The derived views replay checks and rebuilds: snapshots and the session catalog.

Both are projections (rebuildable from the logs, never authoritative). This module is the one
place replay talks to them, so verify and recover read the same recorded heads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import projections
from eventlog import BaseStore


def where(store: BaseStore, key: str) -> str:
    """Where ``key``'s log lives, for messages (a file path for the file store)."""
    describe: Callable[[str], str] | None = getattr(store, "_describe", None)
    return describe(key) if describe is not None else key


def _optional(name: str) -> Callable[..., Any] | None:
    func: Callable[..., Any] | None = getattr(projections, name, None)
    return func


def recorded_heads(store: BaseStore, key: str) -> list[tuple[str, int, str]]:
    """(view, seq, head) that the snapshot and the catalog record for ``key``'s log."""
    out: list[tuple[str, int, str]] = []
    status = _optional("snapshot_status")
    if status is not None:
        st = status(store, key)
        seq = getattr(st, "seq", None)
        head = getattr(st, "head", None)
        if isinstance(seq, int) and isinstance(head, str) and head:
            out.append(("snapshot", seq, head))
    row = _optional("catalog_head")
    if row is not None:
        got = row(store, key)
        if got is not None:
            out.append(("catalog", int(got[0]), str(got[1])))
    return out


def snapshot_stale(store: BaseStore, key: str) -> bool:
    """Whether ``key``'s snapshot is missing, stale or corrupt (False when there are none)."""
    status = _optional("snapshot_status")
    if status is None:
        return False
    st = status(store, key)
    return not bool(getattr(st, "ok", True))


def rebuild_snapshot(store: BaseStore, key: str) -> bool:
    """Rebuild ``key``'s snapshot from its log; False when this store keeps none."""
    rebuild = _optional("rebuild_snapshot")
    if rebuild is None:
        return False
    rebuild(store, key)
    return True


def rebuild_catalog(store: BaseStore) -> bool:
    """Rebuild the session catalog from the logs; False when there is none."""
    rebuild = _optional("rebuild_catalog")
    if rebuild is None:
        return False
    rebuild(store)
    return True

"""What every soak scenario checks after the fact, and how it says that a claim failed.

A scenario never asserts with ``assert`` (which ``-O`` would drop): it raises
:class:`ClaimFailed` naming the claim, the session and what was found.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import msgspec

from sessionledger import replay
from sessionledger.eventlog import BaseStore, FileStore


class ClaimFailed(AssertionError):
    """A guarantee did not hold; the message says which, where and what was seen."""


def claim(ok: bool, what: str) -> None:
    """Raise :class:`ClaimFailed` with ``what`` unless ``ok``."""
    if not ok:
        raise ClaimFailed(what)


def quarantine_records(store: FileStore, key: str) -> list[bytes]:
    """The bytes each quarantine record of ``key`` holds, oldest first."""
    path = Path(store.quarantine_path(key))
    if not path.exists():
        return []
    out: list[bytes] = []
    for line in path.read_bytes().splitlines():
        record: dict[str, Any] = msgspec.json.decode(line)
        text = record.get("text")
        out.append(text.encode("utf-8") if text is not None else base64.b64decode(record["base64"]))
    return out


def check_acknowledged(store: BaseStore, key: str, acked: dict[str, int]) -> int:
    """Every acknowledged ``id -> seq`` is in ``key``'s log, at that seq; return the last seq.

    Also checks seqs are contiguous and no event id appears twice.
    """
    loaded = store.load(key, snapshot=False)
    seqs = [e.seq for e in loaded.events]
    first = loaded.header.seq + 1
    claim(seqs == list(range(first, first + len(seqs))), f"{key}: seqs are not contiguous")
    ids = [e.id for e in loaded.events]
    claim(len(set(ids)) == len(ids), f"{key}: an event id appears twice")
    where = {e.id: e.seq for e in loaded.events}
    for event_id, seq in acked.items():
        got = where.get(event_id)
        claim(
            got == seq,
            f"{key}: acknowledged event {event_id} (seq {seq}) "
            + ("is lost" if got is None else f"is at seq {got}"),
        )
    return loaded.state.seq


def check_verifies(store: BaseStore, key: str) -> None:
    """``replay.verify`` finds nothing wrong with ``key``."""
    report = replay.verify(store, key)
    claim(report.ok, f"{key}: verify failed: {[str(p) for p in report.problems][:3]}")

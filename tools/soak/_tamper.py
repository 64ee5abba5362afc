"""Tampering: every small edit of a stored log is caught by ``replay.verify``.

On a file store whose session has a snapshot at its last event, the harness applies, one at a
time (restoring the log in between): every single-byte change, every line deletion, every swap
of two lines, and every truncation by whole lines; each must make ``verify`` report a problem.
A cut at a line boundary still chains, so truncation is caught only through the head the
snapshot recorded. With a secret hash key, a log rewritten consistently by someone without the
key (the chain recomputed unkeyed, or with a wrong key) fails verification at its first line.
Without a key, such a rewrite is caught only where it changes a line the snapshot vouches for.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from sessionledger import projections, replay
from sessionledger.eventlog import FileStore

from ._checks import claim
from ._fuzz import rechain
from ._workload import one_event

KEY = "tamper:1"


@dataclass(slots=True)
class TamperFigures:
    """How many tampered logs of each kind verify saw (every one must be caught)."""

    checked: dict[str, int] = field(default_factory=dict)
    missed: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        """Every tampered log checked."""
        return sum(self.checked.values())


def build(root: Path, *, events: int, seed: int, hash_key: str | None) -> FileStore:
    """A store holding session :data:`KEY` with ``events`` events and a snapshot at the end."""
    store = FileStore(root, durability="none", hash_key=hash_key)
    rng = random.Random(seed)
    with store.session(KEY, metadata={"who": "tamper"}) as writer:
        for n in range(events):
            one_event(writer, rng, f"t{n}", big=0)
    projections.write_snapshot(store, KEY)
    claim(replay.verify(store, KEY).ok, "the untouched sample does not verify")
    return store


def _caught(store: FileStore, path: Path, data: bytes, kind: str, figures: TamperFigures) -> None:
    path.write_bytes(data)
    report = replay.verify_session(store, KEY)
    figures.checked[kind] = figures.checked.get(kind, 0) + 1
    claim(not report.ok, f"{kind}: a tampered log verified ({len(data)} bytes)")


def run_tamper(
    root: Path, *, events: int = 12, seed: int = 0, hash_key: str | None = None, byte_step: int = 1
) -> TamperFigures:
    """Every tampering of a sample log (every ``byte_step``-th byte); raise ClaimFailed on a miss."""
    started = time.perf_counter()
    figures = TamperFigures()
    store = build(root, events=events, seed=seed, hash_key=hash_key)
    path = store.path_for(KEY)
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    rng = random.Random(seed)
    try:
        for i in range(0, len(original), byte_step):
            new = original[i] ^ (1 << rng.randrange(8))
            _caught(store, path, original[:i] + bytes([new]) + original[i + 1 :], "byte", figures)
        for i in range(len(lines)):
            _caught(store, path, b"".join(lines[:i] + lines[i + 1 :]), "delete line", figures)
            for j in range(i + 1, len(lines)):
                swapped = list(lines)
                swapped[i], swapped[j] = swapped[j], swapped[i]
                _caught(store, path, b"".join(swapped), "swap lines", figures)
        for k in range(len(lines)):
            _caught(store, path, b"".join(lines[:k]), "truncate", figures)
        # A consistent rewrite: one message's text changed, every hash recomputed.
        target = next(i for i, line in enumerate(lines) if b'"content":"' in line)
        edited = list(lines)
        edited[target] = edited[target].replace(b'"content":"', b'"content":"FORGED ', 1)
        forged = b"".join(edited)
        if hash_key is not None:
            _caught(store, path, rechain(forged), "rewrite without the key", figures)
            _caught(
                store, path, rechain(forged, b"a wrong key"), "rewrite with a wrong key", figures
            )
        else:
            _caught(store, path, rechain(forged), "rewrite before the snapshot", figures)
    finally:
        path.write_bytes(original)
        store.close()
    figures.seconds = time.perf_counter() - started
    return figures

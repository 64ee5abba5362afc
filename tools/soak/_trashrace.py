"""Trash under attack: restore and cleanup racing across processes, kills, planted entries.

Claims checked after every round:

- nothing acknowledged is lost or duplicated: every conversation a worker acknowledged is, after
  the round, in exactly one place (a live log or one trash entry), once;
- a restore that loses the race fails with ``InvalidEventError`` (or finds its entry already
  gone); no worker sees an exception that is not the library's own;
- a worker killed with SIGKILL mid-operation leaves nothing the next lock holder cannot settle:
  no ghost entry is listed, no hard-linked log is counted twice;
- a planted entry (names with ``..``, absolute paths, another key's file, a symlink) is never
  listed, never restored, and nothing outside the store changes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from sessionledger.eventlog import (
    EventLogError,
    FileStore,
    InvalidEventError,
    MessageAppended,
    SessionNotFoundError,
    decode_log,
)

from ._checks import claim

KEYS = ("a", "b", "c")


@dataclass(slots=True)
class TrashFigures:
    """What the trash race did."""

    rounds: int = 0
    restores: int = 0
    restores_refused: int = 0
    cleanups: int = 0
    sessions_trashed: int = 0
    created: int = 0
    kills: int = 0
    conversations_checked: int = 0
    planted: int = 0
    planted_refused: int = 0
    seconds: float = 0.0


def _worker(root: str, seed: int, steps: int, out: Any) -> None:
    rng = random.Random(seed)
    store = FileStore(root, durability="none", lock_timeout=2.0)
    counts = {"restores": 0, "refused": 0, "cleanups": 0, "trashed": 0, "created": 0}
    for step in range(steps):
        roll = rng.random()
        try:
            if roll < 0.45:
                entries = store.trash()
                if entries:
                    store.restore(rng.choice(entries).id)
                    counts["restores"] += 1
            elif roll < 0.7:
                counts["trashed"] += len(store.cleanup(0).trashed)
                counts["cleanups"] += 1
            else:
                key = rng.choice(KEYS)
                token = f"w{seed}-{step}"
                writer = store.session(key)
                writer.append_message("user", token)
                writer.close()
                out.put(("ack", token))
                counts["created"] += 1
        except InvalidEventError:
            counts["refused"] += 1
        except SessionNotFoundError:
            counts["refused"] += 1  # the entry was restored or purged by another worker
        except EventLogError as exc:
            if "locked" not in str(exc) and "lock trash" not in str(exc):
                out.put(("error", f"{type(exc).__name__}: {exc}"))
        except Exception as exc:  # the claim: only the library's own errors
            out.put(("error", f"{type(exc).__name__}: {exc}"))
    store.close()
    out.put(("counts", counts))


def _tokens_in(data: bytes) -> list[str]:
    decoded = decode_log(data)
    return [str(e.message.get("content")) for e in decoded.events if isinstance(e, MessageAppended)]


def _census(root: Path) -> list[str]:
    """Every conversation token in live logs and trash entries (hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    tokens: list[str] = []
    paths = list(root.glob("*.jsonl")) + list((root / ".trash").glob("*/*.jsonl"))
    for path in paths:
        st = path.stat()
        if (st.st_ino, st.st_dev) in seen:
            continue
        seen.add((st.st_ino, st.st_dev))
        tokens.extend(_tokens_in(path.read_bytes()))
    return tokens


def _race_round(root: Path, seed: int, figures: TrashFigures, *, kill: bool) -> None:
    store = FileStore(root, durability="none")
    acked: set[str] = set()
    for i, key in enumerate(KEYS * 2):  # two trash entries for each key
        token = f"seed{seed}-{i}"
        with store.session(key) as w:
            w.append_message("user", token)
        acked.add(token)
        store.cleanup(0)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(str(root), seed * 10 + n, 12, out)) for n in range(4)
    ]
    for p in procs:
        p.start()
    if kill:
        time.sleep(random.Random(seed).uniform(0.0, 0.05))
        victim = procs[0]
        if victim.pid is not None:
            try:
                os.kill(victim.pid, signal.SIGKILL)
                figures.kills += 1
            except ProcessLookupError:
                pass  # it had already finished
    for p in procs:
        p.join(60)
        claim(not p.is_alive(), f"trash race seed {seed}: a worker hangs")
    while not out.empty():
        kind, value = out.get()
        if kind == "ack":
            acked.add(value)
        elif kind == "error":
            claim(False, f"trash race seed {seed}: a worker saw {value}")
        else:
            figures.restores += value["restores"]
            figures.restores_refused += value["refused"]
            figures.cleanups += value["cleanups"]
            figures.sessions_trashed += value["trashed"]
            figures.created += value["created"]
    # The next lock holder settles what a kill left; then count every conversation.
    after = FileStore(root, durability="none")
    after.purge_trash(now=None)
    listed = after.trash()
    for entry in listed:
        claim(
            (root / ".trash" / entry.id / after.path_for(entry.key).name).exists(),
            f"trash race seed {seed}: entry {entry.id} is listed without its log",
        )
    tokens = _census(root)
    duplicated = sorted({t for t in tokens if tokens.count(t) > 1})
    claim(not duplicated, f"trash race seed {seed}: conversations twice: {duplicated}")
    lost = sorted(acked - set(tokens))
    claim(not lost, f"trash race seed {seed}: acknowledged conversations lost: {lost}")
    figures.conversations_checked += len(acked)


BAD_FILES: tuple[list[str], ...] = (
    ["../victim.jsonl"],
    ["/tmp/x.jsonl"],
    ["x.jsonl", "../../outside.jsonl"],
    ["victim.jsonl"],
    ["x.jsonl", "x.jsonl/../../y"],
    ["."],
)


def _planted_round(root: Path, seed: int, figures: TrashFigures) -> None:
    rng = random.Random(seed)
    outside = root.parent / f"outside-{seed}"
    outside.mkdir()
    (outside / "keep").write_text("untouched")
    store = FileStore(root / "store", durability="none")
    with store.session("victim") as w:
        w.append_message("user", "the victim's own")
    victim = store.read_bytes("victim")
    entry_id = f"20260101T000000000000-{seed:08x}"
    entry = root / "store" / ".trash" / entry_id
    entry.mkdir(parents=True)
    files = rng.choice(BAD_FILES)
    record = {"key": "x", "deleted_at": "2020-01-01T00:00:00Z", "reason": "t", "files": files}
    (entry / "entry.json").write_bytes(msgspec.json.encode(record))
    if rng.random() < 0.3:
        (entry / "x.jsonl").symlink_to(outside / "keep")
    else:
        (entry / "x.jsonl").write_bytes(b"planted\n")
    figures.planted += 1
    claim(all(e.id != entry_id for e in store.trash()), f"planted entry {files} is listed")
    try:
        store.restore(entry_id)
        claim(False, f"planted entry {files} was restored")
    except EventLogError:
        figures.planted_refused += 1
    store.cleanup(10**9)  # takes the trash lock (and settles) without trashing anything
    store.purge_trash()
    claim(store.read_bytes("victim") == victim, f"planted entry {files}: the victim changed")
    claim(
        sorted(p.name for p in outside.iterdir()) == ["keep"]
        and (outside / "keep").read_text() == "untouched",
        f"planted entry {files}: something outside the store changed",
    )


def run_trash_race(root: Path, rounds: int, *, seed: int = 0) -> TrashFigures:
    """``rounds`` races of four processes (a third with a SIGKILL), and as many planted entries."""
    logging.getLogger("sessionledger").setLevel(logging.ERROR)  # bad entries are expected
    started = time.perf_counter()
    figures = TrashFigures()
    for n in range(rounds):
        _race_round(root / f"race-{n}", seed + n, figures, kill=n % 3 == 2)
        _planted_round(root / f"planted-{n}", seed + n, figures)
        figures.rounds += 1
    figures.seconds = round(time.perf_counter() - started, 2)
    return figures

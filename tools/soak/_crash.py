"""Crash harness: fork a writer, SIGKILL it at a random moment, recover, check, continue.

The harness process imports everything first and then forks one child per kill, so a kill costs
a fork and a few milliseconds of writing, not an interpreter start. The child appends realistic
events (see ``_workload``) and reports each one on a pipe only after the append call returned:
those are the acknowledged events. The parent kills it with SIGKILL after a random delay (some
before the child has even opened its session), then, with fresh store objects:

1. reads the log as the crash left it: a bad line in the middle would be corruption (never
   allowed); a torn last line is noted;
2. runs ``replay.recover``: it must report nothing wrong, and a torn tail's bytes must be the
   last record of the session's quarantine;
3. checks every acknowledged event is in the log, at the seq it was acknowledged with, with
   contiguous seqs and no event twice; at most one unacknowledged event follows them (the child
   writes from one thread, so at most one line can be written but not yet reported);
4. ``replay.verify`` passes; a second writer opens the session, appends, and closes.

A SIGKILL of a process does not lose the page cache, so every mode (even ``"none"``) must keep
every acknowledged event here. What a power loss does is not tested by killing processes.
"""

from __future__ import annotations

import os
import random
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sessionledger import replay
from sessionledger.eventlog import DURABILITIES, FileStore, decode_log

from ._checks import check_acknowledged, check_verifies, claim, quarantine_records
from ._load import fork_child
from ._workload import one_event

#: Rounds written to one key before the harness starts a new session (keeps logs small).
ROUNDS_PER_KEY = 10


@dataclass(slots=True)
class CrashFigures:
    """What the crash rounds did (``lost`` is the claim: always 0)."""

    durability: str
    kills: int = 0
    acknowledged: int = 0
    unacknowledged_kept: int = 0
    torn_tails: int = 0
    torn_bytes: int = 0
    killed_before_first_ack: int = 0
    lost: int = 0
    seconds: float = 0.0


def _child(root: str, durability: str, hash_key: str | None, key: str, tag: str, wfd: int) -> None:
    """Runs in the forked child: append until killed, reporting each acknowledged event."""
    store = FileStore(root, durability=durability, hash_key=hash_key)
    writer = store.session(key, metadata={"harness": "crash"})
    rng = random.Random(tag)
    i = 0
    while True:
        event_id = f"{tag}-{i}"
        seq = one_event(writer, rng, event_id, big=0.01)
        os.write(wfd, f"{seq} {event_id}\n".encode())
        i += 1


def _read_until(rfd: int, deadline: float, buf: bytearray, acks: int = 0) -> bool:
    """Collect pipe bytes until ``deadline`` (or, with ``acks``, until that many arrived, then
    stop waiting); False when the child closed the pipe (it died)."""
    while True:
        if acks and buf.count(b"\n") >= acks:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        poller = select.poll()  # not select(): descriptors past 1024 in a long soak
        poller.register(rfd, select.POLLIN)
        if poller.poll(left * 1000):
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                return False
            buf += chunk


def _drain(rfd: int, buf: bytearray) -> None:
    while chunk := os.read(rfd, 1 << 16):
        buf += chunk
    os.close(rfd)


def _moment(rng: random.Random) -> tuple[float, int, float]:
    """When to kill: (seconds to wait, acknowledgements to wait for first, then extra seconds).

    A third of the kills come at a random time from the fork (often before the session is
    open); the rest after a random number of acknowledged appends plus a random delay, so the
    kill lands anywhere in the next append: encoding, the write, the fsync, the report.
    """
    if rng.random() < 0.3:
        return rng.choice([0.0, rng.uniform(0, 0.005), rng.uniform(0, 0.03)]), 0, 0.0
    return 5.0, rng.randrange(1, 8), rng.choice([0.0, rng.uniform(0, 0.001), rng.uniform(0, 0.01)])


def crash_round(
    root: Path,
    durability: str,
    *,
    key: str,
    tag: str,
    rng: random.Random,
    figures: CrashFigures,
    before: int = 0,
    hash_key: str | None = None,
) -> int:
    """One fork, random delay, SIGKILL, recover and check; return the log's seq after it.

    ``before`` is the session's seq before this round (0 for a new session).
    """
    pid, rfd = fork_child(_child, str(root), durability, hash_key, key, tag)
    buf = bytearray()
    wait, acks, extra = _moment(rng)
    alive = _read_until(rfd, time.monotonic() + wait, buf, acks)
    if alive and extra:
        alive = _read_until(rfd, time.monotonic() + extra, buf)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    _drain(rfd, buf)
    claim(
        alive or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL),
        f"{key}: the child writer died by itself (status {status}) before the kill",
    )
    acked: dict[str, int] = {}
    for line in bytes(buf).splitlines():
        seq, event_id = line.decode().split(" ")
        acked[event_id] = int(seq)
    figures.kills += 1
    figures.acknowledged += len(acked)
    if not acked:
        figures.killed_before_first_ack += 1

    store = FileStore(root, durability="none", hash_key=hash_key)
    if not store.exists(key):
        claim(not acked, f"{key}: events were acknowledged but the log does not exist")
        return 0
    decoded = decode_log(store.read_bytes(key), key=store.hash_key)
    claim(decoded.bad is None, f"{key}: a crash left a bad line in the middle: {decoded.bad}")
    held = len(quarantine_records(store, key))
    report = replay.recover(store, keys=[key])
    claim(report.ok, f"{key}: recover found problems: {[str(p) for p in report.problems][:3]}")
    if decoded.torn is not None:
        figures.torn_tails += 1
        figures.torn_bytes += len(decoded.torn.data)
        kept = quarantine_records(store, key)
        claim(
            len(kept) == held + 1 and kept[-1] == decoded.torn.data,
            f"{key}: the torn tail ({len(decoded.torn.data)} bytes) is not in quarantine",
        )
    last = check_acknowledged(store, key, acked)
    newest = max(acked.values(), default=before)
    claim(newest <= last <= newest + 1, f"{key}: seq {last} after {newest} acknowledged")
    figures.unacknowledged_kept += last - newest
    check_verifies(store, key)
    writer = store.session(key)
    claim(writer.seq == last, f"{key}: a second writer sees seq {writer.seq}, not {last}")
    claim(writer.append_message("user", "after the crash") == last + 1, f"{key}: continuing failed")
    writer.close()
    store.close()
    return last + 1


def run_crashes(
    root: Path, durability: str, kills: int, *, seed: int = 0, hash_key: str | None = None
) -> CrashFigures:
    """``kills`` crash rounds under ``durability`` in ``root``; raise ClaimFailed on a violation."""
    claim(durability in DURABILITIES, f"unknown durability {durability!r}")
    figures = CrashFigures(durability)
    rng = random.Random(seed)
    started = time.perf_counter()
    seq = 0
    for n in range(kills):
        if n % ROUNDS_PER_KEY == 0:
            seq = 0
        key = f"crash:{durability}:{seed}:{n // ROUNDS_PER_KEY}"
        seq = crash_round(
            root,
            durability,
            key=key,
            tag=f"{seed}.{n}",
            rng=rng,
            figures=figures,
            before=seq,
            hash_key=hash_key,
        )
    figures.seconds = time.perf_counter() - started
    return figures

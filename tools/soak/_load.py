"""Concurrency under load: processes, threads and async tasks appending at once, one killed.

The harness forks worker processes (sync workers run threads, async workers run anyio tasks on
asyncio). Each appends for a fixed time to its own session (one writer shared by its threads or
tasks) and writes turns on a few shared sessions (a store object per thread or task; each
append takes the log's ``flock`` for that one write, bounded by ``lock_timeout``). Every append
is reported on a pipe after the call returned. Half way through, one worker is SIGKILLed,
possibly mid-append with the lock held; the others must get the lock and carry on.

Afterwards ``replay.recover`` must find nothing wrong, and in every session each acknowledged
event is present exactly once at its acknowledged seq, seqs are contiguous, and verify passes.
"""

from __future__ import annotations

import os
import random
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from sessionledger import replay
from sessionledger.eventlog import AsyncFileStore, FileStore, LockedError

from ._checks import check_acknowledged, check_verifies, claim
from ._workload import content

SHARED = ("shared:0", "shared:1")
LOCK_TIMEOUT = 10.0


@dataclass(slots=True)
class LoadFigures:
    """What the load run did."""

    processes: int = 0
    threads_or_tasks: int = 0
    sessions: int = 0
    acknowledged: int = 0
    shared_turns: int = 0
    killed: int = 0
    events_in_logs: int = 0
    lost: int = 0
    by_session: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _report(wfd: int, key: str, seq: int, event_id: str) -> None:
    os.write(wfd, f"{key} {seq} {event_id}\n".encode())


def _sync_worker(root: str, name: str, threads: int, deadline: float, wfd: int) -> None:
    store = FileStore(root, durability="batch", lock_timeout=LOCK_TIMEOUT)
    own = f"own:{name}"
    writer = store.session(own)

    def work(t: int) -> None:
        rng = random.Random(f"{name}.{t}")
        turns = FileStore(root, durability="batch", lock_timeout=LOCK_TIMEOUT)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            if rng.random() < 0.7:
                event_id = f"{name}.{t}.{n}"
                seq = writer.append_message("user", content(rng, big=0.002), id=event_id)
                _report(wfd, own, seq, event_id)
                continue
            key = rng.choice(SHARED)
            with turns.session(key) as shared:  # waits for the other writers' turns
                _report(wfd, key, -1, "turn")
                for i in range(rng.randrange(1, 6)):
                    event_id = f"{name}.{t}.{n}.{i}"
                    seq = shared.append_message("assistant", content(rng, big=0), id=event_id)
                    _report(wfd, key, seq, event_id)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    writer.close()
    store.close()


def _async_worker(root: str, name: str, tasks: int, deadline: float, wfd: int) -> None:
    async def main() -> None:
        store = AsyncFileStore(root, durability="batch", lock_timeout=LOCK_TIMEOUT)
        own = f"own:{name}"
        writer = await store.session(own)

        async def work(t: int) -> None:
            rng = random.Random(f"{name}.{t}")
            turns = AsyncFileStore(root, durability="batch", lock_timeout=LOCK_TIMEOUT)
            n = 0
            while time.monotonic() < deadline:
                n += 1
                if rng.random() < 0.7:
                    event_id = f"{name}.{t}.{n}"
                    seq = await writer.append_message("user", content(rng, big=0), id=event_id)
                    _report(wfd, own, seq, event_id)
                    continue
                key = rng.choice(SHARED)
                shared = await turns.session(key)
                _report(wfd, key, -1, "turn")
                for i in range(rng.randrange(1, 6)):
                    event_id = f"{name}.{t}.{n}.{i}"
                    seq = await shared.append_message("assistant", content(rng, big=0), id=event_id)
                    _report(wfd, key, seq, event_id)
                await shared.close()
            await turns.close()

        async with anyio.create_task_group() as tg:
            for t in range(tasks):
                tg.start_soon(work, t)
        await store.close()

    anyio.run(main)


def fork_child(target: Callable[..., object], *args: object) -> tuple[int, int]:
    """Run ``target(*args, wfd)`` in a forked child; return its pid and the pipe's read end.

    The child exits 0, 4 on a LockedError, or 3 (with its traceback) on any other error.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        code = 0
        try:
            os.close(rfd)
            target(*args, wfd)
        except LockedError:
            code = 4
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 3
        os._exit(code)
    os.close(wfd)
    return pid, rfd


def run_load(
    root: Path,
    seconds: float,
    *,
    processes: int = 3,
    threads: int = 4,
    seed: int = 0,
    kill: bool = True,
) -> LoadFigures:
    """Run the load for ``seconds``; check every session afterwards (raise ClaimFailed)."""
    figures = LoadFigures(processes=processes, threads_or_tasks=processes * threads)
    started = time.perf_counter()
    FileStore(root).close()
    deadline = time.monotonic() + seconds
    workers: dict[int, tuple[int, str]] = {}
    for p in range(processes):
        name = f"p{seed}-{p}"
        target = _async_worker if p % 2 else _sync_worker
        pid, rfd = fork_child(target, str(root), name, threads, deadline)
        workers[rfd] = (pid, name)
    victim = next(iter(workers.values()))[0] if kill and processes > 1 else None
    kill_at = time.monotonic() + seconds / 2
    buffers: dict[int, bytearray] = {rfd: bytearray() for rfd in workers}
    poller = select.poll()
    for rfd in workers:
        poller.register(rfd, select.POLLIN)
    open_fds = set(workers)
    status_of: dict[int, int] = {}
    try:
        while open_fds:
            if victim is not None and time.monotonic() >= kill_at:
                os.kill(victim, signal.SIGKILL)
                figures.killed += 1
                victim = None
            for rfd, _ in poller.poll(50):
                chunk = os.read(rfd, 1 << 16)
                if chunk:
                    buffers[rfd] += chunk
                else:
                    poller.unregister(rfd)
                    open_fds.discard(rfd)
                    os.close(rfd)
    finally:
        for pid, _ in workers.values():
            if open_fds:  # the harness itself failed: stop the workers before anything else
                os.kill(pid, signal.SIGKILL)
            status_of[pid] = os.waitpid(pid, 0)[1]
    killed_pid = next(iter(workers.values()))[0] if figures.killed else None
    for pid, name in workers.values():
        status = status_of[pid]
        if pid != killed_pid:
            claim(
                os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
                f"worker {name} failed (status {status})",
            )
    acked: dict[str, dict[str, int]] = {}
    for buf in buffers.values():
        for line in bytes(buf).splitlines():
            key, seq, event_id = line.decode().split(" ")
            if event_id == "turn":
                figures.shared_turns += 1
                continue
            acked.setdefault(key, {})[event_id] = int(seq)
    store = FileStore(root, durability="none")
    report = replay.recover(store)
    claim(report.ok, f"recover after the load found: {[str(p) for p in report.problems][:3]}")
    keys = store.keys()
    for key in keys:
        mine = acked.get(key, {})
        last = check_acknowledged(store, key, mine)
        check_verifies(store, key)
        figures.acknowledged += len(mine)
        figures.events_in_logs += last
        figures.by_session[key] = len(mine)
    claim(set(acked) <= set(keys), "a session with acknowledged events is missing")
    figures.sessions = len(keys)
    figures.seconds = time.perf_counter() - started
    return figures

"""Async write benchmarks: ``python -m sessionledger.tools.bench_async [--quick] [--backend trio] [--memory]``.

Prints one line per figure: durable (or written, for ``"none"``) events per second, the
median of ``--runs`` runs, each in a fresh temporary store on the local disk. ``--memory``
appends 1,000,000 events to one session (trimming so the live window stays at 1,000 messages)
and prints RSS and the size of ``state.ids`` as it goes. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial

import anyio

from sessionledger.eventlog import AsyncFileStore

_MESSAGE = "x" * 200


async def _one_session_sequential(root: str, durability: str, count: int) -> float:
    async with AsyncFileStore(root, durability=durability) as store:
        writer = await store.session("bench:seq")
        start = time.perf_counter()
        for _ in range(count):
            await writer.append_message("user", _MESSAGE)
        await writer.flush() if durability != "none" else None
        elapsed = time.perf_counter() - start
    return count / elapsed


async def _concurrent(
    root: str, durability: str, writers: int, per_writer: int, *, sessions: int
) -> float:
    """``writers`` tasks, spread over ``sessions`` sessions, each appending ``per_writer``."""
    async with AsyncFileStore(root, durability=durability) as store:
        handles = [await store.session(f"bench:{i}") for i in range(sessions)]

        async def work(index: int) -> None:
            writer = handles[index % sessions]
            for _ in range(per_writer):
                await writer.append_message("user", _MESSAGE)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(writers):
                tg.start_soon(work, index)
        elapsed = time.perf_counter() - start
    return writers * per_writer / elapsed


def _median(
    runs: int, backend: str, make: Callable[[str], Awaitable[float]]
) -> tuple[float, float, float]:
    rates = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(
            prefix="bench-async-", dir=os.environ.get("BENCH_DIR")
        ) as tmp:

            async def one(tmp: str = tmp) -> float:
                return await make(os.path.join(tmp, "store"))

            rates.append(anyio.run(one, backend=backend))
    return statistics.median(rates), min(rates), max(rates)


def _row(label: str, figures: tuple[float, float, float], floor: float | None) -> None:
    median, low, high = figures
    verdict = "" if floor is None else ("  ok" if median >= floor else f"  BELOW {floor:,.0f}/s")
    print(f"{label:<58} {median:>10,.0f}/s  (min {low:,.0f}, max {high:,.0f}){verdict}")
    sys.stdout.flush()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


async def _memory(root: str, total: int, window: int) -> None:
    async with AsyncFileStore(root, durability="none") as store:
        writer = await store.session("bench:memory")
        start = time.perf_counter()
        print(f"{'events':>10} {'rss MB':>8} {'ids':>10} {'live msgs':>10} {'ev/s':>10}")
        written = 0
        step = total // 10
        while written < total:
            for _ in range(window):
                await writer.append_message("user", _MESSAGE)
            await writer.trim(window, "file_cap")
            written += window + 1
            if written % step < window + 1:
                gc.collect()
                rate = written / (time.perf_counter() - start)
                print(
                    f"{written:>10,} {_rss_mb():>8.1f} {len(writer.state.ids):>10,} "
                    f"{len(writer.state.messages):>10,} {rate:>10,.0f}"
                )
                sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the async benchmarks and print their figures."""
    parser = argparse.ArgumentParser(prog="python -m sessionledger.tools.bench_async")
    parser.add_argument("--quick", action="store_true", help="fewer events, one run each")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="the 1,000,000-event memory run")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    scale = 10 if args.quick else 1
    backend = args.backend
    print(f"async appends on {backend}, {os.cpu_count()} CPUs, 200-byte messages")
    if args.memory:
        with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
            total = 1_000_000 // scale
            anyio.run(_memory, os.path.join(tmp, "store"), total, 1000, backend=backend)
        return 0

    n = 100_000 // scale
    _row(
        "none, 1 task, 1 session",
        _median(runs, backend, lambda root: _one_session_sequential(root, "none", n)),
        50_000,
    )
    _row(
        "none, 50 tasks, 1 session",
        _median(runs, backend, lambda root: _concurrent(root, "none", 50, n // 50, sessions=1)),
        50_000,
    )
    a = 4_000 // scale
    _row(
        "always, 1 task, 1 session",
        _median(runs, backend, lambda root: _one_session_sequential(root, "always", a)),
        2_000,
    )
    _row(
        "always, 8 tasks, 8 sessions",
        _median(runs, backend, lambda root: _concurrent(root, "always", 8, a // 8, sessions=8)),
        2_000,
    )
    _row(
        "batch, 1 task, 1 session (one fsync per append)",
        _median(runs, backend, lambda root: _one_session_sequential(root, "batch", a)),
        None,
    )
    for writers in (8, 16, 32, 64):
        per = max(20, 64_000 // scale // writers)
        _row(
            f"batch, {writers} tasks, 1 session",
            _median(
                runs,
                backend,
                partial(
                    _concurrent, durability="batch", writers=writers, per_writer=per, sessions=1
                ),
            ),
            50_000,
        )
    for writers in (8, 64):
        per = max(20, 16_000 // scale // writers)
        _row(
            f"batch, {writers} tasks, {writers} sessions (one each)",
            _median(
                runs,
                backend,
                partial(
                    _concurrent,
                    durability="batch",
                    writers=writers,
                    per_writer=per,
                    sessions=writers,
                ),
            ),
            50_000,
        )
    per = 64_000 // scale // 64
    _row(
        "batch, 64 tasks, 8 sessions",
        _median(runs, backend, lambda root: _concurrent(root, "batch", 64, per, sessions=8)),
        50_000,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

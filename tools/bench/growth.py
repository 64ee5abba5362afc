"""Growth: what opening, reading, closing and probing a session cost as it grows.

Sessions of 1k, 10k, 100k (and 1M without ``--quick``) messages are generated once and cached
under ``.bench/growth/`` (the same seeded conversation, short tool outputs); every figure is
the median of several runs taken side by side in one process with the OpenAI Agents SDK's
``SQLiteSession`` (``get_items(500)`` on a fresh object, its cold path) and with a raw read of
the last 500 lines of the JSONL file (seek, read, ``json`` decode: the floor for any log).

Figures per size:
- open + ``history(500)``: a fresh store object, ``load`` (snapshot + log tail), then the LLM
  history of at most 500 messages (no token budget);
- writer open: ``store.session(key)`` on a fresh store object, and its memory (tracemalloc,
  bytes per event of the session);
- ``close()``: a writer that appended 300 messages closes (the snapshot policy runs there);
  the session is put back byte for byte afterwards;
- ``exists()``: one call, in microseconds;
- the same open + ``history(500)`` of a copy of the session whose log is in about
  :data:`SEGMENTS` segments (``segment_bytes`` a fraction of the log; up to 100k messages),
  beside the one-file log, both in CPU time, alternating (the index crosses segments);
- a writer that appends 20,000 more messages: the memory it then holds (tracemalloc, MB;
  with the store's ``settle_every`` and with it off, the way writers kept every event they
  appended until ``close()``), and the append time per message (settling on and off,
  alternating).

Run: ``python -m sessionledger.tools.bench.growth [--quick] [--markdown]``; it is also the
``growth`` benchmark of the suite. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._core import Context, Row, benchmark
from ._workload import conversation

if TYPE_CHECKING:
    from sessionledger.eventlog import FileStore

KEY = "bench:growth"
WINDOW = 500
#: Messages a writer appends for the memory and append-time figures.
APPENDED = 20_000
_CHUNK = 10_000
_REPO = Path(__file__).resolve().parents[2]
CACHE = _REPO / ".bench" / "growth"
SIZES_QUICK = (1_000, 10_000, 100_000)
SIZES_FULL = (*SIZES_QUICK, 1_000_000)
#: The issue's goals (ms, except memory in bytes per event and exists in microseconds).
GOAL_OPEN_HISTORY: dict[int, float] = {10_000: 3.0, 100_000: 3.0, 1_000_000: 5.0}
GOAL_WRITER_OPEN: dict[int, float] = {100_000: 5.0}
#: The segmented copy's log is in about this many segments (sizes up to SEGMENTED_MAX).
SEGMENTS = 8
SEGMENTED_MAX = 100_000


def _store(path: Path, **options: Any) -> FileStore:
    """A file store over ``path`` whose logs stay one file (``segment_bytes=0``): restoring a
    session between runs relies on that (with the default, 64 MB, the 100k and 1M logs would
    roll at the first append). Logs in segments are measured apart (:func:`segmented`)."""
    from sessionledger.eventlog import FileStore as Store

    return Store(path, segment_bytes=0, **options)


def _chunks(n: int) -> Any:
    """The ``n``-message conversation, in chunks of 10,000 (each a legal conversation)."""
    done = 0
    seed = 1
    while done < n:
        size = min(_CHUNK, n - done)
        yield conversation(size, seed=seed, big_tools=False)
        done += size
        seed += 1


def _sdk_item(message: dict[str, Any]) -> dict[str, Any]:
    # The Agents SDK stores Responses-API input items; a chat message maps to role + content.
    content = message.get("content")
    return {"role": message["role"], "content": content if isinstance(content, str) else ""}


def ensure_session(n: int, cache: Path = CACHE) -> Path:
    """The cached directory of the ``n``-message session (ours and SQLite), built once."""

    root = cache / f"{n}"
    done = root / ".complete"
    if done.exists():
        # Bring the snapshot to the log's end in this version's format (cheap when it is).
        with _store(root / "log", durability="none") as store:
            store.write_snapshot(KEY)
        return root
    shutil.rmtree(root, ignore_errors=True)
    (root / "log").mkdir(parents=True)
    store = _store(root / "log", durability="none")
    sqlite = _sqlite_session(root)
    loop = asyncio.new_event_loop()
    try:
        for chunk in _chunks(n):
            # A writer per chunk: each close extends the snapshot, so memory stays flat.
            with store.session(KEY) as writer:
                for m in chunk:
                    writer.append_message_dict(m)
            loop.run_until_complete(sqlite.add_items([_sdk_item(m) for m in chunk]))
        store.write_snapshot(KEY)
        store.close()
        sqlite.close()
    finally:
        loop.close()
    done.write_text(str(n))
    return root


def ensure_segmented(n: int, cache: Path = CACHE) -> tuple[Path, int]:
    """The cached directory of the ``n``-message session appended with a ``segment_bytes`` of
    about 1/:data:`SEGMENTS` of the one-file log (so it rolled that many times), built once;
    and that ``segment_bytes``."""
    from sessionledger.eventlog import FileStore as Store

    root = cache / f"{n}-segmented"
    done = root / ".complete"
    if done.exists():
        size = int(done.read_text())
        with Store(root, segment_bytes=size, durability="none") as store:
            store.write_snapshot(KEY)
        return root, size
    flat = ensure_session(n, cache) / "log"
    size = max(1 << 20, _store(flat).path_for(KEY).stat().st_size // SEGMENTS)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    store = Store(root, segment_bytes=size, durability="none")
    for chunk in _chunks(n):
        with store.session(KEY) as writer:
            for m in chunk:
                writer.append_message_dict(m)
    store.write_snapshot(KEY)
    store.close()
    done.write_text(str(size))
    return root, size


def _sqlite_session(root: Path) -> Any:
    from agents.memory import SQLiteSession

    return SQLiteSession(KEY, root / "sqlite.db")


def raw_tail(path: Path, lines: int = WINDOW) -> list[dict[str, Any]]:
    """The last ``lines`` lines of a JSONL file, decoded: seek back until they are all read."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        block = 1 << 16
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
            block *= 2
    tail = data.split(b"\n")[-lines - 1 : -1]
    return [json.loads(line) for line in tail]


@dataclass
class Figures:
    """The medians measured at one size."""

    n: int
    log_mb: float = 0.0
    open_history: float | None = None
    sqlite_get_items: float | None = None
    raw_tail: float | None = None
    writer_open: float | None = None
    close: float | None = None
    exists_us: float | None = None
    bytes_per_event: float | None = None
    appended_mb: float | None = None
    appended_mb_unsettled: float | None = None
    append_us: float | None = None
    append_us_unsettled: float | None = None
    #: The same appends with the writer's close() timed too: settling off leaves the index
    #: extension of every appended event to close(), settling on does it as it goes.
    append_close_us: float | None = None
    append_close_us_unsettled: float | None = None
    #: CPU ms of open + history(500): the log in segments, and in one file (same run).
    open_history_segmented_cpu: float | None = None
    open_history_cpu: float | None = None
    segments: int = 0
    notes: list[str] = field(default_factory=list)


def _median(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class _Restore:
    """Put a session directory back exactly as it was (append-only files cut, others rewritten)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sizes: dict[str, int] = {}
        self.small: dict[str, bytes] = {}
        for entry in os.scandir(root):
            if entry.is_file(follow_symlinks=False):
                size = entry.stat().st_size
                self.sizes[entry.name] = size
                if size <= 8 << 20 and not entry.name.endswith(".jsonl"):
                    self.small[entry.name] = Path(entry.path).read_bytes()

    def __call__(self) -> None:
        for entry in os.scandir(self.root):
            if entry.name not in self.sizes and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
        for name, size in self.sizes.items():
            path = self.root / name
            if name in self.small:
                tmp = path.with_name(name + ".restore")
                tmp.write_bytes(self.small[name])
                os.chmod(tmp, 0o600)
                os.replace(tmp, path)
            elif path.stat().st_size != size:
                os.truncate(path, size)


def measure(n: int, runs: int, *, cache: Path = CACHE) -> Figures:
    """Every figure at ``n`` messages."""
    from sessionledger.projections import history

    root = ensure_session(n, cache)
    logdir = root / "log"
    fig = Figures(n)
    logpath = _store(logdir).path_for(KEY)
    fig.log_mb = logpath.stat().st_size / 1e6
    restore = _Restore(logdir)
    loop = asyncio.new_event_loop()

    def ours_read() -> float:
        def go() -> None:
            store = _store(logdir)
            got = history(store.load(KEY).state, max_messages=WINDOW)
            assert got
            store.close()

        return _timed(go)

    def sqlite_read() -> float:
        def go() -> None:
            session = _sqlite_session(root)
            got = loop.run_until_complete(session.get_items(WINDOW))
            assert len(got) == WINDOW
            session.close()

        return _timed(go)

    def tail_read() -> float:
        return _timed(lambda: raw_tail(logpath))

    def writer_open() -> float:
        store = _store(logdir)
        seconds = _timed(lambda: store.session(KEY))
        store.session(KEY).close()
        store.close()
        restore()
        return seconds

    extra = list(conversation(300, seed=99, big_tools=False))

    def close() -> float:
        store = _store(logdir)
        writer = store.session(KEY)
        for m in extra:
            writer.append_message_dict(m)
        seconds = _timed(writer.close)
        store.close()
        restore()
        return seconds

    def exists() -> float:
        store = _store(logdir)
        reps = 200
        t0 = time.perf_counter()
        for _ in range(reps):
            store.exists(KEY)
        return (time.perf_counter() - t0) / reps

    try:
        a: list[float] = []
        b: list[float] = []
        c: list[float] = []
        for _ in range(runs):  # alternating, so a noisy neighbour slows all three
            a.append(ours_read())
            b.append(sqlite_read())
            c.append(tail_read())
        fig.open_history = statistics.median(a) * 1e3
        fig.sqlite_get_items = statistics.median(b) * 1e3
        fig.raw_tail = statistics.median(c) * 1e3
        fig.writer_open = _median(runs, writer_open) * 1e3
        fig.close = _median(runs, close) * 1e3
        fig.exists_us = _median(runs, exists) * 1e6
        fig.bytes_per_event = writer_memory(logdir, n)
        restore()
        more = list(conversation(APPENDED, seed=7, big_tools=False))
        fig.appended_mb = appended_memory(logdir, more, settle=True) / 1e6
        restore()
        fig.appended_mb_unsettled = appended_memory(logdir, more, settle=False) / 1e6
        restore()
        on: list[tuple[float, float]] = []
        off: list[tuple[float, float]] = []
        for _ in range(max(1, runs // 2)):
            on.append(append_time(logdir, more, settle=True))
            restore()
            off.append(append_time(logdir, more, settle=False))
            restore()
        fig.append_us = statistics.median(t[0] for t in on) * 1e6
        fig.append_us_unsettled = statistics.median(t[0] for t in off) * 1e6
        fig.append_close_us = statistics.median(t[1] for t in on) * 1e6
        fig.append_close_us_unsettled = statistics.median(t[1] for t in off) * 1e6
        if n <= SEGMENTED_MAX:
            segmented(fig, logdir, runs, cache)
    finally:
        loop.close()
    return fig


def segmented(fig: Figures, logdir: Path, runs: int, cache: Path) -> None:
    """Open + ``history(500)`` of the session in segments beside the one-file log (CPU time,
    alternating): what the index costs once the log has rolled."""
    from sessionledger.eventlog import FileStore as Store
    from sessionledger.projections import history

    segroot, size = ensure_segmented(fig.n, cache)
    fig.segments = sum(1 for p in segroot.iterdir() if ".seg" in p.name) + 1

    def cpu(make: Callable[[], FileStore]) -> float:
        gc.collect()
        t0 = time.process_time()
        store = make()
        loaded = store.load(KEY)
        got = history(loaded.state, max_messages=WINDOW)
        seconds = time.process_time() - t0
        assert got
        if not loaded.snapshot_seq:
            fig.notes.append("the segmented log opened without a snapshot")
        store.close()
        return seconds

    seg: list[float] = []
    flat: list[float] = []
    for _ in range(runs):
        seg.append(cpu(lambda: Store(segroot, segment_bytes=size)))
        flat.append(cpu(lambda: _store(logdir)))
    fig.open_history_segmented_cpu = statistics.median(seg) * 1e3
    fig.open_history_cpu = statistics.median(flat) * 1e3


def writer_memory(logdir: Path, n: int) -> float:
    """Bytes per event an open writer holds (tracemalloc: allocated by opening, still live)."""

    store = _store(logdir)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        writer = store.session(KEY)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        events = writer.state.seq
    finally:
        tracemalloc.stop()
    store.close()
    return (after - before) / max(events, n)


def _writer(logdir: Path, settle: bool) -> Any:

    store = _store(logdir, durability="none")
    if not settle:
        store.settle_every = 0
    return store, store.session(KEY)


def appended_memory(logdir: Path, messages: Sequence[dict[str, Any]], *, settle: bool) -> float:
    """Bytes an open writer holds after appending ``messages`` (from before it was opened)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store, writer = _writer(logdir, settle)
        for m in messages:
            writer.append_message_dict(m)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    writer.close()
    store.close()
    return float(held)


def append_time(
    logdir: Path, messages: Sequence[dict[str, Any]], *, settle: bool
) -> tuple[float, float]:
    """Seconds per message of appending ``messages`` to an open writer (durability none):
    the appends alone, and the appends with the writer's and the store's ``close()``."""
    store, writer = _writer(logdir, settle)
    append = writer.append_message_dict
    gc.collect()
    t0 = time.perf_counter()
    for m in messages:
        append(m)
    t1 = time.perf_counter()
    writer.close()
    store.close()
    t2 = time.perf_counter()
    return (t1 - t0) / len(messages), (t2 - t0) / len(messages)


def _cell(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


_ROWS: tuple[tuple[str, str], ...] = (
    ("open + `history(500)` (ms)", "open_history"),
    ("Agents SDK `SQLiteSession.get_items(500)`, cold (ms)", "sqlite_get_items"),
    ("raw read of the last 500 JSONL lines (ms)", "raw_tail"),
    ("writer open (ms)", "writer_open"),
    ("`close()` after 300 appends (ms)", "close"),
    ("`exists()` (us)", "exists_us"),
    ("open writer's memory (bytes per event)", "bytes_per_event"),
    ("open + `history(500)`, log in segments (CPU ms)", "open_history_segmented_cpu"),
    ("the same, log in one file (CPU ms, same run)", "open_history_cpu"),
    ("writer after 20,000 appends: memory held (MB)", "appended_mb"),
    ("the same, settling off (every appended event kept, MB)", "appended_mb_unsettled"),
    ("append, durability none (us per message)", "append_us"),
    ("the same, settling off (us per message)", "append_us_unsettled"),
    ("append, then close() (us per message, close included)", "append_close_us"),
    ("the same, settling off (close extends the index)", "append_close_us_unsettled"),
)


def markdown(figures: Sequence[Figures]) -> str:
    """The growth table, one column per size."""
    head = "| | " + " | ".join(f"{f.n:,} msgs ({f.log_mb:,.0f} MB)" for f in figures) + " |"
    lines = [head, "|---|" + "---:|" * len(figures)]
    for label, attr in _ROWS:
        cells = (_cell(getattr(f, attr)) for f in figures)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(sizes: Sequence[int], runs: int, *, cache: Path = CACHE) -> list[Figures]:
    """Measure every size, printing each column's figures as it finishes.

    Each size is measured in a fresh process of its own (``--one``), for the reason the suite
    runs each benchmark in one (see ``_child``): measured on 2026-11-26, the raw tail read at
    10k took 3.1 ms in a fresh process and 4.1 ms after the 1k column's 20,000 appends ran in
    the same one, so a column depended on the columns measured before it."""
    out: list[Figures] = []
    for n in sizes:
        t0 = time.perf_counter()
        module = f"{__package__}.growth"
        quiet = f"ignore:'{module}' found in sys.modules:RuntimeWarning"  # runpy's, harmless
        command = [sys.executable, "-W", quiet, "-m", module, "--one", str(n)]
        command += ["--runs", str(runs)]
        command += ["--cache", str(cache)]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        fig = Figures(**json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  {n:,} messages measured in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        out.append(fig)
    return out


def _rows(figures: Sequence[Figures]) -> list[Row]:
    rows: list[Row] = []
    for f in figures:
        size = f"{f.n:,} msgs"
        rows.append(
            Row(
                "growth",
                f"open + history(500), {size}",
                "ms",
                f.open_history,
                f.sqlite_get_items,
                target=GOAL_OPEN_HISTORY.get(f.n),
                nanobot_what=f"(SQLiteSession.get_items(500) cold; raw tail {f.raw_tail:.2f} ms)",
            )
        )
        if f.open_history_segmented_cpu is not None:
            rows.append(
                Row(
                    "growth",
                    f"open + history(500), {size} in {f.segments} segments (CPU)",
                    "ms",
                    f.open_history_segmented_cpu,
                    f.open_history_cpu,
                    nanobot_what="(the same log in one file, CPU)",
                    rival="one file",
                )
            )
        rows.append(
            Row(
                "growth",
                f"writer open, {size}",
                "ms",
                f.writer_open,
                target=GOAL_WRITER_OPEN.get(f.n),
            )
        )
        rows.append(Row("growth", f"close() after 300 appends, {size}", "ms", f.close, target=5.0))
        rows.append(
            Row(
                "growth",
                f"exists(), {size}",
                "ms",
                None if f.exists_us is None else f.exists_us / 1e3,
                target=0.05,
            )
        )
        rows.append(
            Row(
                "growth",
                f"writer memory per event, {size}",
                "ms",
                None,
                note=f"{_cell(f.bytes_per_event)} bytes/event (goal <= 100)",
            )
        )
        rows.append(
            Row(
                "growth",
                f"writer after {APPENDED:,} appends, {size}",
                "ms",
                None,
                note=(
                    f"holds {_cell(f.appended_mb)} MB ({_cell(f.appended_mb_unsettled)} MB "
                    f"settling off); append {_cell(f.append_us)} us/msg "
                    f"({_cell(f.append_us_unsettled)} us settling off); with close() "
                    f"{_cell(f.append_close_us)} us/msg "
                    f"({_cell(f.append_close_us_unsettled)} us settling off)"
                ),
            )
        )
    return rows


@benchmark("growth", 17, "Growth: open+history(500), writer open, close, exists vs SQLiteSession")
def bench_growth(ctx: Context) -> list[Row]:
    """The growth figures at 1k/10k/100k (and 1M without --quick)."""
    sizes = SIZES_QUICK if ctx.quick else SIZES_FULL
    return _rows(run(sizes, ctx.runs))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sessionledger.tools.bench.growth``: print the growth table."""
    p = argparse.ArgumentParser(prog="python -m sessionledger.tools.bench.growth")
    p.add_argument("--quick", action="store_true", help="1k, 10k and 100k only")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--sizes", default="", help="comma-separated sizes (overrides --quick)")
    p.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)  # run()'s child
    p.add_argument("--cache", default=str(CACHE), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        fig = measure(args.one, args.runs, cache=Path(args.cache))
        print(json.dumps(dataclasses.asdict(fig)))
        return 0
    sizes = (
        tuple(int(s) for s in args.sizes.split(",") if s)
        if args.sizes
        else (SIZES_QUICK if args.quick else SIZES_FULL)
    )
    print(markdown(run(sizes, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Many-writers benchmarks: what the lock per write costs, and what many processes reach.

Each figure is side by side with its competitor in the same run (the ``nanobot`` column of a
row holds the competitor here; ``nanobot_what`` names it):

- an uncontended non-durable append (a lock per write, kept across a burst by a lease, see
  ``eventlog._lease``) against the same writer (same settle hook) holding the log's lock for
  its whole life, which is how writers worked before;
- a durable single append (``"always"``: lock, fstat, write, fdatasync) against a raw
  ``os.write`` + ``os.fdatasync`` of the same encoded lines;
- 8 processes appending to one session with ``"batch"`` (group commit), total appends/s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from ._core import Context, Row, benchmark, medians, timed


def _messages(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"message {i} " + "x" * 200} for i in range(n)]


class _Held:
    """A log opened under its lock and kept locked: the writer of before (no transaction)."""

    def __init__(self, io: Any) -> None:
        self.name = io.name
        self.append = io.append
        self.sync = io.sync
        self.truncate = io.truncate
        self.size = io.size
        self.close = io.close

    def transaction(self, state: Any) -> AbstractContextManager[object]:
        return nullcontext()  # held for its life: nothing to take per write


def _append_rate(ctx: Context, durability: str, n: int, *, held: bool) -> float:
    """Appends/s of one writer; ``held``: its lock taken once for its life (the old way)."""
    from sessionledger.eventlog import FileStore, SessionWriter

    msgs = _messages(n)
    with ctx.scratch("writers-append") as root:
        store = FileStore(root, durability=durability)
        store.session("bench:one").close()
        if held:
            raw, state, _ = store._open_checked("bench:one", create=False, metadata=None)
            writer = SessionWriter.standalone(
                key="bench:one",
                io=_Held(raw.io),
                state=state,
                durability=store.durability,
                hash_key=store.hash_key,
                token_counter=store.token_counter,
            )
            # The store's writer settles its events into the index (``settle_every``): so does
            # the rival, or the comparison would charge the lock with that work too.
            writer.log.settle = store._views.settler("bench:one")
        else:
            writer = store.session("bench:one")
        append = writer.append_message_dict
        seconds = timed(lambda: [append(m) for m in msgs])
        writer.close()
        store.close()
    return n / seconds


def _raw_rate(ctx: Context, n: int) -> float:
    """``os.write`` + ``os.fdatasync`` per line, of lines our writer encoded (untimed)."""
    from sessionledger.eventlog import FileStore

    with ctx.scratch("writers-raw") as root:
        store = FileStore(root, durability="none")
        with store.session("bench:lines") as w:
            for m in _messages(n):
                w.append_message_dict(m)
        lines = store.read_bytes("bench:lines").splitlines(keepends=True)[1:]
        store.close()
        fd = os.open(root / "raw.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:

            def run() -> None:
                for line in lines:
                    os.write(fd, line)
                    os.fdatasync(fd)

            seconds = timed(run)
        finally:
            os.close(fd)
    return n / seconds


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from sessionledger.eventlog import FileStore
    root, go, seconds, raw = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "raw"
    store = FileStore(root, durability="batch", lock_timeout=60)
    w = store.session("bench:shared")
    message = {"role": "user", "content": "x" * 200}
    line = b'{"content":"' + b"x" * 260 + b'"}\\n'
    fd = os.open(os.path.join(root, "raw.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        if raw:
            os.write(fd, line)
            os.fdatasync(fd)
        else:
            w.append_message_dict(message)
        done += 1
    store.close()
    print(done, flush=True)
    """
)


def _processes_rate(ctx: Context, processes: int, seconds: float, *, raw: bool = False) -> float:
    """Total durable appends/s of ``processes`` processes writing one session (``raw``: the
    same processes doing ``os.write`` + ``os.fdatasync`` of a line to one file, no lock)."""
    from sessionledger.eventlog import FileStore

    with ctx.scratch("writers-procs") as root:
        FileStore(root).session("bench:shared").close()
        go = Path(root) / "go"
        here = Path(__file__).resolve().parents[2]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), *sys.path]))
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(root),
                    str(go),
                    str(seconds),
                    "raw" if raw else "",
                ],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(processes)
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        go.touch()
        t0 = time.perf_counter()
        total = 0
        for proc in procs:
            out, _ = proc.communicate(timeout=seconds + 120)
            total += int(out.split()[-1])
        wall = time.perf_counter() - t0
        if not raw:
            events = len(FileStore(root).load("bench:shared", snapshot=False).events)
            assert events == total, f"{total} appends acknowledged, {events} in the log"
    return total / max(wall, seconds)


@benchmark("writers", 15, "Many writers: the lock per write, durable appends, 8 processes")
def bench_writers(ctx: Context) -> list[Row]:
    """The cost of the per-write lock, and 8 processes on one session."""
    n_none = 5_000 if ctx.quick else 20_000
    n_sync = 300 if ctx.quick else 1_000
    rows: list[Row] = []
    now, before = medians(
        ctx.runs,
        lambda: _append_rate(ctx, "none", n_none, held=False),
        lambda: _append_rate(ctx, "none", n_none, held=True),
    )
    rows.append(
        Row(
            "writers",
            f'uncontended append, durability="none", {n_none:,} messages (lock per write)',
            "events/s",
            now,
            before,
            nanobot_what="the same writer holding the lock for its life (before)",
        )
    )
    ours, raw = medians(
        ctx.runs,
        lambda: _append_rate(ctx, "always", n_sync, held=False),
        lambda: _raw_rate(ctx, n_sync),
    )
    rows.append(
        Row(
            "writers",
            f'durable single append, durability="always", {n_sync:,} messages',
            "events/s",
            ours,
            raw,
            target=raw / 1.15 if raw else None,
            nanobot_what="raw os.write + os.fdatasync of the same lines",
        )
    )
    seconds = 1.0 if ctx.quick else 3.0
    rate, floor = medians(
        max(1, ctx.runs // 2),
        lambda: _processes_rate(ctx, 8, seconds),
        lambda: _processes_rate(ctx, 8, seconds, raw=True),
    )
    rows.append(
        Row(
            "writers",
            'durability="batch", 8 processes appending to one session (total)',
            "events/s",
            rate,
            floor,
            target=5_000,
            nanobot_what="8 processes: os.write + os.fdatasync of a line to one file, no lock",
        )
    )
    return rows

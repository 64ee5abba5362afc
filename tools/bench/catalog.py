"""Benchmark: session catalog listing and snapshot opens (``python -m sessionledger.tools.bench_catalog``).

Builds stores of 1,000 and 10,000 sessions of 200 messages (cached under ``--dir``), then times
``projections.list_sessions`` when the catalog is current (on the same store object, which keeps
the catalog in memory, and on a new store object each run, which reads and decodes ``.catalog``
as a fresh process does), filtered with a limit, after one session appended, and when it must be
rebuilt from the logs; and opening a 10,000-message session with and without its snapshot, plus
``history(max_messages=500, max_tokens=128_000)``. Medians of several runs. The "current"
figures are taken once the store's change table has settled (one second after it is made), as
in any store that has been running for more than a second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sessionledger.eventlog import (
    ZERO_HASH,
    FileStore,
    Header,
    MessageAppended,
    encode_line,
    estimate_tokens,
)
from sessionledger.projections import history, list_sessions, write_snapshot

_SETTLE_S = 1.1
TEXT = "Could you look into the deployment logs and tell me what went wrong overnight? "


def build(root: Path, sessions: int, messages: int) -> None:
    """Write ``sessions`` logs of ``messages`` messages straight through the codec (fast)."""
    if (root / ".built").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    store = FileStore(root, durability="none")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(sessions):
        key = f"bot:telegram:{i}"
        created = start + timedelta(seconds=i)
        header = Header(seq=0, ts=created, id=os.urandom(16).hex(), key=key, created_at=created)
        line, h = encode_line(header, ZERO_HASH)
        out = [line]
        for seq in range(1, messages + 1):
            role = "user" if seq % 2 else "assistant"
            msg = {"role": role, "content": f"{seq} {TEXT}", "timestamp": created.isoformat()}
            event = MessageAppended.of(
                seq=seq,
                ts=created + timedelta(milliseconds=seq),
                id=os.urandom(16).hex(),
                message=msg,
                tokens=estimate_tokens(msg),
            )
            line, h = encode_line(event, h)
            out.append(line)
        fd = os.open(store.path_for(key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b"".join(out))
        os.close(fd)
    (root / ".built").touch()


def timed(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bench_catalog(base: Path, sessions: int, runs: int) -> None:
    root = base / f"catalog-{sessions}"
    t0 = time.perf_counter()
    build(root, sessions, 200)
    print(f"  store of {sessions} x 200 messages ready ({time.perf_counter() - t0:.1f} s)")
    store = FileStore(root, durability="none")
    catalog = root / ".catalog"

    def rebuild() -> None:
        catalog.unlink(missing_ok=True)
        list_sessions(FileStore(root, durability="none"))  # a new object: nothing in memory

    cold = timed(rebuild, 3)
    rows = list_sessions(store)
    assert len(rows) == sessions, len(rows)
    # The change table is trusted only once it is SETTLE old (see eventlog/_changes.py): a
    # long-lived store is past that; wait here so the figures are the steady state's.
    time.sleep(_SETTLE_S)
    list_sessions(store)
    current = timed(lambda: list_sessions(store), runs)
    limited = timed(lambda: list_sessions(store, channel="telegram", limit=20), runs)
    fresh = timed(lambda: list_sessions(FileStore(root, durability="none")), runs)
    writer = store.session("bot:telegram:7")

    def append_then_list() -> None:
        writer.append_message("user", "one more")
        list_sessions(store)

    after_append = timed(append_then_list, runs)
    writer.close()
    print(f"  list {sessions:>6}: current {current:7.2f} ms | filtered+limit 20 {limited:7.2f} ms")
    print(f"               new store object (reads .catalog) {fresh:7.2f} ms")
    print(f"               one session appended {after_append:7.2f} ms | rebuilt {cold:8.1f} ms")


def bench_snapshot(base: Path, runs: int) -> None:
    root = base / "snapshot-10k"
    build(root, 1, 10_000)
    store = FileStore(root, durability="none")
    key = "bot:telegram:0"
    size = store.path_for(key).stat().st_size
    store.put_snapshot(key, None)
    no_snap = timed(lambda: history(store.load(key).state, 500, 128_000), 5)
    write_ms = timed(lambda: store.write_snapshot(key, rebuild=True), 3)
    write_snapshot(store, key)
    with_snap = timed(lambda: history(store.load(key).state, 500, 128_000), runs)

    def open_writer() -> None:
        w = store.session(key)
        history(w.state, 500, 128_000)
        store._writers.pop(key, None)  # close without the on-close snapshot policy
        w._io.close()

    writer_open = timed(open_writer, runs)
    snap_size = len(store.snapshot_bytes(key) or b"")
    print(f"  10,000-message session ({size / 1e6:.1f} MB log, {snap_size / 1e6:.1f} MB snapshot)")
    print(f"    load + history, no snapshot   {no_snap:7.2f} ms")
    print(f"    load + history, snapshot      {with_snap:7.2f} ms")
    print(f"    session() + history, snapshot {writer_open:7.2f} ms")
    print(f"    write the snapshot (rebuild)  {write_ms:7.2f} ms")


def main() -> None:
    """Run the catalog and snapshot benchmarks."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "sessionlog-bench"))
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="1,000 sessions only")
    args = parser.parse_args()
    base = Path(args.dir)
    print("session catalog (tools/bench_catalog.py)")
    for n in (1_000,) if args.quick else (1_000, 10_000):
        bench_catalog(base, n, args.runs)
    bench_snapshot(base, args.runs)


if __name__ == "__main__":
    main()

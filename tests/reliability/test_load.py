"""Concurrency under load: processes, threads and tasks at once, one process SIGKILLed.

The scenario is ``tools.soak._load`` (see its docstring): a sync worker with threads and an
async worker with tasks (asyncio) per pair of processes, own and shared sessions, a fixed time.
It runs in a child interpreter (it forks). tests/unit/test_multiprocess_writers.py covers two
processes taking turns, expected_seq races and a killed idle holder; this is all of it at once.
"""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

from soak_child import finish_soak, start_soak

from sessionledger import projections, replay
from sessionledger.eventlog import FileStore


def test_no_event_lost_duplicated_or_interleaved_under_load(tmp_path: Path) -> None:
    proc = start_soak(
        "--only",
        "load",
        "--seconds",
        "4",
        "--processes",
        "3",
        "--threads",
        "4",
        "--root",
        str(tmp_path),
        "--seed",
        "5",
    )
    figures = finish_soak(proc)["load"]
    assert figures["killed"] == 1
    # Every worker's own session and both shared sessions got events, and many of them.
    assert figures["sessions"] == 5
    assert all(n > 20 for n in figures["by_session"].values()), figures["by_session"]
    assert figures["shared_turns"] > 20
    # The killed worker may have written one line per thread or task without reporting it
    # (each has at most one append in flight: written, not yet returned).
    assert 0 <= figures["events_in_logs"] - figures["acknowledged"] <= 4
    assert figures["lost"] == 0


def test_a_closed_store_keeps_no_descriptor_open(tmp_path: Path) -> None:
    def open_fds() -> int:
        # Only descriptors on the store's files: other threads of the test process (a pool or a
        # follower left by an earlier test) may open and close their own meanwhile.
        here = str(tmp_path.resolve())
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(here)
        return count

    with FileStore(tmp_path, durability="none") as store, store.session("k") as writer:
        writer.append_message("user", "x")
    before = open_fds()
    for _ in range(5):
        store = FileStore(tmp_path, durability="none")
        projections.rebuild_catalog(store)
        replay.recover(store)
        store.close()
    gc.collect()
    assert open_fds() == before

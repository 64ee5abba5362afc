"""Leftovers of a kill: a catalog or snapshot temporary is removed by the next write of that view
and by ``replay.recover``; a live process's temporary is left alone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

from crash import die_half_way_through_a_write

from sessionledger import projections, replay
from sessionledger.eventlog import FileStore, _safeio


def _killed_while_writing(root: str, view: str) -> None:
    """Start writing ``view`` and die with SIGKILL half-way through (as kill -9 would)."""
    store = FileStore(root, durability="none")
    die_half_way_through_a_write()
    if view == "snapshot":
        projections.write_snapshot(store, "k")
    else:
        projections.rebuild_catalog(store)


def _kill_during(root: Path, view: str) -> list[Path]:
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_killed_while_writing, args=(str(root), view))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    return list((root / _safeio.TEMP_DIR).iterdir())


def _store(root: Path) -> FileStore:
    store = FileStore(root, durability="none")
    with store.session("k") as w:
        for i in range(50):
            w.append_message("user", f"message {i} " * 20)
    return store


def test_a_snapshot_temporary_is_removed_by_the_next_snapshot(tmp_path: Path) -> None:
    store = _store(tmp_path)
    left = _kill_during(tmp_path, "snapshot")
    assert len(left) == 1 and left[0].name.startswith("k.snapshot.")
    assert left[0].stat().st_size > 0
    projections.write_snapshot(store, "k")
    assert list((tmp_path / _safeio.TEMP_DIR).iterdir()) == []


def test_a_catalog_temporary_is_removed_by_the_next_catalog_write(tmp_path: Path) -> None:
    store = _store(tmp_path)
    left = _kill_during(tmp_path, "catalog")
    assert len(left) == 1 and left[0].name.startswith(".catalog.")
    projections.rebuild_catalog(store)
    assert list((tmp_path / _safeio.TEMP_DIR).iterdir()) == []


def test_recover_removes_every_leftover_but_a_live_writers(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _kill_during(tmp_path, "snapshot")
    staging = tmp_path / _safeio.TEMP_DIR
    live = staging / f"k.snapshot.{os.getppid()}.abcd1234.tmp"  # a live process's write
    live.write_bytes(b"in progress")
    proc = multiprocessing.get_context("fork").Process(target=os.getpid)
    proc.start()
    proc.join()
    dead_pid = proc.pid
    assert dead_pid is not None
    legacy = tmp_path / f".k.snapshot.{dead_pid}.0011aabb.tmp"  # the old place, in the root
    legacy.write_bytes(b"old")
    report = replay.recover(store)
    assert report.ok
    assert sorted(p.name for p in staging.iterdir()) == [live.name]
    assert not legacy.exists()
    assert len(report.leftovers) == 2 and all("temporary" in s for s in report.leftovers)
    assert replay.recover(store).leftovers == []


def test_recover_settles_a_restore_a_kill_interrupted(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.cleanup(0)
    (entry,) = store.trash()
    log = Path(entry.location) / store.path_for("k").name
    os.link(log, store.path_for("k"))  # the restore's first step, then the kill
    report = replay.recover(FileStore(tmp_path, durability="none"))
    assert any("completed the restore" in s for s in report.leftovers)
    assert store.trash() == [] and not Path(entry.location).exists()
    assert len(store.load("k").state.messages) == 50

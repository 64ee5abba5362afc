"""Permissions and symlinks: 0600 files and 0700 directories whatever the umask; no symlink
followed at a log, snapshot, quarantine, catalog or trash path.

tests/unit/test_file_store_safety.py covers the log and quarantine modes and symlinks at the
log and quarantine paths when opening; this adds every other file the store makes (snapshot,
catalog, trash entries), recover and repair meeting a symlink, and the trash directory.
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sessionledger import projections, replay
from sessionledger.eventlog import FileStore, UnsafePathError


def everything(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize("mask", [0o000, 0o077])
def test_every_file_0600_every_directory_0700(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        root = tmp_path / "store"
        store = FileStore(root, durability="always")
        for key in ("a", "b"):
            with store.session(key) as w:
                w.append_message("user", "x")
        with open(store.path_for("a"), "ab") as f:
            f.write(b'{"type":"mess')  # a torn tail: recover makes a quarantine file
        assert replay.recover(store).ok
        projections.write_snapshot(store, "a")
        projections.rebuild_catalog(store)
        store.cleanup(0, now=datetime.now(UTC) + timedelta(days=1))  # b and a to the trash
        store.restore(store.trash()[0])
        with store.session("c") as w:
            w.append_message("user", "y")
        store.close()
    finally:
        os.umask(old)
    made = everything(root)
    kinds = {p.suffix or p.name for p in made}
    assert {".jsonl", ".quarantine", ".snapshot", ".catalog", ".trash", ".json"} <= kinds, kinds
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for path in made:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert not path.is_symlink()
        # A log in the trash is read-only (0400): retired, so no writer appends to it.
        retired = ".trash" in path.parts and path.suffix == ".jsonl"
        want = 0o700 if path.is_dir() else 0o400 if retired else 0o600
        assert mode == want, (path, oct(mode))


def test_symlink_at_the_snapshot_path_is_never_followed(tmp_path: Path) -> None:
    """A snapshot is a derived view: a symlink there is treated as absent when reading and
    replaced (by rename, which does not follow it) when writing; its target is untouched."""
    store = FileStore(tmp_path / "s", durability="none")
    with store.session("k") as w:
        w.append_message("user", "x")
    target = tmp_path / "precious"
    target.write_bytes(b"keep")
    store.snapshot_path("k").symlink_to(target)
    assert store.snapshot_bytes("k") is None
    assert store.load("k").state.seq == 1
    assert replay.verify(store).ok
    projections.write_snapshot(store, "k")
    assert target.read_bytes() == b"keep"
    assert not store.snapshot_path("k").is_symlink()


def test_symlink_at_the_catalog_path_is_never_followed(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session("k") as w:
        w.append_message("user", "x")
    target = tmp_path / "precious"
    target.write_bytes(b"keep")
    (store.root / ".catalog").symlink_to(target)
    assert [row.key for row in projections.list_sessions(store)] == ["k"]
    projections.rebuild_catalog(store)
    assert target.read_bytes() == b"keep"


def test_recover_and_repair_refuse_a_symlinked_quarantine(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session("k") as w:
        w.append_message("user", "x")
    log = store.path_for("k")
    with open(log, "ab") as f:
        f.write(b'{"type":"mess')
    before = log.read_bytes()
    target = tmp_path / "precious"
    target.write_bytes(b"keep")
    store.quarantine_path("k").symlink_to(target)
    with pytest.raises(UnsafePathError):
        replay.recover(store)
    with pytest.raises(UnsafePathError):
        replay.repair(store, "k")
    assert target.read_bytes() == b"keep"
    assert log.read_bytes() == before  # nothing was cut when the bytes could not be kept


def test_a_symlinked_trash_is_refused(tmp_path: Path) -> None:
    """Regression: a ``.trash`` symlink made cleanup move a session's files out of the store."""
    store = FileStore(tmp_path / "s", durability="none")
    with store.session("k") as w:
        w.append_message("user", "x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store.root / ".trash").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError):
        store.cleanup(0, now=datetime.now(UTC) + timedelta(days=1))
    assert list(elsewhere.iterdir()) == []
    assert store.load("k").state.seq == 1


def test_a_symlink_at_a_log_path_is_refused_by_every_entry_point(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    target = tmp_path / "precious.jsonl"
    with FileStore(tmp_path / "other", durability="none").session("k") as w:
        w.append_message("user", "a real log elsewhere")
    target.write_bytes((tmp_path / "other" / "k.jsonl").read_bytes())
    store.path_for("k").symlink_to(target)
    before = target.read_bytes()
    for call in (
        lambda: store.session("k"),
        lambda: store.load("k"),
        lambda: store.read_bytes("k"),
        lambda: replay.verify(store, "k"),
        lambda: replay.repair(store, "k"),
        lambda: store.delete("k"),
    ):
        with pytest.raises(UnsafePathError):
            call()
    assert target.read_bytes() == before and store.path_for("k").is_symlink()

"""kill -9 during erase, redact and rotation: nothing lost, no key half-deleted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessionledger import replay
from sessionledger.eventlog import WITHHELD, FileStore, LocalKeyFile

CHILD = Path(__file__).with_name("privacy_crash_child.py")
KEYS = ("victim", "other")


def _setup(root: Path) -> None:
    provider = LocalKeyFile(root / "master.key")
    with FileStore(root / "s", key_provider=provider, durability="always") as store:
        for key in KEYS:
            s = store.session(key, metadata={"title": f"title {key}"})
            s.append_message("user", f"{key} one")
            s.append_message("assistant", f"{key} two")
            s.append_message("user", f"{key} three")


def _crash(root: Path, operation: str, point: str, nth: int = 1) -> bool:
    """Run the child; True if it died by SIGKILL (False: it finished the operation)."""
    done = subprocess.run(
        [sys.executable, str(CHILD), str(root), operation, point, str(nth)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 0:
        assert "finished" in done.stdout
        return False
    assert done.returncode == -9, done.stderr
    return True


def _contents(store: FileStore, key: str) -> list[object]:
    return [m.message.get("content") for m in store.load(key).state.messages]


def _leaf_alive(store: FileStore, key: str, seq: int) -> bool:
    keyring = store.keyring
    assert keyring is not None
    header = json.loads(store.read_bytes(key).split(b"\n", 1)[0])
    return keyring.tree(header["id"]).leaf(seq) is not None


def _check_after(root: Path, operation: str) -> None:
    store = FileStore(root / "s", key_provider=LocalKeyFile(root / "master.key"))
    assert replay.verify(FileStore(root / "s")).ok
    # The other session is untouched and readable.
    assert _contents(store, "other") == ["other one", "other two", "other three"]
    victim = store.load("victim", snapshot=False)
    kinds = [type(e).__name__.lower() for e in victim.events]
    got = _contents(store, "victim")
    if operation == "rotate":
        assert got == ["victim one", "victim two", "victim three"]
        return
    happened = (operation == "erase" and "erased" in kinds) or (
        operation == "redact" and "redacted" in kinds
    )
    if not happened:
        assert got == ["victim one", "victim two", "victim three"]
        assert _leaf_alive(store, "victim", 2)
        return
    if operation == "erase":
        assert got == [None, None, None]
    else:
        assert got == ["victim one", None, "victim three"]
        assert victim.state.messages[1].message[WITHHELD] == "redacted"
    # Opening the session finishes what the crash interrupted: the keys are gone for good.
    store.session("victim").close()
    assert not _leaf_alive(store, "victim", 2)
    assert _leaf_alive(store, "other", 2)


@pytest.mark.slow
@pytest.mark.parametrize("operation", ["erase", "redact"])
@pytest.mark.parametrize(("point", "nth"), [("destroy", 1), ("rename", 1), ("renamed", 1)])
def test_crash_during_erasure(tmp_path: Path, operation: str, point: str, nth: int) -> None:
    _setup(tmp_path)
    assert _crash(tmp_path, operation, point, nth)
    _check_after(tmp_path, operation)


@pytest.mark.slow
def test_crash_at_every_step_of_rotation(tmp_path: Path) -> None:
    # Renames: the new master key, each of the two records, the retirement of the old key.
    for nth, point in [(n, "rename") for n in range(1, 6)] + [(2, "renamed")]:
        root = tmp_path / f"{point}{nth}"
        root.mkdir()
        _setup(root)
        died = _crash(root, "rotate", point, nth)
        _check_after(root, "rotate")
        if died:
            # Running rotation again finishes it; everything still opens.
            again = FileStore(root / "s", key_provider=LocalKeyFile(root / "master.key"))
            again.rotate_master_key()
            assert len(LocalKeyFile(root / "master.key").key_ids()) == 1
            _check_after(root, "rotate")
        else:
            assert nth == 5  # only four replaces happen


def _redact_in_child(root: str, seq: int, start: float) -> None:
    import time as _time

    store = FileStore(
        Path(root) / "s", key_provider=LocalKeyFile(Path(root) / "master.key"), lock_timeout=30
    )
    while _time.time() < start:
        _time.sleep(0.001)
    store.redact("victim", seq, by=f"process {seq}")
    store.close()


@pytest.mark.slow
def test_two_processes_redacting_at_once_both_stick(tmp_path: Path) -> None:
    import multiprocessing
    import time as _time

    _setup(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    start = _time.time() + 1.5
    procs = [ctx.Process(target=_redact_in_child, args=(str(tmp_path), s, start)) for s in (1, 3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "master.key"))
    # Neither read-modify-write of the key record undid the other's destruction.
    assert not _leaf_alive(store, "victim", 1) and not _leaf_alive(store, "victim", 3)
    assert _leaf_alive(store, "victim", 2)
    assert _contents(store, "victim") == [None, "victim two", None]
    assert replay.verify(FileStore(tmp_path / "s")).ok


def _destroy_in_child(root: str, sid: str, seqs: list[int], start: float) -> None:
    import time as _time

    from sessionledger.eventlog._crypto import Keyring
    from sessionledger.eventlog._keystore import FileKeyStore

    keyring = Keyring(LocalKeyFile(Path(root) / "master.key"), FileKeyStore(Path(root) / "s/.keys"))
    while _time.time() < start:
        pass
    for seq in seqs:
        keyring.destroy(sid, seq, seq)


@pytest.mark.slow
def test_key_store_lock_keeps_concurrent_destructions(tmp_path: Path) -> None:
    import multiprocessing
    import time as _time

    _setup(tmp_path)
    store = FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "master.key"))
    sid = store.load("victim").state.id
    ctx = multiprocessing.get_context("spawn")
    start = _time.time() + 1.5
    odd, even = list(range(1, 40, 2)), list(range(2, 40, 2))
    procs = [
        ctx.Process(target=_destroy_in_child, args=(str(tmp_path), sid, seqs, start))
        for seqs in (odd, even)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    keyring = store.keyring
    assert keyring is not None
    tree = keyring.tree(sid)
    assert [s for s in range(1, 40) if tree.leaf(s) is not None] == []  # none came back
    assert tree.leaf(40) is not None


@pytest.mark.slow
def test_a_crash_while_adding_the_new_master_key_leaves_no_copy_of_the_retired_one(
    tmp_path: Path,
) -> None:
    """kill -9 after the key file's temporary (old and new master keys) is written and before
    its rename: the rotation run again retires the old key, and no file beside the key file
    (the dead process's temporary included) still holds it."""
    _setup(tmp_path)
    path = tmp_path / "master.key"
    old = json.loads(path.read_bytes())["keys"][0]["key"].encode()
    assert _crash(tmp_path, "rotate", "rename", 1)
    assert any(old in p.read_bytes() for p in tmp_path.glob(".master.key.*.tmp"))
    FileStore(tmp_path / "s", key_provider=LocalKeyFile(path)).rotate_master_key()
    assert len(LocalKeyFile(path).key_ids()) == 1
    holding = [p.name for p in tmp_path.iterdir() if p.is_file() and old in p.read_bytes()]
    assert holding == []
    _check_after(tmp_path, "rotate")

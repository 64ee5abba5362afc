"""The catalog's listing of every conversation under attack: a stored catalog cut short, with
bytes changed, planted (FIFO, symlink, another store's catalog), two processes updating it at
once, and a process killed (kill -9) while writing it.

Whatever is found at ``.catalog``, ``list_conversations`` answers what a catalog rebuilt from
the logs alone answers (a keyed store: exactly; an unkeyed one promises that for a file that
does not decode, and never lets anything but the library's own errors out), never hangs, and
never writes through a symlink.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from crash import die_half_way_through_a_write

from sessionledger import replay
from sessionledger.eventlog import EventLogError, FileStore, _safeio
from sessionledger.projections import (
    ConversationInfo,
    SessionInfo,
    _catalog,
    _catalog_convs,
    list_conversations,
    list_sessions,
)

SECRET = "s3cret"


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Many stored chunks in a small store: cuts and flips land in every section.
    monkeypatch.setattr(_catalog_convs, "CHUNK", 4)


def _fill(root: Path, *, sessions: int = 9, seed: int = 3, hash_key: str | None = None) -> None:
    rng = random.Random(seed)
    with FileStore(root, durability="none", hash_key=hash_key) as store:
        for n in range(sessions):
            key = f"agent:telegram:{n}"
            for c in range(rng.randrange(1, 4)):
                s = store.session(key)
                s.append_message("user", f"question {n}.{c} über café")
                s.append_message("assistant", f"answer {n}.{c}")
                s.update_metadata(set={"title": f"chat {n}.{c}"})
                store.new_session(key)
        store.archive("agent:telegram:0")
        list_conversations(store)  # the listing is built and stored


def _listed(
    root: Path, hash_key: str | None = None
) -> tuple[list[ConversationInfo], list[SessionInfo]]:
    with FileStore(root, durability="none", hash_key=hash_key) as store:
        return list_conversations(store), list_sessions(store)


def _rebuilt(root: Path, hash_key: str | None = None) -> list[ConversationInfo]:
    """Every conversation from a catalog built from the logs alone (a copy of the store)."""
    copy = root.parent / (root.name + "-rebuilt")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, symlinks=True)
    (copy / ".catalog").unlink(missing_ok=True)
    with FileStore(copy, durability="none", hash_key=hash_key) as store:
        got = list_conversations(store)
    shutil.rmtree(copy)
    return got


def _fresh_answers(root: Path, hash_key: str | None = None) -> list[ConversationInfo]:
    """A whole listing and pages from new store objects (each reads what is at ``.catalog``)."""
    saved = (root / ".catalog").read_bytes() if (root / ".catalog").is_file() else None
    with FileStore(root, durability="none", hash_key=hash_key) as store:
        page = list_conversations(store, limit=5, offset=3)
    if saved is not None:
        (root / ".catalog").write_bytes(saved)  # the page rewrote it: the whole list reads it too
    with FileStore(root, durability="none", hash_key=hash_key) as store:
        whole = list_conversations(store)
    assert page == whole[3:8]
    return whole


def test_a_catalog_cut_anywhere_lists_what_a_rebuild_lists(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root)
    expected, rows = _listed(root)
    assert expected == _rebuilt(root)
    blob = (root / ".catalog").read_bytes()
    cuts = sorted({0, 1, 2, len(blob) - 1, *range(3, len(blob), max(1, len(blob) // 60))})
    for cut in cuts:
        (root / ".catalog").write_bytes(blob[:cut])
        assert _fresh_answers(root) == expected, cut
        (root / ".catalog").write_bytes(blob[:cut])
        assert _listed(root) == (expected, rows), cut


def test_a_keyed_catalog_with_any_byte_changed_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root, hash_key=SECRET)
    expected, _ = _listed(root, SECRET)
    blob = (root / ".catalog").read_bytes()
    for at in range(0, len(blob), max(1, len(blob) // 80)):
        changed = bytearray(blob)
        changed[at] ^= 0x20
        (root / ".catalog").write_bytes(bytes(changed))
        assert _fresh_answers(root, SECRET) == expected, at


def test_an_unkeyed_catalog_with_bytes_changed_never_fails_and_recover_restores_it(
    tmp_path: Path,
) -> None:
    """Without a key a changed byte that still decodes is not detected (the catalog is a view,
    like a snapshot without a key); what does not decode is rebuilt, nothing but the library's
    errors leaves, and ``recover`` gives the rebuilt listing back."""
    root = tmp_path / "s"
    _fill(root)
    expected, _ = _listed(root)
    blob = (root / ".catalog").read_bytes()
    rng = random.Random(7)
    for at in range(0, len(blob), max(1, len(blob) // 150)):
        changed = bytearray(blob)
        changed[at] = rng.randrange(256)
        (root / ".catalog").write_bytes(bytes(changed))
        try:
            with FileStore(root, durability="none") as store:
                list_conversations(store)
                list_conversations(store, limit=3, offset=2, current=False)
                list_sessions(store)
                list_conversations(store, "agent:telegram:4")
        except EventLogError:
            pass
        with FileStore(root, durability="none") as store:
            replay.recover(store)
        assert _listed(root)[0] == expected, at


def _run(op: Callable[[], object], seconds: float = 20.0) -> object:
    """``op()`` in a thread with a deadline: opening a FIFO for reading would block forever."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(op())
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "hangs"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


@pytest.mark.parametrize("kind", ["fifo", "symlink to a catalog", "dangling symlink", "directory"])
def test_a_planted_catalog_is_ignored_and_never_written_through(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "s"
    _fill(root)
    expected, _ = _listed(root)
    other = tmp_path / "other"
    _fill(other, sessions=4, seed=9)  # a valid catalog of other logs, with other rows
    target = other / ".catalog"
    before = target.read_bytes()
    path = root / ".catalog"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "symlink to a catalog":
        path.symlink_to(target)
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "nowhere")
    else:
        path.mkdir()

    def listing() -> list[ConversationInfo]:
        with FileStore(root, durability="none") as store:
            return list_conversations(store)

    try:
        got = _run(listing)
    except EventLogError:
        assert kind == "directory"  # a directory where the catalog goes is refused, clearly
        return
    assert got == expected
    assert target.read_bytes() == before  # never written through the link
    assert not (tmp_path / "nowhere").exists()
    assert _run(listing) == expected


def test_another_stores_catalog_planted_as_a_file_is_outgrown(tmp_path: Path) -> None:
    """A valid catalog of other logs copied in: its entries match no log here, so each log is
    read and the listing is this store's."""
    root = tmp_path / "s"
    _fill(root)
    expected, rows = _listed(root)
    other = tmp_path / "other"
    _fill(other, sessions=12, seed=9)  # same names, other contents
    shutil.copyfile(other / ".catalog", root / ".catalog")
    assert _listed(root) == (expected, rows)
    shutil.copyfile(other / ".catalog", root / ".catalog")
    assert _fresh_answers(root) == expected


def _worker(root: str, name: str, steps: int) -> None:
    rng = random.Random(name)
    store = FileStore(root, durability="none", lock_timeout=30)
    keys = [f"agent:telegram:{n}" for n in range(6)]
    for step in range(steps):
        key = rng.choice(keys)
        roll = rng.random()
        if roll < 0.5:
            store.session(key).append_message("user", f"{name} step {step}")
        elif roll < 0.7 and store.exists(key):
            store.new_session(key)
        elif roll < 0.8:
            store.session(key).update_metadata(set={"title": f"{name}.{step}"})
        if rng.random() < 0.5:
            list_conversations(store)
        else:
            list_sessions(store)
    store.close()


def test_two_processes_updating_the_catalog_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_catalog, "SAVE_AFTER", 1)  # every listing stores the catalog
    root = tmp_path / "s"
    _fill(root, sessions=6)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(str(root), f"p{i}", 60)) for i in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    expected = _rebuilt(root)
    assert _fresh_answers(root) == expected
    assert _listed(root)[0] == expected


def _killed_while_listing(root: str) -> None:
    """List conversations, dying with SIGKILL half-way through writing the catalog."""
    store = FileStore(root, durability="none")
    die_half_way_through_a_write()
    list_conversations(store)


def test_a_kill_while_the_catalog_is_written_leaves_the_old_one(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root)
    with FileStore(root, durability="none") as store:  # a catalog without the listing
        _catalog.rebuild_catalog(store)
        list_sessions(store)
    old = (root / ".catalog").read_bytes()
    expected = _rebuilt(root)
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_killed_while_listing, args=(str(root),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert (root / ".catalog").read_bytes() == old  # the half-written one never replaced it
    assert list((root / _safeio.TEMP_DIR).iterdir())  # its temporary is left ...
    assert _listed(root)[0] == expected
    assert list((root / _safeio.TEMP_DIR).iterdir()) == []  # ... until the next write
    assert _fresh_answers(root) == expected

"""Trash and restore against an adversary: planted entries, races across processes, a kill
between any two steps, a full disk, bad logs in a store-wide cleanup.

The rules are in eventlog/_filetrash.py. ``python -m sessionledger.tools.soak --only trash``
runs the same races and kills many more times.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionledger.eventlog import (
    EventLogError,
    FileStore,
    InvalidEventError,
    SessionNotFoundError,
    StorageError,
    UnsafePathError,
    _filetrash,
    _safeio,
)


def trashed(store: FileStore, key: str, text: str) -> str:
    """Create ``key`` holding ``text``, move it to the trash, return the entry id."""
    before = {e.id for e in store.trash()}
    with store.session(key) as w:
        w.append_message("user", text)
    store.cleanup(0, now=None)
    (entry,) = [e for e in store.trash() if e.id not in before]
    return entry.id


def contents(store: FileStore, key: str) -> list[Any]:
    return [m["content"] for m in store.load(key).state.message_dicts]


# -- planted entries ------------------------------------------------------------------------


def plant_entry(store: FileStore, entry_id: str, record: dict[str, Any]) -> Path:
    entry = store.root / ".trash" / entry_id
    entry.mkdir(parents=True)
    (entry / "entry.json").write_bytes(msgspec.json.encode(record))
    return entry


BAD_NAMES = [
    ["../victim.jsonl"],
    ["/etc/passwd"],
    ["sub/dir.jsonl"],
    ["other.jsonl"],
    ["x.jsonl", "../../.ssh/authorized_keys"],
    ["x.jsonl", "x.catalog"],
    ["x.snapshot"],  # no log
    [".."],
    [""],
]


@pytest.mark.parametrize("files", BAD_NAMES, ids=[repr(f) for f in BAD_NAMES])
def test_a_planted_entry_is_never_listed_nor_restored(tmp_path: Path, files: list[str]) -> None:
    store = FileStore(tmp_path / "store", durability="none")
    with store.session("victim") as w:
        w.append_message("user", "mine")
    victim = store.read_bytes("victim")
    entry = plant_entry(
        store,
        "20260101T000000000000-evil",
        {"key": "x", "deleted_at": "2026-01-01T00:00:00Z", "reason": "timeout", "files": files},
    )
    (entry / "x.jsonl").write_bytes(b"attacker\n")
    assert store.trash() == []
    with pytest.raises(EventLogError):
        store.restore("20260101T000000000000-evil")
    with pytest.raises(UnsafePathError):
        _filetrash.restore_entry(store.root, "20260101T000000000000-evil")
    assert store.read_bytes("victim") == victim
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    assert not store.exists("x")


@pytest.mark.parametrize(
    "record",
    [
        {"key": "", "deleted_at": "2026-01-01T00:00:00Z", "reason": "t", "files": [".jsonl"]},
        {"key": 1, "deleted_at": "x", "reason": "t", "files": []},
        "not an object",
    ],
)
def test_a_malformed_entry_json_is_skipped(tmp_path: Path, record: Any) -> None:
    store = FileStore(tmp_path, durability="none")
    entry = tmp_path / ".trash" / "e1"
    entry.mkdir(parents=True)
    (entry / "entry.json").write_bytes(msgspec.json.encode(record))
    assert store.trash() == []
    with pytest.raises(EventLogError):
        store.restore("e1")


@pytest.mark.parametrize("entry_id", ["..", "../x", ".trash", "a/b", "", ".lock"])
def test_an_entry_id_is_one_component(tmp_path: Path, entry_id: str) -> None:
    store = FileStore(tmp_path, durability="none")
    with pytest.raises(EventLogError):
        store.restore(entry_id)
    with pytest.raises(UnsafePathError):
        _filetrash.purge_entry(tmp_path, entry_id)


def test_a_symlink_in_an_entry_is_refused(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    entry_id = trashed(store, "k", "hi")
    log = tmp_path / "s" / ".trash" / entry_id / (store.path_for("k").name)
    secret = tmp_path / "secret"
    secret.write_text("do not move")
    log.unlink()
    log.symlink_to(secret)
    assert store.trash() == []
    with pytest.raises(EventLogError):
        store.restore(entry_id)
    assert secret.read_text() == "do not move" and not store.exists("k")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_entry_json_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    store = FileStore(tmp_path, durability="none")
    entry_id = trashed(store, "k", "hi")
    path = tmp_path / ".trash" / entry_id / "entry.json"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    assert store.trash() == []  # never blocks on the FIFO
    with pytest.raises(EventLogError):
        store.restore(entry_id)


# -- restore never overwrites -------------------------------------------------------------------


def test_restore_refuses_a_key_that_exists_again(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    entry_id = trashed(store, "k", "old")
    with store.session("k") as w:
        w.append_message("user", "new")
    with pytest.raises(InvalidEventError, match="exists again"):
        store.restore(entry_id)
    assert contents(store, "k") == ["new"]
    assert [e.id for e in store.trash()] == [entry_id]


def test_restore_never_renames_over_a_log_created_after_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, durability="none")
    entry_id = trashed(store, "k", "old")
    other = FileStore(tmp_path, durability="none")
    writer = other.session("k")  # created between the check and the move
    writer.append_message("user", "new")
    monkeypatch.setattr(FileStore, "exists", lambda self, key: False)
    with pytest.raises(InvalidEventError, match="exists again"):
        store.restore(entry_id)
    writer.append_message("user", "still acknowledged")
    writer.close()
    monkeypatch.undo()
    assert contents(store, "k") == ["new", "still acknowledged"]
    assert [e.id for e in store.trash()] == [entry_id]
    assert FileStore(tmp_path).trash()[0].id == entry_id


def _restore_in_child(root: str, entry_id: str, start: Any, out: Any) -> None:
    store = FileStore(root, durability="none")
    start.wait()
    try:
        out.put((entry_id, store.restore(entry_id)))
    except EventLogError as exc:
        out.put((entry_id, type(exc).__name__))


def test_two_processes_restoring_one_key_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for trial in range(8):
        root = tmp_path / str(trial)
        store = FileStore(root, durability="none")
        first = trashed(store, "k", "first")
        second = trashed(store, "k", "second")
        start, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_restore_in_child, args=(str(root), e, start, out))
            for e in (first, second)
        ]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(30)
        results = dict(out.get(timeout=5) for _ in procs)
        assert sorted(results.values()) == ["InvalidEventError", "k"]
        winner = next(e for e, r in results.items() if r == "k")
        loser = first if winner == second else second
        assert contents(store, "k") == ["first" if winner == first else "second"]
        assert [e.id for e in store.trash()] == [loser]  # the other conversation is kept


# -- a kill between any two steps ----------------------------------------------------------------


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs."""


@contextmanager
def kill_at(step: int) -> Iterator[list[int]]:
    """Raise Killed at the ``step``-th file operation of the trash code (0-based)."""
    calls = [0]
    saved: dict[str, Callable[..., Any]] = {}

    def wrap(name: str) -> None:
        real = getattr(_filetrash, name)
        saved[name] = real

        def op(*args: Any, **kwargs: Any) -> Any:
            if calls[0] == step:
                calls[0] += 1
                raise Killed
            calls[0] += 1
            return real(*args, **kwargs)

        setattr(_filetrash, name, op)

    for name in ("place", "remove", "_rename", "write_new", "fsync_dir", "append_private"):
        wrap(name)
    try:
        yield calls
    finally:
        for name, real in saved.items():
            setattr(_filetrash, name, real)


def _with_side_files(store: FileStore, key: str) -> None:
    with store.session(key) as w:
        w.append_message("user", "kept")
    with open(store.path_for(key), "ab") as f:
        f.write(b'{"torn')
    store.session(key).close()  # the torn tail goes to quarantine
    store.put_snapshot(key, b"derived")


def test_a_kill_at_any_step_of_a_restore_is_completed_after(tmp_path: Path) -> None:
    step = 0
    while True:
        root = tmp_path / str(step)
        store = FileStore(root, durability="none")
        _with_side_files(store, "k")
        quarantined = (root / store.quarantine_path("k").name).read_bytes()
        store.cleanup(0)
        (entry,) = store.trash()
        with kill_at(step) as calls:
            try:
                store.restore(entry.id)
                finished = True
            except Killed:
                finished = False
        after = FileStore(root, durability="none")  # a new process
        listed = after.trash()
        assert all(e.id == entry.id for e in listed)
        if listed:  # killed before the log was placed: still a plain entry
            assert not after.exists("k")
        assert after.restore(entry.id) == "k" if listed or not finished else True
        assert after.trash() == []
        assert contents(after, "k") == ["kept"]
        assert (root / after.quarantine_path("k").name).read_bytes().startswith(quarantined)
        assert not (root / ".trash" / entry.id).exists()
        if finished:
            assert calls[0] <= step
            break
        step += 1
    assert step > 4


def test_a_kill_at_any_step_of_a_trash_loses_nothing(tmp_path: Path) -> None:
    step = 0
    while True:
        root = tmp_path / str(step)
        store = FileStore(root, durability="none")
        _with_side_files(store, "k")
        with kill_at(step) as calls:
            try:
                store.cleanup(0)
                finished = True
            except Killed:
                finished = False
        after = FileStore(root, durability="none")
        after.cleanup(10**9)  # takes the lock: settles what the kill left
        entries = after.trash()
        if after.exists("k"):
            assert entries == [] and contents(after, "k") == ["kept"]
        else:
            (entry,) = entries
            assert after.restore(entry.id) == "k" and contents(after, "k") == ["kept"]
        assert after.quarantine_path("k").exists()
        assert [p.name for p in (root / ".trash").iterdir() if p.name != ".lock"] == []
        if finished:
            assert calls[0] <= step
            break
        step += 1
    assert step > 2


# -- full disk and bad logs in store-wide operations -------------------------------------------


@contextmanager
def disk_full_after(writes: int) -> Iterator[None]:
    real = _safeio._write
    count = [0]

    def write(fd: int, data: Any) -> int:
        count[0] += 1
        if count[0] > writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    _safeio._write = write
    try:
        yield
    finally:
        _safeio._write = real


def test_cleanup_on_a_full_disk_leaves_no_empty_entry(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    for key in ("a", "b"):
        with store.session(key) as w:
            w.append_message("user", key)
    with disk_full_after(0):
        report = store.cleanup(0)
    assert report.trashed == [] and sorted(report.problems) == ["a", "b"]
    assert "No space left on device" in report.problems["a"]
    assert [p.name for p in (tmp_path / ".trash").iterdir()] == [".lock"]
    assert contents(store, "a") == ["a"] and store.trash() == []


def test_quarantine_on_a_full_disk_is_a_storage_error_and_no_empty_file(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        w.append_message("user", "x")
    with open(store.path_for("k"), "ab") as f:
        f.write(b'{"torn')
    with disk_full_after(0), pytest.raises(StorageError) as info:
        store.session("k")
    assert str(store.quarantine_path("k")) in str(info.value)
    assert not store.quarantine_path("k").exists()
    assert store.session("k").state.message_dicts[0]["content"] == "x"  # later, it works
    assert store.quarantine_path("k").exists()


BAD_LOGS: dict[str, bytes] = {
    "empty": b"",
    "torn header": b'{"type":"header","se',
    "not json": b"hello\n",
}


@pytest.mark.parametrize("bad", BAD_LOGS)
def test_store_wide_operations_report_a_bad_log_and_go_on(tmp_path: Path, bad: str) -> None:
    store = FileStore(tmp_path, durability="none")
    for key in ("a", "b"):
        with store.session(key) as w:
            w.append_message("user", key)
    store.path_for("bad").write_bytes(BAD_LOGS[bad])
    assert store.latest_session("") in ("a", "b")
    assert sorted(store.mark_idle(0)) == ["a", "b"]
    report = store.cleanup(0)
    assert sorted(report.trashed) == ["a", "b"]
    if bad != "empty" or "bad" in report.problems:
        assert "bad" in report.problems and not report.ok
    assert sorted(e.key for e in store.trash()) == ["a", "b"]


def test_a_foreign_header_is_listed_once_and_verify_reports_it(tmp_path: Path) -> None:
    from sessionledger import replay

    store = FileStore(tmp_path, durability="none")
    with store.session("a") as w:
        w.append_message("user", "a")
    # The same log under a name that is not its key's: a copy someone made.
    (tmp_path / "copy~of~a.jsonl").write_bytes(store.read_bytes("a"))
    (tmp_path / "B.jsonl").write_bytes(store.read_bytes("a"))
    assert store.keys() == ["a"]
    stray = replay.verify(store)
    assert sorted(Path(p.file).name for p in stray.problems) == ["B.jsonl", "copy~of~a.jsonl"]
    store.path_for("c").write_bytes(store.read_bytes("a"))  # c.jsonl says it is "a"
    assert store.keys() == ["a", "c"]
    report = replay.verify(store)
    assert any(p.file == str(store.path_for("c")) and "'a'" in p.what for p in report.problems), (
        report.problems
    )


def test_restore_of_an_unknown_id_is_session_not_found(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with pytest.raises(SessionNotFoundError):
        store.restore("20260101T000000000000-none")

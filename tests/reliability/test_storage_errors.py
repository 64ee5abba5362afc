"""Every ``OSError`` from a path the file store touches is a ``StorageError`` naming the file,
and a failed write of a side file leaves nothing behind (faults injected at the OS calls)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessionledger import projections
from sessionledger.eventlog import FileStore, MemoryStore, StorageError, _fileio, _safeio


def failing(code: int) -> Callable[..., Any]:
    def fail(*_args: object, **_kwargs: object) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        w.append_message("user", "hello")
    return store


def test_a_read_error_names_the_log(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "pread", failing(errno.EIO))
    # exists() is a stat and reads nothing, so a read error cannot reach it.
    for op in (lambda: store.load("k"), lambda: store.read_bytes("k")):
        with pytest.raises(StorageError) as info:
            op()
        assert info.value.path == str(store.path_for("k"))
        assert "Input/output error" in str(info.value)


def test_a_listing_error_names_the_directory(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "scandir", failing(errno.EIO))
    for op in (store.keys, lambda: projections.list_sessions(store)):
        with pytest.raises(StorageError) as info:
            op()
        assert info.value.path == str(store.root)


def test_a_remove_error_names_the_file(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "unlink", failing(errno.EROFS))
    with pytest.raises(StorageError, match="Read-only file system"):
        store.delete("k")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EDQUOT])
def test_a_full_disk_while_writing_a_view_leaves_nothing(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    monkeypatch.setattr(_safeio, "_write", failing(code))
    with pytest.raises(StorageError) as info:
        projections.write_snapshot(store, "k")
    assert os.strerror(code) in str(info.value)
    with pytest.raises(StorageError):
        projections.rebuild_catalog(store)
    monkeypatch.undo()
    assert not store.snapshot_path("k").exists()
    assert list((store.root / _safeio.TEMP_DIR).iterdir()) == []
    assert [p.name for p in store.root.iterdir() if p.stat().st_size == 0] == []
    projections.write_snapshot(store, "k")  # the disk is back
    assert store.snapshot_path("k").exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_listing_stands_when_the_catalog_cannot_be_stored(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """The catalog is derived: a full disk or a read-only store fails its write, not the
    listing (sessions and conversations, whole and paged), and leaves the stored one as it was."""
    store.new_session("k")
    store.session("k").append_message("user", "again")
    rows, convs = projections.list_sessions(store), projections.list_conversations(store)
    stored = (store.root / ".catalog").read_bytes()
    store.session("j").append_message("user", "new session: the catalog is written again")
    monkeypatch.setattr(_safeio, "_write", failing(code))
    for _ in range(2):
        fresh = FileStore(store.root, durability="none")
        got = projections.list_sessions(fresh)
        assert [r.key for r in got] == ["j", "k"] and got[1] == rows[0]
        assert projections.list_conversations(fresh)[1:] == convs
        assert projections.list_conversations(FileStore(store.root), limit=1, offset=1) == convs[:1]
    assert (store.root / ".catalog").read_bytes() == stored
    assert list((store.root / _safeio.TEMP_DIR).iterdir()) == []
    with pytest.raises(StorageError):
        projections.rebuild_catalog(store)  # asked for: it says it could not
    monkeypatch.undo()
    assert [r.key for r in projections.list_sessions(FileStore(store.root))] == ["j", "k"]
    assert (store.root / ".catalog").read_bytes() != stored


def test_a_stat_error_on_an_index_file_names_it(tmp_path: Path) -> None:
    from sessionledger.eventlog._fileindex import FileIndexFiles

    files = FileIndexFiles(
        str(tmp_path / "k.jsonl"), str(tmp_path / "k"), str(tmp_path / "k.jsonl")
    )
    (tmp_path / "k.index").write_bytes(b"x" * 64)
    assert files.size("index") == 64
    (tmp_path / "k.ids").write_bytes(b"")
    real_stat = os.stat

    def failing_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).endswith(".index"):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "stat", failing_stat)
        with pytest.raises(StorageError, match=r"k\.index"):
            files.size("index")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_new_session_whose_header_the_disk_refuses_leaves_no_log(
    store: FileStore, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """The create fails with the library's error, and the empty file it made is gone: keys(),
    exists() and the listings agree that there is no such session; it can be created later."""
    monkeypatch.setattr(_fileio, "_write", failing(code))
    with pytest.raises(StorageError) as info:
        store.session("new")
    assert os.strerror(code) in str(info.value)
    monkeypatch.undo()
    assert not store.path_for("new").exists()
    fresh = FileStore(store.root, durability="none")
    assert sorted(fresh.keys()) == ["k"] and not fresh.exists("new")
    assert [r.key for r in projections.list_sessions(fresh)] == ["k"]
    with fresh.session("new") as w:  # the disk is back
        w.append_message("user", "now")
    assert fresh.load("new").state.total_messages == 1


def test_a_memory_session_that_cannot_start_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory store forgets a session whose header could not be made (here its sealing
    fails), as the file store unlinks the empty file."""
    store = MemoryStore()
    store.session("k").append_message("user", "hello")

    def refuse(header: object) -> object:
        raise StorageError("/keys/new.key", "write", "No space left on device")

    monkeypatch.setattr(store._privacy, "seal_new_header", refuse)
    with pytest.raises(StorageError):
        store.session("new")
    monkeypatch.undo()
    assert sorted(store.keys()) == ["k"] and not store.exists("new")
    store.session("new").append_message("user", "now")
    assert sorted(store.keys()) == ["k", "new"]


def test_a_failed_memory_import_never_removes_a_session_created_once_it_let_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An import into a new key fails (its quarantine write here). The log it created is
    forgotten before the lock is let go: a peer that creates the key right after keeps it."""
    from sessionledger.eventlog import _memstore

    source = MemoryStore()
    source.session("k").append_message("user", "imported")
    data = source.read_bytes("k")
    store = MemoryStore()
    backend = store._backend

    def refuse(*args: object, **kw: object) -> str:
        raise StorageError("memory:k", "quarantine", "No space left on device")

    monkeypatch.setattr(backend, "quarantine", refuse)
    real_close = _memstore._MemoryIO.close
    done: list[bool] = []

    def close_then_a_peer(io: _memstore._MemoryIO) -> None:
        real_close(io)
        if not done:
            done.append(True)
            store.session("k").append_message("user", "mine")  # another thread, say

    monkeypatch.setattr(_memstore._MemoryIO, "close", close_then_a_peer)
    with pytest.raises(StorageError, match="quarantine"):
        store.import_bytes("k", data, rejected=[("bad", 2, 0, b"x\n")])
    monkeypatch.undo()
    assert done
    assert [m.message["content"] for m in store.load("k").state.messages] == ["mine"]

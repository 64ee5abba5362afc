"""Files that are not regular files (FIFO, directory, socket, symlink) at every path the file
store opens: a clear library error or a skip with a report, never a hang, never an ``OSError``.

Each operation runs in a thread with a deadline: a blocking ``open`` of a FIFO would hang it.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sessionledger import projections, replay
from sessionledger.eventlog import EventLogError, FileStore
from sessionledger.eventlog._safeio import open_regular, read_bytes

KINDS = ["fifo", "directory", "socket", "symlink to fifo", "dangling symlink"]


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Sockets a test planted, closed at its end."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def plant(path: Path, kind: str, sockets: list[socket.socket]) -> None:
    """Put a non-regular file of ``kind`` at ``path``."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sockets.append(sock)
        short = tempfile.mkdtemp(prefix="sl")  # a socket path must be short; move it after
        sock.bind(os.path.join(short, "s"))
        os.rename(os.path.join(short, "s"), path)
        os.rmdir(short)
    elif kind == "symlink to fifo":
        target = path.with_name("elsewhere.fifo")
        os.mkfifo(target)
        path.symlink_to(target)
    else:
        path.symlink_to(path.with_name("nowhere"))


def run(op: Callable[[], object], seconds: float = 10.0) -> BaseException | None:
    """Run ``op``; return what it raised (None if nothing). Fail if it does not finish."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            op()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{op} hangs"
    return outcome[0]


def assert_clear(error: BaseException | None) -> None:
    if error is not None:
        assert isinstance(error, EventLogError), f"{type(error).__name__}: {error}"


def make_store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path, durability="none")
    with store.session("good") as w:
        w.append_message("user", "hello")
    return store


def store_wide(store: FileStore) -> list[Callable[[], object]]:
    return [
        store.keys,
        lambda: projections.list_sessions(store),
        lambda: replay.verify(store),
        lambda: replay.recover(store),
        store.trash,
        lambda: store.mark_idle(0),
        lambda: store.latest_session(""),
        lambda: store.cleanup(0),  # last: it trashes the good session
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_at_a_log_path(tmp_path: Path, kind: str, sockets: list[socket.socket]) -> None:
    store = make_store(tmp_path)
    plant(store.path_for("bad"), kind, sockets)
    for op in [
        lambda: store.exists("bad"),
        lambda: store.load("bad"),
        lambda: store.session("bad"),
        lambda: store.read_bytes("bad"),
        lambda: store.delete("bad"),
        lambda: replay.verify_session(store, "bad"),
    ]:
        assert_clear(run(op))
    assert store.load("good").state.message_dicts[0]["content"] == "hello"
    for op in store_wide(store):
        assert_clear(run(op))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["snapshot", "quarantine", "catalog", "index", "ids"])
def test_at_a_view_or_side_path(
    tmp_path: Path, kind: str, where: str, sockets: list[socket.socket]
) -> None:
    store = make_store(tmp_path)
    if where in ("index", "ids"):
        projections.write_snapshot(store, "good")  # so that opening reads the record files
        assert store.path_for("good").with_suffix(f".{where}").exists()
    # A torn tail makes opening write to the quarantine.
    with open(store.path_for("good"), "ab") as f:
        f.write(b'{"type":"mess')
    path = {
        "snapshot": store.snapshot_path("good"),
        "quarantine": store.quarantine_path("good"),
        "catalog": tmp_path / ".catalog",
        # The index snapshot's record files beside the log.
        "index": store.path_for("good").with_suffix(".index"),
        "ids": store.path_for("good").with_suffix(".ids"),
    }[where]
    plant(path, kind, sockets)
    for op in [
        lambda: store.load("good"),
        lambda: projections.list_sessions(store),
        lambda: replay.verify(store),
        lambda: replay.recover(store),
        lambda: store.session("good"),
        store.trash,
    ]:
        assert_clear(run(op))


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_the_one_opener_refuses_without_blocking(
    tmp_path: Path, kind: str, sockets: list[socket.socket]
) -> None:
    path = tmp_path / "x"
    plant(path, kind, sockets)
    for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND):
        error = run(lambda f=flags: open_regular(str(path), f, action="open"))  # type: ignore[misc]
        assert isinstance(error, EventLogError) and "not a regular file" in str(error)
        assert str(path) in str(error)
    assert isinstance(run(lambda: read_bytes(str(path))), EventLogError)


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink to fifo"])
def test_import_and_export_never_block_on_a_fifo(
    tmp_path: Path, kind: str, sockets: list[socket.socket]
) -> None:
    store = make_store(tmp_path / "store")
    source = tmp_path / "in" / "k.jsonl"
    source.parent.mkdir()
    plant(source, kind, sockets)
    for importer in (replay.import_log, replay.import_nanobot, replay.import_session_json):
        error = run(lambda imp=importer: imp(store, source))  # type: ignore[misc]
        assert_clear(error)
    out = tmp_path / "out"
    out.mkdir()
    plant(out / store.path_for("good").name, kind, sockets)
    error = run(lambda: replay.export_store(store, out))
    assert_clear(error)

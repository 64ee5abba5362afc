"""The file store at its edges: names, permissions, symlinks, foreign files, corruption, locks."""

from __future__ import annotations

import base64
import fcntl
import os
import signal
import stat
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from threaded import run_threads

from sessionledger.eventlog import (
    CorruptLogError,
    FileStore,
    InvalidEventError,
    LockedError,
    MessageAppended,
    NotALogError,
    SessionNotFoundError,
    StorageError,
    UnknownEvent,
    UnsafePathError,
    decode_log,
    verify_chain,
)
from sessionledger.eventlog._filebackend import FileBackend
from sessionledger.eventlog.codec import chain_hash

ROOT_DIR = Path(__file__).resolve().parents[2]

KEYS = [
    "a:b",
    "a_b",
    "../x",
    "..",
    "/",
    "/etc/passwd",
    "nul\x00byte",
    "k" * 4096,
    "k" * 4095 + "j",
    "\u6771\u4eac:\U0001f338",
    "Case",
    "case",
    "CASE",
    unicodedata.normalize("NFC", "caf\u00e9"),
    unicodedata.normalize("NFD", "caf\u00e9"),
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def store(root: Path) -> Iterator[FileStore]:
    with FileStore(root, durability="none") as store:
        yield store


def quarantine_records(store: FileStore, key: str) -> list[dict[str, Any]]:
    lines = store.quarantine_path(key).read_bytes().splitlines()
    return [msgspec.json.decode(line) for line in lines]


def quarantined_bytes(record: dict[str, Any]) -> bytes:
    if "text" in record:
        text: str = record["text"]
        return text.encode("utf-8")
    return base64.b64decode(record["base64"])


# -- names ------------------------------------------------------------------------------------


def test_every_key_gets_its_own_file_inside_root(root: Path, store: FileStore) -> None:
    assert len({unicodedata.normalize("NFC", k) for k in KEYS}) < len(KEYS)  # NFC/NFD differ
    for i, key in enumerate(KEYS):
        store.session(key).append_message("user", str(i))
    store.close()
    files = sorted(p.name for p in root.iterdir())
    assert len(files) == len(KEYS)
    assert all(p.is_file() and not p.is_symlink() for p in root.iterdir())
    assert sorted(p.name for p in root.parent.iterdir()) == ["sessions"]  # nothing escaped
    for name in files:
        assert len(name.encode()) <= 255 and name.endswith(".jsonl")
    reopened = FileStore(root)
    assert reopened.keys() == sorted(KEYS)
    for i, key in enumerate(KEYS):
        assert reopened.path_for(key).parent == root
        assert reopened.load(key).state.message_dicts[0]["content"] == str(i)
        assert reopened.load(key).header.key == key


def test_hashed_names_are_listed_from_headers_of_any_size(root: Path, store: FileStore) -> None:
    long_key = "x" * 300  # too long for a reversible name: keys() reads the header
    store.session(long_key, metadata={"big": "y" * 200_000}).append_message("user", "x")
    store.session("short").append_message("user", "y")
    assert "~" in store.path_for(long_key).name
    assert FileStore(root).keys() == ["short", long_key]


def test_store_directory_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UnsafePathError):
        FileStore(link)


@pytest.mark.parametrize("target", ["dir", "file", "missing"])
def test_store_directory_symlink_is_refused_whatever_it_points_at(
    tmp_path: Path, target: str
) -> None:
    real = tmp_path / "real"
    if target == "dir":
        real.mkdir()
    elif target == "file":
        real.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(real)
    for given in (link, str(link)):
        with pytest.raises(UnsafePathError, match="the store directory is a symlink"):
            FileStore(given)
    assert link.is_symlink()
    assert target != "missing" or not real.exists()


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_store_directory_that_is_not_a_directory_is_refused(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "sessions"
    if kind == "file":
        root.write_bytes(b"x")
    else:
        os.mkfifo(root)
    with pytest.raises(NotALogError, match="it is a file, not a store directory") as info:
        FileStore(root)
    assert info.value.path == str(root)
    assert not root.is_dir()


def test_store_directory_already_there_is_used_as_it_is(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    root.mkdir()
    os.chmod(root, 0o750)
    store = FileStore(root)
    assert store.root == root
    assert stat.S_IMODE(root.stat().st_mode) == 0o750  # only a directory it creates is 0700
    store.close()


def test_store_directory_is_created_0700_from_a_path_or_a_str(tmp_path: Path) -> None:
    for given in (tmp_path / "a" / "b", str(tmp_path / "c" / "d")):
        store = FileStore(given)
        assert store.root == Path(given)
        assert type(store.root) is type(Path())
        assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
        store.close()


def test_store_directory_in_home_is_expanded_from_a_path_or_a_str(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for given in (Path("~/s1"), "~/s2"):
        store = FileStore(given)
        assert store.root == tmp_path / str(given)[2:]
        assert store.root.is_dir()
        assert store.path_for("k").parent == store.root
        store.close()


def test_store_directory_under_a_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(StorageError, match="create the store directory"):
        FileStore(tmp_path / "file" / "sessions")


@pytest.mark.parametrize("name", ["a\x00b", "a\ud800b"])
def test_store_directory_no_file_can_be_named_is_the_librarys_error(
    tmp_path: Path, name: str
) -> None:
    """A root with a NUL byte or a lone surrogate is refused with the library's error (a
    ValueError still) naming it, not the ValueError ``os`` raises."""
    for given in (tmp_path / name, str(tmp_path / name)):
        with pytest.raises(InvalidEventError, match="is not a usable path") as info:
            FileStore(given)
        assert repr(str(tmp_path / name)) in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", [".", "sub", "sub/deeper", "absolute"])
def test_file_paths_are_those_of_the_root_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    given = str(tmp_path / "abs") if where == "absolute" else where
    store = FileStore(given)
    files = store._files
    for key in ("a:b", "x" * 300, "\u6771\u4eac", "a:b", "other"):
        log = store.path_for(key)
        assert log.parent == store.root
        assert files.describe(key) == str(log)
        assert files.index_paths(key).log == str(log)
        assert files.index_paths(key).stem == str(store.root / log.name[: -len(".jsonl")])
    with store.session("k") as w:
        w.append_message("user", "x")
    store.write_snapshot("k")
    assert files.snapshot_bytes("k") == store.snapshot_path("k").read_bytes()
    assert store.load("k").path == str(store.path_for("k")) == files.describe("k")
    assert store.exists("k") and not store.exists("k2")
    store.close()


def test_the_root_directory_prefixes_its_file_paths_once() -> None:
    # The backend of a store at "/" (built alone: nothing is read or written there).
    backend = FileBackend(
        Path("/"), durable=False, lock_timeout=1, max_open_files=4, hash_key=b"", segment_bytes=0
    )
    assert backend.describe("k") == str(Path("/") / "k.jsonl") == "/k.jsonl"
    assert backend.index_paths("k").stem == "/k"
    backend.close()


def test_a_bad_key_is_refused_by_every_path_after_a_good_one(store: FileStore) -> None:
    files = store._files
    for good in ("", "a"):
        if good:
            assert files.describe(good).endswith("a.jsonl")
        for bad in ("", 3, "\ud800"):
            with pytest.raises(InvalidEventError):
                files.describe(bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidEventError):
                store.load(bad)  # type: ignore[arg-type]


# -- permissions ------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o000, 0o077, 0o022])
def test_files_0600_and_directory_0700_whatever_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        root = tmp_path / "deep" / "sessions"
        store = FileStore(root, durability="always")
        s = store.session("k")
        s.append_message("user", "x")
        s.close()
        # A torn tail makes a quarantine file beside the log.
        with open(store.path_for("k"), "ab") as f:
            f.write(b'{"type":"message"')
        store.session("k").close()
        store.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    made = sorted(root.iterdir())
    assert [p.suffix for p in made] == [".jsonl", ".quarantine"]
    for path in made:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


# -- symlinks and foreign files ---------------------------------------------------------------


def test_symlink_at_a_log_path_is_refused(tmp_path: Path, store: FileStore) -> None:
    target = tmp_path / "precious.txt"
    target.write_bytes(b"do not touch\n")
    link = store.path_for("k")
    link.symlink_to(target)
    with pytest.raises(UnsafePathError):
        store.session("k")
    with pytest.raises(UnsafePathError):
        store.load("k")
    with pytest.raises(UnsafePathError):
        store.delete("k")
    assert link.is_symlink()
    assert target.read_bytes() == b"do not touch\n"
    assert stat.S_IMODE(target.stat().st_mode) != 0 and target.stat().st_size == 13


def test_dangling_symlink_is_refused_and_not_created_through(
    tmp_path: Path, store: FileStore
) -> None:
    target = tmp_path / "would-be-created"
    store.path_for("k").symlink_to(target)
    with pytest.raises(UnsafePathError):
        store.session("k")
    assert not target.exists()


def test_symlink_at_the_quarantine_path_is_refused(tmp_path: Path, store: FileStore) -> None:
    store.session("k").append_message("user", "x")
    store.close()
    with open(store.path_for("k"), "ab") as f:
        f.write(b'{"type":"mess')
    target = tmp_path / "precious.txt"
    target.write_bytes(b"keep")
    store.quarantine_path("k").symlink_to(target)
    with pytest.raises(UnsafePathError):
        FileStore(store.root).session("k")
    assert target.read_bytes() == b"keep"


def test_directory_at_a_log_path_is_refused(store: FileStore) -> None:
    store.path_for("k").mkdir()
    for call in (
        lambda: store.session("k"),
        lambda: store.load("k"),
        lambda: store.delete("k"),
    ):
        with pytest.raises(UnsafePathError, match="not a regular file"):
            call()
    assert store.keys() == []
    assert store.path_for("k").is_dir()


def test_symlinked_log_is_not_listed(tmp_path: Path, store: FileStore) -> None:
    store.session("real").append_message("user", "x")
    store.path_for("alias").symlink_to(store.path_for("real"))
    assert store.keys() == ["real"]


def test_unknown_event_from_a_newer_writer_is_kept(root: Path, store: FileStore) -> None:
    data = write_messages(store, "k", 1)
    head = decode_log(data).head
    body = b'{"type":"reaction","seq":2,"ts":"2026-11-25T10:00:00Z","id":"r","emoji":"+1"'
    line = body + b',"h":"' + chain_hash(head, body).encode() + b'"}\n'
    store.path_for("k").write_bytes(data + line)
    fresh = FileStore(root, durability="none")
    s = fresh.session("k")
    assert s.state.unknown_events == 1 and s.seq == 2
    assert isinstance(fresh.load("k").events[-1], UnknownEvent)
    assert s.append_message("user", "next") == 3
    assert store.path_for("k").read_bytes().startswith(data + line)
    fresh.close()


@pytest.mark.parametrize(
    "content",
    [
        b"hello world\n",
        b"hello",
        b'{"_type": "metadata", "key": "k", "created_at": "2026-01-01"}\n{"role": "user"}\n',
        b"\x00\xff\xfe binary",
        b'{"type":"header","key":"k"}\n',
        b"\n\n",
    ],
)
def test_foreign_file_is_refused_and_left_untouched(store: FileStore, content: bytes) -> None:
    path = store.path_for("k")
    path.write_bytes(content)
    os.chmod(path, 0o644)
    with pytest.raises(NotALogError) as info:
        store.session("k")
    assert info.value.path == str(path)
    with pytest.raises(NotALogError):
        store.load("k")
    assert path.read_bytes() == content
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not store.quarantine_path("k").exists()


def test_another_sessions_log_under_this_name_is_refused(store: FileStore) -> None:
    store.session("a").append_message("user", "x")
    store.close()
    data = store.path_for("a").read_bytes()
    store.path_for("b").write_bytes(data)
    other = FileStore(store.root)
    with pytest.raises(NotALogError, match="'a'"):
        other.session("b")
    assert store.path_for("b").read_bytes() == data


# -- corruption and torn tails ----------------------------------------------------------------


def write_messages(store: FileStore, key: str, n: int) -> bytes:
    s = store.session(key)
    for i in range(n):
        s.append_message("user", f"message {i}")
    s.close()
    return store.path_for(key).read_bytes()


def test_corruption_in_the_middle(root: Path, store: FileStore) -> None:
    data = write_messages(store, "k", 5)
    lines = data.splitlines(keepends=True)
    bad = bytearray(data)
    bad[len(lines[0]) + len(lines[1]) + 30] ^= 0x01  # inside line 3 (the second message)
    path = store.path_for("k")
    path.write_bytes(bytes(bad))
    fresh = FileStore(root)
    with pytest.raises(CorruptLogError) as info:
        fresh.session("k")
    assert info.value.path == str(path)
    assert info.value.line == 3
    assert f"line 3 of {path}" in str(info.value)
    with pytest.raises(CorruptLogError):
        fresh.load("k")
    with pytest.raises(CorruptLogError):  # the failed open released its lock: not LockedError
        FileStore(root).session("k")
    loaded = fresh.load("k", prefix=True)
    assert [e.seq for e in loaded.events] == [1]
    assert loaded.bad is not None and loaded.bad.line == 3
    assert loaded.valid_length == len(lines[0]) + len(lines[1])
    assert path.read_bytes() == bytes(bad)
    assert not fresh.quarantine_path("k").exists()
    fresh.close()


def test_torn_tail_is_cut_into_quarantine(root: Path, store: FileStore) -> None:
    data = write_messages(store, "k", 3)
    torn = b'{"type":"message","seq":4,"ts":"2026-\xff'
    path = store.path_for("k")
    path.write_bytes(data + torn)
    loaded = FileStore(root).load("k")  # read-only: reports, cuts nothing
    assert loaded.torn is not None and loaded.torn.data == torn
    assert path.read_bytes() == data + torn
    fresh = FileStore(root)
    s = fresh.session("k")
    report = fresh.open_report("k")
    assert report is not None and report.torn is not None
    assert report.quarantine == str(fresh.quarantine_path("k"))
    assert report.torn.offset == len(data) and report.torn.line == 5
    assert path.read_bytes() == data
    (record,) = quarantine_records(fresh, "k")
    assert quarantined_bytes(record) == torn and "base64" in record
    assert record["offset"] == len(data) and record["line"] == 5 and record["key"] == "k"
    assert s.append_message("user", "after") == 4
    assert verify_chain(path.read_bytes()).problems == []
    fresh.close()


# -- concurrency and locks --------------------------------------------------------------------


@pytest.mark.parametrize(("durability", "threads", "each"), [("batch", 8, 200), ("always", 4, 25)])
def test_threads_append_durably(root: Path, durability: str, threads: int, each: int) -> None:
    store = FileStore(root, durability=durability)
    s = store.session("k")

    def work(n: int) -> None:
        for i in range(each):
            s.append_message("user", f"{n}:{i}")

    run_threads(*(partial(work, n) for n in range(threads)))
    store.close()
    decoded = decode_log(store.path_for("k").read_bytes())
    assert decoded.bad is None and decoded.torn is None
    assert [e.seq for e in decoded.events] == list(range(1, threads * each + 1))
    contents = [e.message["content"] for e in decoded.events if isinstance(e, MessageAppended)]
    assert sorted(contents) == sorted(f"{n}:{i}" for n in range(threads) for i in range(each))


def test_second_store_object_writes_the_same_session(root: Path, store: FileStore) -> None:
    s = store.session("k")
    s.append_message("user", "x")
    other = FileStore(root, durability="none")
    o = other.session("k")
    assert o.append_message("user", "y") == 2
    assert s.append_message("user", "z") == 3  # folds in "y" first
    assert [m["content"] for m in s.state.message_dicts] == ["x", "y", "z"]
    assert other.delete("k")
    with pytest.raises(SessionNotFoundError):  # removed under it: never a write to nowhere
        s.append_message("user", "lost?")
    assert s.closed and not store.exists("k")
    assert store.session("k").append_message("user", "new") == 1
    other.close()


def test_lock_timeout_waits_then_fails(root: Path, store: FileStore) -> None:
    store.session("k").append_message("user", "x")
    other = FileStore(root, durability="none", lock_timeout=0.05)
    w = other.session("k")
    fd = os.open(store.path_for("k"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a write in progress that does not end
        before = store.read_bytes("k")
        started = time.monotonic()
        with pytest.raises(LockedError) as info:
            w.append_message("user", "y")
        assert time.monotonic() - started >= 0.05 and info.value.key == "k"
        assert store.read_bytes("k") == before and w.seq == 1
    finally:
        os.close(fd)
    assert w.append_message("user", "y") == 2


CHILD = """
import fcntl, os, sys, time
from sessionledger.eventlog import FileStore
store = FileStore(sys.argv[1], durability="always")
store.session("k").append_message("user", "from the child")
fd = os.open(store.path_for("k"), os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)  # killed in the middle of a write
os.write(os.open(store.path_for("k"), os.O_WRONLY | os.O_APPEND), b'{"type":"mess')
print("ready", flush=True)
time.sleep(60)
"""


def test_killed_holder_does_not_block(root: Path) -> None:
    root.mkdir(mode=0o700)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)],
        stdout=subprocess.PIPE,
        cwd=ROOT_DIR,
        env={**os.environ, "PYTHONPATH": str(ROOT_DIR)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        store = FileStore(root, durability="none", lock_timeout=0.05)
        with pytest.raises(LockedError):
            store.session("k")
        assert store.writer_lock_held("k")
        store.lock_timeout = 10
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    s = store.session("k")
    assert s.state.message_dicts[0]["content"] == "from the child"
    report = store.open_report("k")  # the dead writer's partial line went to quarantine
    assert report is not None and report.torn is not None and report.quarantine is not None
    assert s.append_message("user", "after the crash") == 2
    store.close()

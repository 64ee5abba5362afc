"""Many writers on one file store: a lock per write, readers that never lock, bounded
descriptors, scoped writers for servers, fork, and a store dropped without ``close()``."""

from __future__ import annotations

import fcntl
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import cast

import anyio
import pytest
from logcheck import contents

from sessionledger import aio, projections, replay
from sessionledger.eventlog import (
    AsyncFileStore,
    FileStore,
    SessionNotFoundError,
    StorageError,
    _fileio,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = "web:alice"


def test_an_uncontended_append_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    reads: list[int] = []
    real = _fileio.FileIO.read_from

    def counting(self: _fileio.FileIO, offset: int) -> bytes:
        reads.append(offset)
        return real(self, offset)

    monkeypatch.setattr(_fileio.FileIO, "read_from", counting)
    for i in range(50):
        w.append_message("user", str(i))
    assert reads == []  # only the lock and an fstat
    other = FileStore(tmp_path, durability="none")
    other.session(KEY).append_message("user", "theirs")
    w.append_message("user", "mine")
    assert len(reads) == 1  # exactly the other writer's bytes, from the known offset
    assert contents(store.read_bytes(KEY))[-2:] == ["theirs", "mine"]
    store.close()
    other.close()


def test_a_writer_waiting_for_the_lock_folds_in_what_others_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another holds the lock, a writer folds in the complete lines already there, so
    that its own hold is short; it stages only once it holds the lock."""
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "mine 1")
    with FileStore(tmp_path, durability="none") as other, other.session(KEY) as theirs:
        for i in range(3):
            theirs.append_message("user", f"theirs {i}")
    holding = threading.Event()
    reads: list[bool] = []
    real = _fileio.FileIO.read_from

    def noting(self: _fileio.FileIO, offset: int) -> bytes:
        reads.append(holding.is_set())
        return real(self, offset)

    monkeypatch.setattr(_fileio.FileIO, "read_from", noting)
    fd = os.open(store.path_for(KEY), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another holder of the log's lock
    holding.set()
    seqs: list[int] = []
    appender = threading.Thread(target=lambda: seqs.append(w.append_message("user", "mine 2")))
    appender.start()
    try:
        deadline = time.monotonic() + 10
        # The read is noted before it is folded in: wait for the fold, not just the read.
        while (not reads or w.seq != 4) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert reads == [True] and w.seq == 4  # folded while the lock was held elsewhere
        assert appender.is_alive()  # and not written
    finally:
        holding.clear()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        appender.join(10)
    assert seqs == [5] and reads == [True]  # nothing left to read under the lock
    assert contents(store.read_bytes(KEY)) == [
        "mine 1",
        "theirs 0",
        "theirs 1",
        "theirs 2",
        "mine 2",
    ]
    store.close()


def test_a_dead_writers_partial_line_found_under_the_lock_is_quarantined(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="always")
    w = store.session(KEY)
    w.append_message("user", "before")
    with open(store.path_for(KEY), "ab") as f:  # what a writer killed mid-write leaves
        f.write(b'{"type":"message","seq":2,"ts":"2026')
    assert w.append_message("user", "after") == 2
    report = store.open_report(KEY)
    assert report is not None and report.torn is not None and report.torn.line == 3
    assert b"incomplete last line" in store.quarantine_path(KEY).read_bytes()
    assert contents(store.read_bytes(KEY)) == ["before", "after"]
    store.close()


def test_reading_never_waits_for_a_writer(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", lock_timeout=0.05)
    with store.session(KEY) as w:
        w.append_message("user", "x")
    fd = os.open(store.path_for(KEY), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a write in progress that never ends
    try:
        started = time.monotonic()
        assert store.load(KEY).state.seq == 1
        assert store.state(KEY).seq == 1
        assert store.exists(KEY) and store.keys() == [KEY]
        assert contents(store.read_bytes(KEY)) == ["x"]
        assert [r.key for r in projections.list_sessions(store)] == [KEY]
        assert replay.verify(store).ok
        assert replay.state_at(store, KEY, seq=1).seq == 1
        assert time.monotonic() - started < 5
    finally:
        os.close(fd)
    store.close()


def test_scoped_writers_from_many_threads(tmp_path: Path) -> None:
    """Each request takes its own writer and closes it; none closes another's."""
    store = FileStore(tmp_path, durability="batch")
    errors: list[BaseException] = []

    def request(n: int) -> None:
        try:
            for turn in range(5):
                with store.session(KEY) as w:
                    w.append_message("user", f"{n}:{turn}")
                    w.append_message("assistant", f"{n}:{turn}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=request, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(contents(store.read_bytes(KEY))) == 200
    store.close()


@pytest.mark.anyio
async def test_scoped_writers_from_many_tasks(tmp_path: Path) -> None:
    store = AsyncFileStore(tmp_path, durability="batch")

    async def request(n: int) -> None:
        for turn in range(5):
            async with store.session(KEY) as w:
                await w.append_message("user", f"{n}:{turn}")

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(request, n)
    assert len(contents(await store.read_bytes(KEY))) == 100
    rows = await aio.list_sessions(store)
    assert [r.key for r in rows] == [KEY] and rows[0].messages == 100
    await store.close()


def test_descriptors_are_bounded_and_reopened(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", max_open_files=4)
    writers = [store.session(f"u:{n}") for n in range(20)]  # all held open at once
    for rounds in range(3):
        for n, w in enumerate(writers):
            w.append_message("user", f"{n}:{rounds}")
            assert store.open_files() <= 4
    other = FileStore(tmp_path, durability="none")
    other.session("u:0").append_message("user", "theirs")
    assert writers[0].append_message("user", "after") == 5  # reopened, caught up
    for n in range(20):
        assert len(contents(store.read_bytes(f"u:{n}"))) == (5 if n == 0 else 3)
    store.close()
    other.close()


def test_a_durable_append_syncs_its_own_pinned_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An "always" append syncs inside its transaction without pinning again: the fsync is
    of that log's open descriptor, pinned (never evicted under it), whatever other sessions
    the store opens meanwhile; a failed fsync still leaves the log as it was."""
    store = FileStore(tmp_path, durability="always", max_open_files=2)
    writers = [store.session(f"d:{n}") for n in range(5)]
    ios = {w.path: cast(_fileio.FileIO, w._log.io) for w in writers}
    synced: list[str] = []
    real = _fileio._fsync

    def checking(fd: int) -> None:
        (io,) = [io for io in ios.values() if io.fd == fd]
        assert io.pinners, "fsync of a descriptor nobody pins"
        assert os.fstat(fd).st_ino == os.stat(io.name).st_ino
        synced.append(io.name)
        real(fd)

    monkeypatch.setattr(_fileio, "_fsync", checking)
    for rounds in range(3):
        for n, w in enumerate(writers):
            assert w.append_message("user", f"{n}:{rounds}") == rounds + 1
            assert store.open_files() <= 2
    assert synced == [w.path for _ in range(3) for w in writers]

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    before = store.read_bytes("d:0")
    monkeypatch.setattr(_fileio, "_fsync", failing)
    with pytest.raises(StorageError) as info:
        writers[0].append_message("user", "lost")
    assert info.value.action == "fsync"
    assert store.read_bytes("d:0") == before  # the line whose fsync failed is cut back
    monkeypatch.setattr(_fileio, "_fsync", real)
    assert writers[0].append_message("user", "kept") == 4
    assert contents(store.read_bytes("d:0")) == ["0:0", "0:1", "0:2", "kept"]
    store.close()


def test_a_deleted_session_is_never_written_to_nowhere(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", max_open_files=1)
    w = store.session(KEY)
    w.append_message("user", "x")
    store.session("other").append_message("user", "evicts the first descriptor")
    FileStore(tmp_path).delete(KEY)
    with pytest.raises(SessionNotFoundError):
        w.append_message("user", "y")
    assert not store.exists(KEY)
    store.close()


def test_a_trashed_session_is_never_written_to_the_trash(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "x")
    other = FileStore(tmp_path, durability="none")
    report = other.cleanup(0, now=store.state(KEY).updated_at.replace(year=2100))
    assert report.trashed == [KEY]
    with pytest.raises(SessionNotFoundError):
        w.append_message("user", "y")
    other.restore(other.trash()[0])
    again = store.session(KEY)
    assert again.append_message("user", "after the restore") == 2
    store.close()
    other.close()


def _fds_to(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            continue
    return count


# Collecting garbage here also finalises what earlier tests leaked (not this test's subject).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_store_dropped_without_close_releases_everything(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="batch")
    w = store.session(KEY)
    w.append_message("user", "x")
    path = store.path_for(KEY)
    assert _fds_to(path) == 1
    del store, w  # never closed, with a writer open
    gc.collect()
    assert _fds_to(path) == 0
    with FileStore(tmp_path, lock_timeout=0) as other:
        assert other.session(KEY).append_message("user", "y") == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_through_its_own_state(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="batch")
    w = store.session(KEY)
    w.append_message("user", "parent 0")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            for i in range(20):
                w.append_message("user", f"child {i}")
            code = 0
        finally:
            os._exit(code)
    for i in range(1, 21):
        w.append_message("user", f"parent {i}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.append_message("user", "parent last")
    got = contents(store.read_bytes(KEY))
    assert len(got) == 42 and got[-1] == "parent last"
    assert [c for c in got if c.startswith("child")] == [f"child {i}" for i in range(20)]
    ids = [e.id for e in store.load(KEY).events]
    assert len(set(ids)) == len(ids)  # the child draws its own event ids, not the parent's
    assert store.load(KEY).state == w.state
    store.close()


MANY_SESSIONS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from sessionledger.eventlog import FileStore, StorageError
store = FileStore(sys.argv[1], durability="none", max_open_files=1000)  # more than allowed
writers = []
for n in range(10_000):
    w = store.session(f"user:{n}")
    w.append_message("user", "hello")
    writers.append(w)
for w in writers[::97]:
    w.append_message("assistant", "again")
assert store.open_files() < 256
hog = []
try:
    while True:
        hog.append(open(sys.argv[1] + "/.changes", "rb"))
except OSError:
    pass
try:
    store.session("one:more")
    for w in writers[:5]:
        w.append_message("user", "after exhaustion")
except StorageError as exc:
    print("storage error:", exc)
else:
    print("no error")
for f in hog:
    f.close()
store.close()
print("ok", len(store.keys()))
"""


def test_ten_thousand_sessions_under_a_small_descriptor_limit(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(MANY_SESSIONS), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "ok 10001" or lines[-1] == "ok 10000", proc.stdout
    # With every descriptor taken by others, the store evicts its own idle ones and goes on;
    # if none are left, it says so with a StorageError, never a raw OSError.
    assert lines[0] == "no error" or lines[0].startswith("storage error:"), proc.stdout
    store = FileStore(tmp_path)
    assert contents(store.read_bytes("user:97")) == ["hello", "again"]
    store.close()

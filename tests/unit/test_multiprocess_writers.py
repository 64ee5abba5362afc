"""Many writers across processes: the flock writer lock, expected_seq, a killed holder, readers.

Each test runs real child processes (``python -c``) on one file store; the parent checks the
log afterwards with the codec. Children use the async API (asyncio) where it matters.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from logcheck import contents as _check

from sessionledger.eventlog import FileStore, LockedError

ROOT = Path(__file__).resolve().parents[2]
KEY = "gateway:1"


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


TAKE_TURNS = """
import sys, anyio
from sessionledger.eventlog import AsyncFileStore

async def main(root: str, name: str) -> None:
    store = AsyncFileStore(root, durability="batch", lock_timeout=30)
    for turn in range(10):
        writer = await store.session("gateway:1")  # waits for the other process's lock
        for i in range(10):
            await writer.append_message("user", f"{name}:{turn}:{i}")
        await writer.close()
    await store.close()

anyio.run(main, sys.argv[1], sys.argv[2])
"""


def test_two_processes_take_turns_under_the_lock(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    FileStore(root).close()
    procs = [_spawn(TAKE_TURNS, root, name) for name in ("a", "b")]
    for proc in procs:
        _finish(proc)
    contents = _check(FileStore(root).read_bytes(KEY))
    expected = [f"{n}:{t}:{i}" for n in "ab" for t in range(10) for i in range(10)]
    assert sorted(contents) == sorted(expected)
    for name in "ab":  # each process's appends keep their order
        mine = [c for c in contents if c.startswith(name)]
        assert mine == [c for c in expected if c.startswith(name)]


OPTIMISTIC = """
import sys
from sessionledger.eventlog import ConflictError, FileStore

root, name = sys.argv[1], sys.argv[2]
store = FileStore(root, durability="none", lock_timeout=30)
done = conflicts = 0
while done < 30:
    seen = store.load("gateway:1").state.seq  # read without the lock
    writer = store.session("gateway:1")
    try:
        writer.append_message("user", f"{name}:{done}", expected_seq=seen)
        done += 1
    except ConflictError as exc:
        assert exc.expected == seen and exc.actual > seen
        conflicts += 1
    writer.close()
print(conflicts)
"""


def test_two_processes_with_expected_seq(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    FileStore(root).session(KEY).close()
    procs = [_spawn(OPTIMISTIC, root, name) for name in ("a", "b")]
    conflicts = sum(int(_finish(proc)) for proc in procs)
    contents = _check(FileStore(root).read_bytes(KEY))
    assert sorted(contents) == sorted(f"{n}:{i}" for n in "ab" for i in range(30))
    assert conflicts >= 0  # how many depends on scheduling; none of them wrote anything


HOLD = """
import fcntl, os, sys, time
from sessionledger.eventlog import FileStore
store = FileStore(sys.argv[1])
writer = store.session("gateway:1")
writer.append_message("user", "before the crash")
fd = os.open(store.path_for("gateway:1"), os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)  # stopped in the middle of a write
print("ready", flush=True)
time.sleep(60)
"""


def test_a_lock_held_by_a_killed_process_is_recovered(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    proc = _spawn(HOLD, root)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        store = FileStore(root, lock_timeout=0)
        with pytest.raises(LockedError, match="gateway:1"):
            store.session(KEY)
        started = time.monotonic()
        with pytest.raises(LockedError):
            FileStore(root, lock_timeout=0.2).session(KEY)
        assert time.monotonic() - started >= 0.2  # a bounded wait, then the error
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        writer = FileStore(root, lock_timeout=10).session(KEY)
        assert writer.seq == 1
        writer.append_message("user", "after the crash")
        writer.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    assert _check(FileStore(root).read_bytes(KEY)) == ["before the crash", "after the crash"]


APPEND_FAST = """
import sys, anyio
from sessionledger.eventlog import AsyncFileStore

async def main(root: str) -> None:
    async with AsyncFileStore(root, durability="none") as store:
        writer = await store.session("gateway:1")
        print("ready", flush=True)
        for i in range(3000):
            await writer.append_message("user", "x" * (i % 5000))

anyio.run(main, sys.argv[1])
"""


def test_a_reader_in_another_process_sees_whole_lines(tmp_path: Path) -> None:
    """Lines up to 5 kB cross page boundaries; a reader cut at the last newline always
    decodes a clean, chained, contiguous prefix."""
    root = str(tmp_path / "store")
    proc = _spawn(APPEND_FAST, root)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    path = FileStore(root).path_for(KEY)
    reads = 0
    while proc.poll() is None or reads == 0:
        data = path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        _check(whole)
        reads += 1
    _finish(proc)
    assert len(_check(path.read_bytes())) == 3000

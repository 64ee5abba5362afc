"""replay.recover: torn tails cut into quarantine, live writers refused, crashes recovered."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from replay_sample import KEY, build_sample

from sessionledger import replay
from sessionledger.eventlog import CorruptLogError, FileStore, MemoryStore

WRITER = textwrap.dedent(
    """
    import sys, time
    from sessionledger.eventlog import FileStore
    store = FileStore(sys.argv[1], durability=sys.argv[2])
    s = store.session("chat:1")
    if sys.argv[3] != "hold":
        print("ready", flush=True)
    if sys.argv[3] == "hold":
        # A write in progress: writers hold the log's lock only while they write.
        import fcntl, os
        fd = os.open(store.path_for("chat:1"), os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("ready", flush=True)
        time.sleep(60)
    i = 0
    while True:
        i += 1
        seq = s.append_message("user", "message %d " % i + "x" * (i % 300))
        print(seq, flush=True)
    """
)


def spawn(root: Path, durability: str, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), durability, mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_a_clean_store_recovers_to_itself(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    before = store.read_bytes(KEY)
    report = replay.recover(store)
    assert report.ok and report.checked == 1 and report.tails_cut == []
    assert store.read_bytes(KEY) == before


def test_cuts_at_random_offsets_recover_to_the_whole_lines_before(tmp_path: Path) -> None:
    source = MemoryStore()
    build_sample(source)
    data = source.read_bytes(KEY)
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    rng = random.Random(4)
    store = FileStore(tmp_path, durability="none")
    path = store.path_for(KEY)
    for cut in sorted(rng.sample(range(ends[0] + 1, len(data)), 40)):
        path.write_bytes(data[:cut])
        store.quarantine_path(KEY).unlink(missing_ok=True)
        report = replay.recover(store)
        keep = max(e for e in ends if e <= cut)
        assert report.ok, report.problems
        assert report.tails_cut == ([(KEY, cut - keep)] if cut != keep else [])
        assert path.read_bytes() == data[:keep]
        if cut != keep:
            record = json.loads(store.quarantine_path(KEY).read_text())
            assert record["text"].encode() == data[keep:cut] and record["offset"] == keep
        assert replay.verify(store).ok
        # A second run changes nothing.
        again = replay.recover(store)
        assert again.ok and again.tails_cut == []
        # The recovered log opens and takes new events.
        with store.open(KEY) as s:
            assert s.state.seq == data[:keep].count(b"\n") - 1
            s.append_message("user", "after the crash")
        path.write_bytes(data)


def test_a_torn_header_is_replaced(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    store.path_for("new:1").write_bytes(b'{"type":"header","seq":0,"ts":"20')
    report = replay.recover(store)
    assert report.ok and report.tails_cut == [("new:1", 33)]
    assert store.load("new:1").state.seq == 0


def test_corruption_in_the_middle_is_reported_not_repaired(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    path = store.path_for(KEY)
    data = path.read_bytes().replace(b"Nara deer", b"Nara DEER")
    path.write_bytes(data)
    report = replay.recover(store)
    assert not report.ok
    (problem,) = report.problems
    assert problem.file == str(path) and problem.line == 9 and "hash mismatch" in problem.what
    assert path.read_bytes() == data  # never repaired implicitly
    with pytest.raises(CorruptLogError):
        store.open(KEY)


def test_recover_refuses_a_session_a_live_process_writes(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    proc = spawn(tmp_path, "none", "hold")
    try:
        with pytest.raises(replay.RecoverRefusedError, match=r"chat_3a1\.jsonl"):
            replay.recover(store)
        report = replay.recover(store, skip_locked=True)
        assert not report.ok
        assert report.session("chat:1").locked and report.session(KEY).ok
    finally:
        stop(proc)
    # The kernel drops a dead holder's lock: now it recovers.
    assert replay.recover(store).ok


@pytest.mark.parametrize("durability", ["always", "batch", "none"])
def test_a_writer_killed_mid_append_is_recovered(tmp_path: Path, durability: str) -> None:
    for round_ in range(2):
        proc = spawn(tmp_path, durability, "write")
        assert proc.stdout is not None
        acked = 0
        deadline = time.monotonic() + random.Random(round_).uniform(0.05, 0.3)
        while time.monotonic() < deadline:
            acked = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        stop(proc)
        store = FileStore(tmp_path, durability="none")
        report = replay.recover(store)
        assert report.ok, report.problems
        assert replay.verify(store).ok
        state = store.load("chat:1").state
        # Every acknowledged append survived (a process kill loses no page cache).
        assert state.seq >= acked
        assert [m.seq for m in state.messages] == list(range(1, state.seq + 1))


def test_recover_on_a_memory_store_and_unknown_keys() -> None:
    store = MemoryStore()
    build_sample(store)
    whole = store.read_bytes(KEY)
    store.put_bytes(KEY, whole + b'{"type":"message"')
    report = replay.recover(store)
    assert report.tails_cut == [(KEY, 17)] and store.read_bytes(KEY) == whole
    assert store.quarantined[KEY][0][3] == b'{"type":"message"'
    with pytest.raises(KeyError):
        replay.recover(store, keys=["nobody"])

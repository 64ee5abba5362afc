"""Write leases: a writer keeps its log's lock across a burst of its own appends (see
``eventlog._lease``), and never at the price of a cross-process guarantee: every other writer,
delete, trash, probe and forked child still sees exactly what is on disk."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from logcheck import contents

from sessionledger import replay
from sessionledger.eventlog import (
    FileStore,
    LockedError,
    SessionNotFoundError,
    _fileio,
    _lease,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = "web:alice"


def _wake_the_reaper() -> None:
    """After a test that slowed the reaper's looks: let it look at the usual pace again."""
    with _lease.LEASES.cond:
        _lease.LEASES.cond.notify_all()


@pytest.fixture
def long_leases(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leases that neither age out nor go idle during a test (no timing in the outcome): the
    reaper does not look again for minutes."""
    monkeypatch.setattr(_lease, "LEASE_MAX", 600.0)
    monkeypatch.setattr(_lease, "LEASE_CHECK", 600.0)
    monkeypatch.setattr(_lease, "LEASE_IDLE", 600.0)
    monkeypatch.setattr(_fileio, "LEASE_IDLE", 600.0)
    yield
    monkeypatch.undo()
    _wake_the_reaper()


@pytest.fixture
def slow_leases(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leases that outlive a test's next few steps under any load, and still end by themselves
    (by age, or idle) well within a writer's lock timeout."""
    monkeypatch.setattr(_lease, "LEASE_MAX", 0.3)
    monkeypatch.setattr(_lease, "LEASE_CHECK", 0.1)
    monkeypatch.setattr(_lease, "LEASE_IDLE", 0.1)
    monkeypatch.setattr(_fileio, "LEASE_IDLE", 0.1)
    yield
    monkeypatch.undo()
    _wake_the_reaper()


def _burst_until_leased(store: FileStore, key: str, content: str) -> None:
    w = store.session(key)
    for _ in range(100):
        w.append_message("user", content)
        if _leased(store, key):
            return
    raise AssertionError("no lease after 100 appends in a row")


def _leased(store: FileStore, key: str) -> bool:
    log = store._writers[key]
    return bool(log.io.leased)  # type: ignore[attr-defined]


def test_a_burst_of_appends_takes_the_lock_and_checks_the_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, long_leases: None
) -> None:
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "first")
    w.append_message("user", "second")  # within the idle time of the first: the lease starts
    assert _leased(store, KEY)
    calls: list[str] = []
    real_flock, real_fstat = fcntl.flock, os.fstat

    def flock(fd: int, op: int) -> None:
        calls.append("flock")
        real_flock(fd, op)

    def fstat(fd: int) -> os.stat_result:
        calls.append("fstat")
        return real_fstat(fd)

    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(os, "fstat", fstat)
    for i in range(200):
        w.append_message("user", str(i))
    assert calls == []  # the lock held since a checked transaction: only the writes
    monkeypatch.undo()
    assert contents(store.read_bytes(KEY))[-1] == "199"
    assert store.load(KEY).state == w.state
    store.close()


def test_a_lone_append_does_not_lease(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    time.sleep(0.01)
    w.append_message("user", "one")
    assert not _leased(store, KEY)
    store.close()


def test_batch_durability_never_leases(tmp_path: Path, long_leases: None) -> None:
    store = FileStore(tmp_path, durability="batch")
    w = store.session(KEY)
    for i in range(5):
        w.append_message("user", str(i))
    assert not _leased(store, KEY)
    store.close()


def test_a_failed_transaction_ends_the_lease(tmp_path: Path, long_leases: None) -> None:
    from sessionledger.eventlog import ConflictError

    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "a")
    w.append_message("user", "b")
    assert _leased(store, KEY)
    with pytest.raises(ConflictError):
        w.append_message("user", "c", expected_seq=99)
    assert not _leased(store, KEY)
    assert w.append_message("user", "d") == 3
    store.close()


def test_a_second_store_in_this_process_ends_the_lease_and_the_first_catches_up(
    tmp_path: Path, long_leases: None
) -> None:
    """The lease of the first store would never lapse here; the second does not wait for it,
    and the first then takes the lock anew and folds in the other's line before its own."""
    first = FileStore(tmp_path, durability="none")
    w = first.session(KEY)
    w.append_message("user", "first 1")
    w.append_message("user", "first 2")
    assert _leased(first, KEY)
    second = FileStore(tmp_path, durability="none", lock_timeout=0.5)
    with second.session(KEY) as theirs:
        assert theirs.append_message("user", "second", expected_seq=2) == 3
    assert not _leased(first, KEY)
    assert w.append_message("user", "first 3", expected_seq=3) == 4
    assert contents(first.read_bytes(KEY)) == ["first 1", "first 2", "second", "first 3"]
    assert first.load(KEY).state == w.state
    first.close()
    second.close()


def test_waiting_for_one_log_ends_only_this_process_s_lease_on_that_log(
    tmp_path: Path, long_leases: None
) -> None:
    """A writer of this process that waits for one log's lock, or a probe of it, ends the
    lease on that log; leases on other logs go on (they hold no lock the waiter needs)."""
    store = FileStore(tmp_path, durability="none")
    for key in (KEY, "web:bob", "web:carol"):
        _burst_until_leased(store, key, key)
    second = FileStore(tmp_path, durability="none", lock_timeout=0.5)
    with second.session(KEY) as theirs:
        theirs.append_message("user", "second")
    assert not _leased(store, KEY)
    assert _leased(store, "web:bob") and _leased(store, "web:carol")
    assert not second.writer_lock_held("web:bob")  # our own lease is no other writer
    assert not _leased(store, "web:bob")
    assert _leased(store, "web:carol")
    w = store.session(KEY)
    seq = w.append_message("user", "first again")
    lines = contents(store.read_bytes(KEY))
    assert lines[-2:] == ["second", "first again"] and seq == len(lines)
    second.close()
    store.close()


def test_a_probe_and_recover_in_this_process_do_not_see_our_lease_as_a_writer(
    tmp_path: Path, long_leases: None
) -> None:
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "a")
    w.append_message("user", "b")
    assert _leased(store, KEY)
    assert not store.writer_lock_held(KEY)
    assert replay.recover(store).ok
    assert w.append_message("user", "c") == 3
    store.close()


def test_delete_and_trash_in_this_process_end_the_lease_and_are_noticed(
    tmp_path: Path, long_leases: None
) -> None:
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "a")
    w.append_message("user", "b")
    assert _leased(store, KEY)
    FileStore(tmp_path, lock_timeout=0.5).delete(KEY)
    with pytest.raises(SessionNotFoundError):
        w.append_message("user", "to nowhere")
    w2 = store.session("web:bob")
    w2.append_message("user", "a")
    w2.append_message("user", "b")
    assert _leased(store, "web:bob")
    other = FileStore(tmp_path, durability="none", lock_timeout=0.5)
    report = other.cleanup(0, now=store.state("web:bob").updated_at.replace(year=2100))
    assert report.trashed == ["web:bob"]
    with pytest.raises(SessionNotFoundError):
        w2.append_message("user", "to the trash")
    store.close()
    other.close()


def test_an_evicted_leased_log_unlocks_and_checks_again(tmp_path: Path, long_leases: None) -> None:
    store = FileStore(tmp_path, durability="none", max_open_files=1)
    w = store.session(KEY)
    w.append_message("user", "a")
    w.append_message("user", "b")
    assert _leased(store, KEY)
    store.session("other").append_message("user", "evicts the leased descriptor")
    assert not _leased(store, KEY)
    other = FileStore(tmp_path, durability="none", lock_timeout=0)
    with other.session(KEY) as theirs:  # the lock is free: no wait at all
        theirs.append_message("user", "theirs")
    assert w.append_message("user", "c") == 4
    assert contents(store.read_bytes(KEY)) == ["a", "b", "theirs", "c"]
    store.close()
    other.close()


BURST = """
import sys, time
from sessionledger.eventlog import FileStore
root, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = FileStore(root, durability=sys.argv[4], lock_timeout=30)
w = store.session("web:alice")
print("ready", flush=True)
n, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    w.append_message("user", f"{name} {n}")
    n += 1
store.close()
print(n, flush=True)
"""


@pytest.mark.parametrize("durability", ["none", "always"])
def test_processes_in_bursts_share_one_log_and_nobody_starves(
    tmp_path: Path, durability: str
) -> None:
    """Two processes appending as fast as they can, each holding leases: each gets its turn
    (a lease ends by age, and then leaves a gap), every acknowledged append is there once."""
    FileStore(tmp_path).session(KEY).close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BURST, str(tmp_path), name, "1.5", durability],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("p", "q")
    ]
    counts = {}
    for name, proc in zip(("p", "q"), procs, strict=True):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        counts[name] = int(out.split()[-1])
    got = contents(FileStore(tmp_path).read_bytes(KEY))
    for name, n in counts.items():
        assert n > 0
        assert [c for c in got if c.startswith(name + " ")] == [f"{name} {i}" for i in range(n)]
    assert len(got) == sum(counts.values())


HOLDER = """
import sys
import sessionledger.eventlog._fileio as f, sessionledger.eventlog._lease as l
l.LEASE_MAX = l.LEASE_CHECK = l.LEASE_IDLE = f.LEASE_IDLE = 600.0  # a lease that never lapses by itself
l.somebody_waits = lambda fd: False  # nor for a waiter (the reaper's first look may see one)
from sessionledger.eventlog import FileStore
store = FileStore(sys.argv[1], durability="none")
w = store.session("web:alice")
for i in range(5):
    w.append_message("user", f"holder {i}")
assert store._writers["web:alice"].io.leased
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_process_killed_holding_a_lease_blocks_nobody(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        store = FileStore(tmp_path, durability="none", lock_timeout=0.05)
        assert store.writer_lock_held(KEY)  # a live lease is a held lock
        with pytest.raises(LockedError):
            store.session(KEY).append_message("user", "mine")
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=10)
    store.lock_timeout = 5
    assert store.session(KEY).append_message("user", "mine") == 6
    assert contents(store.read_bytes(KEY)) == [f"holder {i}" for i in range(5)] + ["mine"]
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_lease_never_writes_under_the_parents_lock(
    tmp_path: Path, slow_leases: None
) -> None:
    """The child's descriptor would share the parent's lock: it must drop the lease with it,
    take its own lock and see the parent's lines, and the parent must see the child's."""
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    _burst_until_leased(store, KEY, "parent 0")
    assert _leased(store, KEY)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            assert not store._writers[KEY].io.leased  # type: ignore[attr-defined]
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
    assert got[-1] == "parent last"
    assert [c for c in got if c != "parent 0" and c.startswith("parent")] == [
        f"parent {i}" for i in range(1, 21)
    ] + ["parent last"]
    assert [c for c in got if c.startswith("child")] == [f"child {i}" for i in range(20)]
    assert store.load(KEY).state == w.state
    store.close()


def test_the_reaper_thread_ends_when_no_lease_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow_leases: None
) -> None:
    """A process that leased once and then forks later has no thread of ours alive."""
    monkeypatch.setattr(_lease, "REAPER_LINGER", 0.05)

    def reaper_alive() -> bool:
        return any(t.name == "sessionledger-leases" for t in threading.enumerate())

    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    for _ in range(50):
        w.append_message("user", "burst")
        if _leased(store, KEY):
            break
    assert _leased(store, KEY) and reaper_alive()
    deadline = time.monotonic() + 10
    while (reaper_alive() or _leased(store, KEY)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _leased(store, KEY) and not reaper_alive()
    for _ in range(50):  # a later burst starts a reaper again
        w.append_message("user", "again")
        if _leased(store, KEY):
            break
    assert _leased(store, KEY) and reaper_alive()
    store.close()


def test_taking_the_lock_outside_an_append_ends_the_lease(
    tmp_path: Path, long_leases: None
) -> None:
    """``store.session(key)`` on an open log checks it under the lock (and releases it): the
    lease ends there, so the next append takes the lock and checks the file again."""
    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    w.append_message("user", "a")
    w.append_message("user", "b")
    assert _leased(store, KEY)
    with store.session(KEY) as again:
        assert not _leased(store, KEY)
        other = FileStore(tmp_path, durability="none", lock_timeout=0)
        with other.session(KEY) as theirs:  # free at once: the unlock released it
            theirs.append_message("user", "theirs")
        other.close()
        assert again.append_message("user", "c") == 4
    assert contents(store.read_bytes(KEY)) == ["a", "b", "theirs", "c"]
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_during_a_lease_ends_it_and_finds_no_thread_of_ours(
    tmp_path: Path, slow_leases: None
) -> None:
    """Python 3.12+ warns (DeprecationWarning; an error under ``filterwarnings=error``) on a
    ``fork`` with threads alive: the fork hooks end the process's leases and stop the reaper,
    which a later burst starts again."""

    def reaper_alive() -> bool:
        return any(t.name == "sessionledger-leases" for t in threading.enumerate())

    store = FileStore(tmp_path, durability="none")
    w = store.session(KEY)
    _burst_until_leased(store, KEY, "parent")
    assert reaper_alive()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if threading.active_count() == 1 else 1)
    assert not reaper_alive() and not _leased(store, KEY)  # in the parent, right after
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    other = FileStore(tmp_path, durability="none", lock_timeout=0)
    other.session(KEY).append_message("user", "other")  # the lock is free at once
    other.close()
    _burst_until_leased(store, KEY, "again")  # a later burst leases, with a reaper again
    assert reaper_alive()
    assert w.state.seq == store.load(KEY).state.seq
    store.close()


FORK_IN_HANDLER = """
import os, sys, threading
from sessionledger.eventlog import FileStore, _lease
store = FileStore(sys.argv[1], durability="none")
w = store.session("web:alice")
for _ in range(100):
    w.append_message("user", "burst")
    if store._writers["web:alice"].io.leased:
        break
assert store._writers["web:alice"].io.leased
pool = store._writers["web:alice"].io.lease_pool()
# A signal handler that forks may interrupt this thread inside our locks: the fork hooks
# must not wait for them for ever.
with _lease.LEASES.cond, pool.mutex:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
os.waitpid(pid, 0)
print("forked", flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_inside_our_own_locks_does_not_hang(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", FORK_IN_HANDLER, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.stdout == "forked\n", done.stderr


BUSY = """
import os, sys, time
import sessionledger.eventlog._lease as l
l.LEASE_MAX = 600.0  # a lease that never ends by age: only a waiter (or idleness) ends it
from sessionledger.eventlog import FileStore
root = sys.argv[1]
store = FileStore(root, durability="none", lock_timeout=30)
store.settle_every = 0  # settling takes the lock anew: no break in the lease from it either
w = store.session("web:alice")
io = store._writers["web:alice"].io
n, told = 0, False
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(root, "stop")) and time.monotonic() < deadline:
    w.append_message("user", f"busy {n}")
    n += 1
    if io.leased and not told:
        print("leased", flush=True)
        told = True
store.close()
print(n, flush=True)
"""


@pytest.mark.skipif(not _lease.WAITERS_MARK, reason="waiters mark themselves on Linux only")
def test_another_process_waiting_ends_a_busy_lease_that_would_not_end_by_age(
    tmp_path: Path,
) -> None:
    """A writer appending without a pause never lets its lease age out here: the other
    process's append gets the lock because it marks itself waiting, and the holder's reaper
    ends the lease at its next look (every 4 ms), not after the holder's burst."""
    FileStore(tmp_path).session(KEY).close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    busy = subprocess.Popen(
        [sys.executable, "-c", BUSY, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert busy.stdout is not None
        assert busy.stdout.readline() == "leased\n"
        store = FileStore(tmp_path, durability="none", lock_timeout=20)
        t0 = time.monotonic()
        store.session(KEY).append_message("user", "mine")
        waited = time.monotonic() - t0
    finally:
        (tmp_path / "stop").touch()
        out, _ = busy.communicate(timeout=60)
    assert busy.returncode == 0
    # A mark left behind would keep the holder from leasing again: it is gone (looked at once
    # the holder has exited: until then the holder itself may be marked, waiting for a turn).
    fd = os.open(store.path_for(KEY), os.O_RDONLY)
    try:
        assert not _lease.somebody_waits(fd)
    finally:
        os.close(fd)
    assert waited < 5.0, waited  # the holder never ends this lease by itself (600 s)
    n = int(out.split()[-1])
    got = contents(FileStore(tmp_path).read_bytes(KEY))
    assert [c for c in got if c.startswith("busy ")] == [f"busy {i}" for i in range(n)]
    assert got.count("mine") == 1
    store.close()


_DROPPED_STORE = """
import gc, sys
from sessionledger.eventlog import FileStore
from sessionledger.eventlog._lease import LEASES

class Cycle:
    pass

def leave_a_dropped_store():
    store = FileStore(sys.argv[1], durability="none")
    writer = store.session("k")
    for i in range(50):  # a burst: the writer takes a lease
        writer.append_message("user", str(i))
    cycle = Cycle()
    cycle.store, cycle.me = store, cycle  # only a garbage collection frees the store

gc.disable()
leave_a_dropped_store()
assert LEASES.held, "the writer took no lease"
with LEASES.cond:  # a collection inside the registry's critical section, as any allocation
    gc.collect()  # there may start one: the dropped store's finalizer forgets its log
LEASES.end_all()
assert not LEASES.held, "the dropped store's log is still held"
print("done")
"""


def test_a_store_collected_inside_the_lease_registry_does_not_hang(tmp_path: Path) -> None:
    """A store dropped without close() is closed by its finalizer, which a garbage collection
    can run inside the lease registry's own lock, in the thread holding it: forgetting its logs
    must not wait for that lock (it hung the process for good), and they are forgotten after."""
    proc = subprocess.run(
        [sys.executable, "-c", _DROPPED_STORE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr


@pytest.mark.skipif(not _lease.WAITERS_MARK, reason="needs OFD locks (Linux)")
def test_a_fork_during_a_probe_leaves_no_mark_and_no_lock_in_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``writer_lock_held`` marks its own descriptor as a waiter for as long as it polls, and
    holds the lock a moment when it gets it. A child forked by another thread meanwhile (say
    ``multiprocessing``) shares that open file description, which no pool of the child's
    knows about: closing the parent's copy drops neither the mark nor the lock while the child
    lives. The probe undoes both before it closes."""
    store = FileStore(tmp_path, durability="none")
    store.session(KEY).append_message("user", "hello")
    store.close()
    real = _fileio.flock_within
    r, w = os.pipe()
    children: list[int] = []

    def flock_then_fork(fd: int, seconds: float, *, pause: float, max_pause: float) -> bool:
        got = real(fd, seconds, pause=pause, max_pause=max_pause)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child: lives until the parent says so
            os.read(r, 1)
            os._exit(0)
        children.append(pid)
        return got

    monkeypatch.setattr("sessionledger.eventlog._filebackend.flock_within", flock_then_fork)
    probe = FileStore(tmp_path, durability="none")
    try:
        assert probe.writer_lock_held(KEY) is False
        assert children
        (log,) = [p for p in tmp_path.rglob("*.jsonl") if p.is_file()]
        fd = os.open(log, os.O_RDWR)
        try:
            assert not _lease.somebody_waits(fd)  # no waiter's mark left behind
        finally:
            os.close(fd)
        other = FileStore(tmp_path, durability="none", lock_timeout=0.2)
        other.session(KEY).append_message("user", "other")  # the lock is free
        other.close()
    finally:
        os.write(w, b"x" * len(children))
        for pid in children:
            os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
        probe.close()

"""Many writers in many processes on one file store, with writers killed at random (kill -9).

Four processes of three threads each append to the same eight sessions in each durability
mode while the test kills one process at random now and then and starts another. Each child
prints a line for every append that returned (an acknowledgement). Afterwards: every
acknowledged event is in its session exactly once, at the seq it was acknowledged with; no event
id appears twice anywhere; a conflicting ``expected_seq`` wrote nothing; an id retried in one
process or sent by several gets one seq; every chain verifies.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from logcheck import whole_log

from sessionledger import replay
from sessionledger.eventlog import FileStore, MessageAppended

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 8

CHILD = textwrap.dedent(
    """
    import random, sys, threading
    from sessionledger.eventlog import ConflictError, FileStore

    root, durability, name, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = FileStore(root, durability=durability, lock_timeout=30)
    out = threading.Lock()

    def emit(*words):
        with out:
            sys.stdout.write(" ".join(map(str, words)) + "\\n")
            sys.stdout.flush()

    def work(t):
        rng = random.Random(f"{name}.{t}")
        held = {}
        i = 0
        while True:
            key = f"s:{rng.randrange(8)}"
            i += 1
            eid = f"{name}.{t}.{i}"
            roll = rng.random()
            if roll < 0.1:  # a writer per request, as a web handler would take one
                with store.session(key) as w:
                    emit("ack", key, eid, w.append_message("user", eid, id=eid))
                continue
            w = held.get(key) or held.setdefault(key, store.session(key))
            if roll < 0.3:  # optimistic: read without the lock, write if nobody came between
                seen = store.state(key).seq
                try:
                    seq = w.append_message("user", eid, id=eid, expected_seq=seen)
                except ConflictError as exc:
                    assert exc.expected == seen and exc.actual > seen, (exc.expected, exc.actual)
                    emit("conflict", key, eid)
                    continue
                emit("ack", key, eid, seq)
            elif roll < 0.4:  # the same id from every process: written once
                shared = f"shared.{rng.randrange(40)}"
                key = f"s:{int(shared.split('.')[1]) % 8}"
                w = held.get(key) or held.setdefault(key, store.session(key))
                emit("ack", key, shared, w.append_message("user", shared, id=shared))
            else:
                seq = w.append_message("user", eid, id=eid)
                emit("ack", key, eid, seq)
                if roll > 0.9:  # a retry of an acknowledged id is a no-op with its seq
                    assert w.append_message("user", eid, id=eid) == seq

    emit("ready")
    for t in range(threads):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
    """
)


class Child:
    def __init__(self, root: Path, durability: str, name: str) -> None:
        self.name = name
        self.lines: list[list[str]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), durability, name, "3"],
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                self.ready.set()
            else:
                self.lines.append(line.split())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.reader.join(30)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert "Traceback" not in err, f"{self.name}: {err}"


@pytest.mark.parametrize("durability", ["always", "batch", "none"])
def test_four_processes_eight_sessions_random_kills(tmp_path: Path, durability: str) -> None:
    rng = random.Random(durability)
    root = tmp_path / "store"
    FileStore(root).close()
    serial = iter(range(1000))
    children = [Child(root, durability, f"p{next(serial)}") for _ in range(4)]
    for child in children:
        assert child.ready.wait(60), "a child did not start"
    done: list[Child] = []
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.5))
        victim = children.pop(rng.randrange(len(children)))
        victim.kill()
        done.append(victim)
        fresh = Child(root, durability, f"p{next(serial)}")
        assert fresh.ready.wait(60)
        children.append(fresh)
    time.sleep(0.3)
    for child in children:
        child.kill()
    done += children

    acks: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    conflicts: list[tuple[str, str]] = []
    for child in done:
        for words in child.lines:
            if words[0] == "ack":
                acks[(words[1], words[2])].add(int(words[3]))
            elif words[0] == "conflict":
                conflicts.append((words[1], words[2]))
    assert len(acks) > 100, f"too little was written: {len(acks)}"
    assert conflicts, "no expected_seq conflict happened: the test did not test it"
    assert any(eid.startswith("shared.") for _, eid in acks)

    store = FileStore(root, durability="none")
    assert replay.recover(store).ok  # cuts a torn tail left by the last writer killed
    written: dict[tuple[str, str], int] = {}
    ids: collections.Counter[str] = collections.Counter()
    for n in range(SESSIONS):
        key = f"s:{n}"
        for event in whole_log(store.read_bytes(key)):
            assert isinstance(event, MessageAppended)
            ids[event.id] += 1
            written[(key, event.id)] = event.seq
    assert [i for i, count in ids.items() if count > 1] == []  # nothing twice, anywhere
    for (key, eid), seqs in acks.items():
        assert len(seqs) == 1, f"{eid} acknowledged at {seqs}"
        assert written.get((key, eid)) == next(iter(seqs)), f"acknowledged {eid} lost or moved"
    for key, eid in conflicts:
        assert (key, eid) not in written, f"a conflicting append {eid} was written"
    store.close()

"""replay.follow: old events then new ones, also from another process; sync and async."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sessionledger import replay
from sessionledger.eventlog import (
    CorruptLogError,
    Event,
    FileStore,
    MemoryStore,
    MessageAppended,
    SessionNotFoundError,
)

APPENDER = textwrap.dedent(
    """
    import sys, time
    from sessionledger.eventlog import FileStore
    store = FileStore(sys.argv[1], durability="none")
    with store.session("chat:1") as s:
        for i in range(int(sys.argv[2])):
            s.append_message("user", "from the other process %d" % i)
            time.sleep(0.005)
    """
)


class CountingWaker(replay.PollingWaker):
    """The default waker, counting how often the follower waited."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def wait(self, timeout: float) -> None:
        self.waits.append(timeout)
        super().wait(timeout)


def contents(events: list[Event]) -> list[str]:
    return [e.message["content"] for e in events if isinstance(e, MessageAppended)]


def test_follow_yields_old_then_new_events_without_busy_waiting() -> None:
    store = MemoryStore()
    s = store.session("k")
    for i in range(3):
        s.append_message("user", f"old {i}")
    waker = CountingWaker()
    got: list[Event] = []

    def write_later() -> None:
        time.sleep(0.1)
        for i in range(2):
            s.append_message("user", f"new {i}")

    t = threading.Thread(target=write_later)
    t.start()
    for event in replay.follow(store, "k", after_seq=1, idle_timeout=0.5, waker=waker):
        got.append(event)
    t.join()
    assert [e.seq for e in got] == [2, 3, 4, 5]
    assert contents(got) == ["old 1", "old 2", "new 0", "new 1"]
    # Bounded polling: waits back off, never exceed max_poll, and are few.
    assert waker.waits and max(waker.waits) <= 0.25 and len(waker.waits) < 40


def test_follow_across_two_processes(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("chat:1") as s:
        s.append_message("user", "before")
    proc = subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(tmp_path), "30"],
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        got = []
        for event in replay.follow(store, "chat:1", idle_timeout=5.0):
            got.append(event)
            if len(got) == 31:
                break
    finally:
        assert proc.wait(timeout=30) == 0
    assert [e.seq for e in got] == list(range(1, 32))
    assert contents(got)[1:] == [f"from the other process {i}" for i in range(30)]


@pytest.mark.anyio
async def test_async_follow(tmp_path: Path) -> None:
    import anyio

    store = FileStore(tmp_path, durability="none")
    s = store.session("a")
    s.append_message("user", "one")
    got: list[Event] = []

    async def writer() -> None:
        await anyio.sleep(0.05)
        s.append_message("user", "two")

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        async for event in replay.follow(store, "a", idle_timeout=0.5):
            got.append(event)
            if len(got) == 2:
                break
    assert contents(got) == ["one", "two"]
    s.close()


def test_follow_errors(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with pytest.raises(SessionNotFoundError):
        replay.follow(store, "nobody")
    with store.session("k") as s:
        for i in range(3):
            s.append_message("user", f"m{i}")
    f = replay.follow(store, "k", idle_timeout=0.05)
    assert next(f).seq == 1
    path = store.path_for("k")
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b"\n") + 1])  # cut below what was read
    with pytest.raises(CorruptLogError, match="shorter"):
        list(f)
    path.write_bytes(data.replace(b"m1", b"mX"))
    with pytest.raises(CorruptLogError, match="line 3"):
        list(replay.follow(store, "k", idle_timeout=0.05))


@pytest.mark.anyio
async def test_async_follow_of_an_async_store(tmp_path: Path) -> None:
    from sessionledger.eventlog import AsyncFileStore

    async with AsyncFileStore(tmp_path, durability="none") as store:
        s = await store.session("x")
        await s.append_message("user", "hello")
        got = [e async for e in replay.follow(store, "x", idle_timeout=0.05)]
        assert contents(got) == ["hello"]
        await s.close()

"""Group commit, durability modes and cancellation, for the sync and the async writer.

A fake ``SessionIO`` records every line's end offset and how far each fsync reached (what was
written when the fsync *started*), so a test can check that an append returned only once a
sync covering its line had finished, and count the fsyncs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from functools import partial

import anyio
import msgspec
import pytest
from threaded import run_threads

from sessionledger.eventlog import (
    AsyncSessionWriter,
    Header,
    SessionState,
    SessionWriter,
    StorageError,
    StoreClosedError,
    decode_log,
    initial_state,
)
from sessionledger.eventlog._codec import ZERO_HASH
from sessionledger.eventlog._writer import Durability
from sessionledger.eventlog.codec import encode_line


class FakeIO:
    """A log in memory whose fsync can be gated, slowed or made to fail."""

    def __init__(self) -> None:
        self.name = "fake"
        self.data = bytearray()
        self.ends: list[int] = []  # end offset of each appended line
        self.durable = 0  # bytes covered by the last finished fsync
        self.syncs = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.delay = 0.0
        self.fail = False
        self.syncing = False
        self.closed = False

    def append(self, data: bytes) -> None:
        assert not self.closed, "append after close"
        self.data += data
        self.ends.append(len(self.data))

    def sync(self) -> None:
        assert not self.closed, "fsync after close"
        reach = len(self.data)
        self.syncing = True
        self.entered.set()
        try:
            if self.gate is not None:
                assert self.gate.wait(10)
            if self.delay:
                time.sleep(self.delay)
            if self.fail:
                raise StorageError(self.name, "fsync", "EIO")
            self.syncs += 1
            self.durable = max(self.durable, reach)
        finally:
            self.syncing = False

    def truncate(self, size: int) -> None:
        del self.data[size:]

    def transaction(self, state: SessionState) -> AbstractContextManager[object]:
        return nullcontext()  # no other writer shares this log

    def size(self) -> int:
        return len(self.data)

    def close(self) -> None:
        assert not self.syncing, "closed while an fsync was in flight"
        self.closed = True

    def line_durable(self, seq: int) -> bool:
        return self.durable >= self.ends[seq - 1]


def _make_header() -> tuple[Header, bytes]:
    now = datetime.now(UTC)
    header = Header(seq=0, ts=now, id="h", key="k", created_at=now)
    line, h = encode_line(header, ZERO_HASH)
    return msgspec.structs.replace(header, h=h), line


HEADER, HEADER_LINE = _make_header()


def _header() -> Header:
    return HEADER


def _async_writer(io: FakeIO, durability: Durability, window: float = 0.0) -> AsyncSessionWriter:
    return AsyncSessionWriter.standalone(
        key="k",
        io=io,
        state=initial_state(_header()),
        durability=durability,
        hash_key=b"",
        token_counter=lambda m: 1,
        batch_window=window,
    )


def _sync_writer(io: FakeIO, durability: Durability) -> SessionWriter:
    return SessionWriter.standalone(
        key="k",
        io=io,
        state=initial_state(_header()),
        durability=durability,
        hash_key=b"",
        token_counter=lambda m: 1,
    )


def _seqs(io: FakeIO) -> list[int]:
    decoded = decode_log(HEADER_LINE + bytes(io.data))
    assert decoded.bad is None and decoded.torn is None
    return [e.seq for e in decoded.events]


@pytest.fixture
def io() -> Iterator[FakeIO]:
    fake = FakeIO()
    yield fake
    if fake.gate is not None:
        fake.gate.set()


# -- async -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_appends_during_an_fsync_share_the_next(io: FakeIO) -> None:
    io.gate = threading.Event()
    w = _async_writer(io, "batch")
    returned: list[int] = []

    async def append(i: int) -> None:
        seq = await w.append_message("user", str(i))
        assert io.line_durable(seq), "returned before its line was durable"
        returned.append(seq)

    async with anyio.create_task_group() as tg:
        tg.start_soon(append, 0)
        await anyio.to_thread.run_sync(io.entered.wait)  # the first fsync is in flight
        for i in range(1, 20):
            tg.start_soon(append, i)
        await anyio.sleep(0.05)
        assert returned == [] and io.syncs == 0
        io.gate.set()
    assert sorted(returned) == list(range(1, 21))
    assert io.syncs == 2  # one for the first line, one shared by the 19 that came during it
    assert _seqs(io) == list(range(1, 21))


@pytest.mark.anyio
@pytest.mark.parametrize("durability", ["always", "batch", "none"])
async def test_async_fsync_counts(io: FakeIO, durability: Durability) -> None:
    w = _async_writer(io, durability)
    for i in range(10):
        seq = await w.append_message("user", str(i))
        assert durability == "none" or io.line_durable(seq)
    assert io.syncs == {"always": 10, "batch": 10, "none": 0}[durability]
    await w.close()
    assert io.closed and io.syncs == {"always": 10, "batch": 10, "none": 0}[durability]


@pytest.mark.anyio
async def test_async_batch_window_gathers_more(io: FakeIO) -> None:
    w = _async_writer(io, "batch", window=0.05)

    async def append(i: int) -> None:
        await w.append_message("user", str(i))

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(append, i)
    assert io.syncs == 1 and all(io.line_durable(s) for s in range(1, 11))


@pytest.mark.anyio
@pytest.mark.parametrize("role", ["leader", "follower"])
async def test_async_cancel_after_the_write_still_makes_it_durable(io: FakeIO, role: str) -> None:
    """Cancelled while waiting for its fsync (as the leader or a follower): the append
    finishes its fsync, state and log agree, and the cancellation lands afterwards."""
    io.gate = threading.Event()
    w = _async_writer(io, "batch")
    results: list[int] = []

    async def cancelled_append(scope_box: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scope_box.append(scope)
            results.append(await w.append_message("user", "cancel me"))
            await anyio.sleep(10)  # the cancellation is delivered here

    async with anyio.create_task_group() as tg:
        box: list[anyio.CancelScope] = []
        if role == "follower":
            tg.start_soon(w.append_message, "user", "leader")
            await anyio.to_thread.run_sync(io.entered.wait)
        tg.start_soon(cancelled_append, box)
        if role == "leader":
            await anyio.to_thread.run_sync(io.entered.wait)
        else:
            await anyio.sleep(0.05)
        box[0].cancel()
        await anyio.sleep(0.05)
        assert results == []  # still waiting for durability despite the cancel
        io.gate.set()
    seq = 1 if role == "leader" else 2
    assert results == [seq] and io.line_durable(seq) and w.seq == seq
    assert _seqs(io) == list(range(1, seq + 1))


@pytest.mark.anyio
async def test_async_cancel_in_always_mode_waits_for_its_own_fsync(io: FakeIO) -> None:
    io.gate = threading.Event()
    w = _async_writer(io, "always")
    results: list[int] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def append() -> None:
                results.append(await w.append_message("user", "x"))

            tg.start_soon(append)
            await anyio.to_thread.run_sync(io.entered.wait)
            scope.cancel()
            io.gate.set()
    assert scope.cancel_called  # cancelled mid-fsync, yet the append completed durably
    assert results == [1] and io.line_durable(1) and w.seq == 1 and io.syncs == 1


@pytest.mark.anyio
async def test_async_failed_fsync_poisons_the_writer(io: FakeIO) -> None:
    w = _async_writer(io, "batch")
    await w.append_message("user", "ok")
    io.fail = True
    with pytest.raises(StorageError) as info:
        await w.append_message("user", "lost?")
    assert info.value.durable_unknown
    io.fail = False
    with pytest.raises(StorageError):  # no later fsync can vouch for that line
        await w.append_message("user", "after")
    assert w.seq == 2 and _seqs(io) == [1, 2]  # the state follows the log
    with pytest.raises(StorageError):
        await w.close()
    assert io.closed


@pytest.mark.anyio
async def test_async_close_waits_for_the_fsync_in_flight(io: FakeIO) -> None:
    io.gate = threading.Event()
    w = _async_writer(io, "batch")
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.append_message, "user", "x")
        await anyio.to_thread.run_sync(io.entered.wait)
        tg.start_soon(w.close)
        await anyio.sleep(0.05)
        assert not io.closed
        with pytest.raises(StoreClosedError):
            await w.append_message("user", "refused while closing")
        io.gate.set()
    assert io.closed and io.line_durable(1)


# -- sync ------------------------------------------------------------------------------------


def test_sync_threads_share_fsyncs(io: FakeIO) -> None:
    io.delay = 0.002
    w = _sync_writer(io, "batch")

    def work(t: int) -> None:
        for i in range(25):
            seq = w.append_message("user", f"{t}:{i}")
            assert io.line_durable(seq)

    run_threads(*(partial(work, t) for t in range(8)))
    assert _seqs(io) == list(range(1, 201))
    assert io.syncs < 200  # group commit: fewer fsyncs than appends
    w.close()


def test_sync_close_waits_for_the_fsync_in_flight(io: FakeIO) -> None:
    io.gate = threading.Event()
    w = _sync_writer(io, "batch")
    appender = threading.Thread(target=w.append_message, args=("user", "x"))
    appender.start()
    assert io.entered.wait(5)
    closer = threading.Thread(target=w.close)
    closer.start()
    time.sleep(0.05)
    assert not io.closed
    io.gate.set()
    appender.join()
    closer.join()
    assert io.closed and io.line_durable(1)


def test_sync_failed_fsync_poisons_the_writer(io: FakeIO) -> None:
    w = _sync_writer(io, "batch")
    w.append_message("user", "ok")
    io.fail = True
    with pytest.raises(StorageError) as info:
        w.append_message("user", "lost?")
    assert info.value.durable_unknown
    io.fail = False
    with pytest.raises(StorageError):
        w.append_message("user", "after")
    assert w.seq == 2 and _seqs(io) == [1, 2]


def test_sync_always_cuts_back_a_line_whose_fsync_failed(io: FakeIO) -> None:
    w = _sync_writer(io, "always")
    w.append_message("user", "ok")
    io.fail = True
    with pytest.raises(StorageError):
        w.append_message("user", "not durable")
    io.fail = False
    assert w.append_message("user", "next") == 2
    assert _seqs(io) == [1, 2] and io.syncs == 2

"""I/O faults at write and at fsync: a clear StorageError, a valid log, a retry that works.

Each (fault, durability) pair is checked with ``tools.soak._faults.fault_round``, which states
the contract in its module docstring; ``python -m sessionledger.tools.soak --only faults`` runs thousands.
The pure group-commit state machine is tested with a fake I/O in tests/unit/test_group_commit.py;
here the faults hit the real file store's ``write`` and ``fsync``.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sessionledger import replay
from sessionledger.eventlog import AsyncFileStore, FileStore, StorageError, decode_log
from sessionledger.tools.soak._faults import (
    FAULTS,
    FaultFigures,
    failing,
    fault_round,
    inject,
    run_faults,
    short_write,
)


@pytest.mark.parametrize("durability", ["always", "batch", "none"])
@pytest.mark.parametrize("kind", FAULTS)
def test_each_fault_in_each_mode(tmp_path: Path, kind: str, durability: str) -> None:
    store = FileStore(tmp_path, durability=durability)
    writer = store.session("faults:1")
    writer.append_message("user", "before")
    figures = FaultFigures()
    writer = fault_round(store, writer, kind, "the-event", figures)
    assert figures.injected == figures.retried_ok == 1
    writer.append_message("assistant", "after")
    writer.close()
    assert replay.recover(store).ok
    assert replay.verify(store).ok
    contents = [m["content"] for m in store.load("faults:1").state.message_dicts]
    assert contents == ["before", f"fault {kind}", "after"]  # the retried event once


def test_many_faults_in_a_row(tmp_path: Path) -> None:
    figures = run_faults(tmp_path, 140, seed=3)
    assert figures.injected == 140 and figures.retried_ok == 140
    assert set(figures.by_kind) == set(FAULTS)
    assert figures.poisoned_and_reopened > 0 and figures.refused_cleanly > 0


def test_the_error_says_what_and_where(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="always")
    writer = store.session("k")
    with inject(write=failing(errno.ENOSPC)), pytest.raises(StorageError) as info:
        writer.append_message("user", "x")
    assert info.value.action == "append" and info.value.path == str(store.path_for("k"))
    assert "No space left on device" in str(info.value) and str(store.path_for("k")) in str(
        info.value
    )
    with inject(fsync=failing(errno.EIO)), pytest.raises(StorageError) as info:
        writer.append_message("user", "x")
    assert info.value.action == "fsync" and "Input/output error" in str(info.value)
    writer.close()


@pytest.mark.parametrize("durability", ["always", "batch"])
def test_disk_full_while_creating_a_session(tmp_path: Path, durability: str) -> None:
    """ENOSPC on a new session's header leaves no file (the partial header is cut back and the
    empty file it was in removed): recover passes, and opening once space is back creates it."""
    store = FileStore(tmp_path, durability=durability)
    with inject(write=short_write(errno.ENOSPC)), pytest.raises(StorageError):
        store.session("new:1")
    assert not store.path_for("new:1").exists() and not store.exists("new:1")
    assert replay.recover(store).ok
    writer = store.session("new:1")
    assert writer.append_message("user", "x") == 1
    writer.close()
    assert replay.verify(store).ok


def test_a_partial_line_is_never_glued_onto(tmp_path: Path) -> None:
    """After a short write fails, the next append starts on a clean line boundary."""
    store = FileStore(tmp_path, durability="batch")
    writer = store.session("k")
    for i in range(3):
        with inject(write=short_write(errno.EIO)), pytest.raises(StorageError):
            writer.append_message("user", "y" * 10_000)
        assert writer.append_message("user", f"ok {i}") == i + 1
    writer.close()
    decoded = decode_log(store.read_bytes("k"))
    assert decoded.bad is None and decoded.torn is None
    assert [e.seq for e in decoded.events] == [1, 2, 3]


@pytest.mark.anyio
async def test_async_writer_faults(tmp_path: Path) -> None:
    """The async writer uses the same file I/O: refused writes, a poisoning fsync, a reopen."""
    store = AsyncFileStore(tmp_path, durability="batch")
    writer = await store.session("k")
    await writer.append_message("user", "before")
    before = store.sync.read_bytes("k")
    with inject(write=short_write(errno.ENOSPC)), pytest.raises(StorageError):
        await writer.append_message("user", "z" * 5000, id="e1")
    assert store.sync.read_bytes("k") == before
    assert await writer.append_message("user", "z" * 5000, id="e1") == 2
    with inject(fsync=failing(errno.EIO)), pytest.raises(StorageError) as info:
        await writer.append_message("user", "unsure", id="e2")
    assert info.value.durable_unknown
    with pytest.raises(StorageError):
        await writer.append_message("user", "refused")
    with pytest.raises(StorageError):
        await writer.close()
    writer = await store.session("k")  # reopening continues from what is on disk
    assert writer.seq == 3
    assert await writer.append_message("user", "unsure", id="e2") == 3  # idempotent retry
    await store.close()
    assert replay.verify(FileStore(tmp_path)).ok


@pytest.mark.parametrize("durability", ["always", "batch"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_fsync_failing_on_a_new_header_leaves_no_session(
    tmp_path: Path, durability: str, code: int
) -> None:
    """The header was written whole but its fsync failed: the caller got StorageError, so the
    session must not exist afterwards (not listed, no file), and a retry creates it."""
    from sessionledger.projections import list_sessions

    store = FileStore(tmp_path, durability=durability)
    with inject(fsync=failing(code)), pytest.raises(StorageError):
        store.session("new:1")
    assert not store.path_for("new:1").exists() and not store.exists("new:1")
    assert [s.key for s in list_sessions(store)] == []
    assert replay.recover(store).ok
    writer = store.session("new:1")
    assert writer.append_message("user", "x") == 1
    writer.close()
    assert replay.verify(store).ok
    store.close()

"""Index snapshots of a log in segments: open, history, verify and settling across rolls.

Record offsets are whole-log offsets; a range before the live segment is read from the closed
segment that holds it (plain or gzipped). What is read from the index must always equal what a
full read of the log gives.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import pytest
from crash import die_at_roll_step
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessionledger import replay
from sessionledger.eventlog import CorruptLogError, FileStore, SessionState, _indexsnap
from sessionledger.projections import history

KEY = "tg:9"
STEM = "tg_3a9"
SMALL = 1_500  # bytes per segment: a few messages each


def _store(root: Path, segment_bytes: int = SMALL, settle: int = 0) -> FileStore:
    store = FileStore(root, durability="none", segment_bytes=segment_bytes)
    store.settle_every = settle
    return store


def _fill(store: FileStore, n: int, start: int = 0, *, width: int = 60) -> None:
    with store.session(KEY) as w:
        for i in range(start, start + n):
            w.append_message("user" if i % 2 == 0 else "assistant", f"m{i} " + "x" * width)


def _closed(root: Path) -> list[str]:
    return [n for n in os.listdir(root) if n.startswith(STEM + ".") and ".seg" in n]


def _indexed(state: SessionState) -> bool:
    return isinstance(state.messages.source, _indexsnap.FileMessages)


def _same_as_full(root: Path, *, at_least: int = 1) -> SessionState:
    """Open ``root``'s session from its index and check it against a full read of the log."""
    store = _store(root)
    loaded = store.load(KEY)
    state = loaded.state
    assert loaded.snapshot_seq >= at_least and _indexed(state)
    full = _store(root).load(KEY, snapshot=False).state
    assert state == full
    assert history(state, max_messages=500) == history(full, max_messages=500)
    assert list(state.message_dicts) == list(full.message_dicts)
    return state


def test_an_index_is_written_and_read_across_rolls(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 300)
    assert len(_closed(tmp_path)) >= 10
    assert store.write_snapshot(KEY).health == "valid"  # closing wrote it already
    assert (tmp_path / f"{STEM}.index").stat().st_size == 300 * 64
    state = _same_as_full(tmp_path, at_least=300)
    assert history(state, max_messages=3)[-1]["content"].startswith("m299")
    assert replay.verify(_store(tmp_path)).ok
    assert _store(tmp_path).snapshot_status(KEY).health == "valid"
    assert replay.state_at(_store(tmp_path), KEY, 150).seq == 150
    assert replay.export_jsonl(_store(tmp_path), KEY) == store.read_bytes(KEY)


def test_a_whole_rebuild_and_an_extension_across_a_roll_agree(tmp_path: Path) -> None:
    """Extending an index across segment headers writes the bytes a rebuild writes."""
    store = _store(tmp_path)
    _fill(store, 40)
    store.write_snapshot(KEY)
    _fill(_store(tmp_path), 60, start=40)  # rolls several times past the snapshot
    store.write_snapshot(KEY)  # extends
    extended = [(tmp_path / f"{STEM}{s}").read_bytes() for s in (".index", ".ids")]
    _store(tmp_path).write_snapshot(KEY, rebuild=True)
    rebuilt = [(tmp_path / f"{STEM}{s}").read_bytes() for s in (".index", ".ids")]
    assert extended == rebuilt
    _same_as_full(tmp_path, at_least=100)


def test_a_roll_between_the_index_write_and_the_read(tmp_path: Path) -> None:
    _fill(_store(tmp_path), 30)
    _store(tmp_path).write_snapshot(KEY)
    before = len(_closed(tmp_path))
    other = _store(tmp_path)
    other.snapshot_every = 0  # this writer leaves the snapshot where it was
    _fill(other, 25, start=30)
    assert len(_closed(tmp_path)) > before
    store = _store(tmp_path)
    assert store.load(KEY).snapshot_seq == 30
    state = _same_as_full(tmp_path, at_least=30)
    assert state.seq == 55
    # a writer opened from that snapshot reads across the roll and appends on
    with store.session(KEY) as w:
        assert history(w.state, max_messages=2)[-1]["content"].startswith("m54")
        w.append_message("user", "after the roll")
    assert replay.verify(_store(tmp_path)).ok


def test_a_log_that_ends_in_a_segment_header_is_indexed_at_its_last_event(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    _fill(store, 30)
    with store.session(KEY) as w:
        w.refresh()  # rolls with nothing after the new header
    assert store.read_bytes(KEY).endswith(b"\n") and store.read_bytes(KEY).rsplit(b"\n", 2)[
        -2
    ].startswith(b'{"type":"header"')
    assert store.write_snapshot(KEY, rebuild=True).written
    assert _store(tmp_path).snapshot_status(KEY).health == "valid"
    _same_as_full(tmp_path, at_least=30)
    _fill(_store(tmp_path), 5, start=30)  # the first event after the header
    assert _store(tmp_path).write_snapshot(KEY).written
    _same_as_full(tmp_path, at_least=35)
    assert replay.verify(_store(tmp_path)).ok


@pytest.mark.parametrize("settle", [0, 16])
def test_compressed_segments_are_read_on_demand(tmp_path: Path, settle: int) -> None:
    store = _store(tmp_path, settle=settle)
    _fill(store, 120)
    store.write_snapshot(KEY)
    done = store.compress_segments(KEY)
    assert done and all(p.name.endswith(".gz") for p in done)
    state = _same_as_full(tmp_path, at_least=120)
    assert len(history(state, max_messages=120)) == 120  # reaches into the first segment
    # a retried id found in a compressed segment; a writer appending on
    writer = _store(tmp_path, settle=settle).session(KEY)
    first_id = next(iter(_store(tmp_path).load(KEY, snapshot=False).state.ids.items()))[0]
    assert writer.append_message("user", "retry", id=first_id) == 1
    for i in range(40):
        writer.append_message("user", f"later {i}")
    writer.close()
    _store(tmp_path).write_snapshot(KEY)
    _same_as_full(tmp_path, at_least=160)
    assert replay.verify(_store(tmp_path)).ok


def test_a_damaged_index_of_a_log_in_segments_is_not_used(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 80)
    store.write_snapshot(KEY)
    index = tmp_path / f"{STEM}.index"
    data = bytearray(index.read_bytes())
    data[5 * 64 + 8] ^= 1  # a record's offset
    index.write_bytes(bytes(data))
    fresh = _store(tmp_path)
    state = fresh.load(KEY).state
    full = _store(tmp_path).load(KEY, snapshot=False).state
    assert list(state.message_dicts) == list(full.message_dicts)  # the log wins
    assert replay.verify(_store(tmp_path)).ok  # derived: nothing of the log is wrong
    assert _store(tmp_path).write_snapshot(KEY, rebuild=True).written
    _same_as_full(tmp_path, at_least=80)


def test_a_stale_index_of_a_log_in_segments_is_ignored(tmp_path: Path) -> None:
    """The live segment cut back below the snapshot's line: the index is stale, opening reads
    the log instead, and the next snapshot replaces it."""
    _fill(_store(tmp_path), 80)
    assert _store(tmp_path).write_snapshot(KEY).seq == 80
    live = tmp_path / f"{STEM}.jsonl"
    data = live.read_bytes()
    assert data.count(b"\n") > 4  # the cut stays in the live segment
    keep = len(data)
    for _ in range(3):
        keep = data.rfind(b"\n", 0, keep - 1) + 1
    os.truncate(live, keep)
    store = _store(tmp_path)
    status = store.snapshot_status(KEY)
    assert status.health == "stale" and status.seq == 80
    loaded = store.load(KEY)
    assert loaded.snapshot_seq == 0 and loaded.state.seq == 77
    full = _store(tmp_path).load(KEY, snapshot=False).state
    assert _untimed(loaded.state) == _untimed(full)
    assert not replay.verify(_store(tmp_path)).ok  # the snapshot is past the log: reported
    assert _store(tmp_path).write_snapshot(KEY).written
    assert _same_as_full(tmp_path, at_least=77).seq == 77


def test_a_planted_index_is_refused(tmp_path: Path) -> None:
    _fill(_store(tmp_path), 80)
    assert _store(tmp_path).write_snapshot(KEY).written
    (tmp_path / f"{STEM}.index").unlink()
    os.symlink("/etc/hostname", tmp_path / f"{STEM}.index")
    state = _store(tmp_path).load(KEY).state
    assert not _indexed(state)
    assert state.seq == 80 and len(state.messages) == 80


def test_tampering_in_a_closed_segment_under_the_index_is_reported(tmp_path: Path) -> None:
    _fill(_store(tmp_path), 80)
    assert _store(tmp_path).write_snapshot(KEY).written
    first = tmp_path / f"{STEM}.1.seg"
    os.chmod(first, 0o600)
    data = first.read_bytes()
    first.write_bytes(data.replace(b"m1 x", b"m1 y", 1))
    report = replay.verify(_store(tmp_path))
    assert not report.ok
    assert any("hash mismatch" in p.what for s in report.sessions for p in s.problems)
    state = _store(tmp_path).load(KEY).state  # opens from the index (the anchor is intact)
    assert _indexed(state)
    with pytest.raises(CorruptLogError, match="does not chain"):
        list(state.message_dicts)


# -- crashes and processes --------------------------------------------------------------------


def _crash_at(root: str, step: str) -> None:
    die_at_roll_step(step)
    store = FileStore(root, durability="always", segment_bytes=SMALL)
    store.settle_every = 8
    with store.session(KEY) as w:
        for i in range(200):
            w.append_message("user", f"c{i} " + "z" * 60)


@pytest.mark.parametrize("step", ["created", "header", "retired", "linked", "renamed"])
def test_kill_9_during_a_roll_with_an_index_present(tmp_path: Path, step: str) -> None:
    _fill(_store(tmp_path), 30)
    assert _store(tmp_path).write_snapshot(KEY).health == "valid"
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_crash_at, args=(str(tmp_path), step))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    store = _store(tmp_path)
    assert replay.recover(store).ok
    assert replay.verify(store).ok
    state = _store(tmp_path).load(KEY).state
    full = _store(tmp_path).load(KEY, snapshot=False).state
    assert state == full and _indexed(state)
    _fill(_store(tmp_path, settle=8), 30, start=1000)
    _same_as_full(tmp_path, at_least=state.seq)


def _append_many(root: str, who: str, n: int) -> None:
    store = FileStore(root, durability="none", segment_bytes=SMALL)
    store.settle_every = 16
    held = 0
    with store.session(KEY) as w:
        for i in range(n):
            w.append_message("user", f"{who}-{i} " + "w" * 40, id=f"{who}-{i}")
            held = max(held, len(w.state.messages.in_memory))
        # it settled again and again (never settling, each would hold ~400); the bound leaves
        # room for a loaded machine, where settles lose more races to the other process
        assert _indexed(w.state) and held <= 160, held
    store.close()


def test_two_processes_settle_across_rolls(tmp_path: Path) -> None:
    _store(tmp_path).session(KEY).close()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, 200)) for w in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(_closed(tmp_path)) >= 10
    state = _same_as_full(tmp_path, at_least=200)
    assert state.seq == 400
    assert replay.verify(_store(tmp_path)).ok
    with _store(tmp_path).session(KEY) as w:  # retries found in the index across segments
        assert w.append_message("user", "again", id="a-3") == state.ids.get("a-3")


# -- property: the index across segments equals one file -------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("msg"), st.integers(0, 3), st.integers(1, 400)),
        st.tuples(
            st.sampled_from(["consolidate", "compact", "trim", "retract"]), st.integers(1, 5)
        ),
        st.tuples(st.sampled_from(["snapshot", "reopen", "clear"]), st.just(0)),
    ),
    min_size=1,
    max_size=60,
)


def _apply(store: FileStore, ops: list[tuple[str, int, int] | tuple[str, int]]) -> None:
    roles = ("user", "assistant", "tool", "user")
    w = store.session(KEY)
    for op in ops:
        kind = op[0]
        live = len(w.state.messages)
        if kind == "msg":
            assert len(op) == 3
            role = roles[op[1]]
            w.append_message(
                role, f"{role} " + "y" * op[2], tool_call_id="c1" if op[1] == 2 else None
            )
        elif kind == "consolidate":
            w.mark_consolidated(min(live, op[1]))
        elif kind == "compact" and live:
            w.compact("summary", upto=min(live, op[1]), tokens_before=10, tokens_after=2)
        elif kind == "trim" and live:
            w.trim(min(live, op[1]), "truncate")
        elif kind == "retract" and live:
            w.retract(min(live, op[1]))
        elif kind == "clear":
            w.clear()
        elif kind == "snapshot":
            store.write_snapshot(KEY)
        elif kind == "reopen":
            w.close()
            w = store.session(KEY)
    w.close()


def _untimed(state: SessionState) -> list[dict[str, object]]:
    """The live messages without the time each was written (the two stores wrote apart)."""
    return [{k: v for k, v in m.items() if k != "timestamp"} for m in state.message_dicts]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS)
@example(
    ops=[("msg", i % 4, 300) for i in range(30)]
    + [("snapshot", 0), *[("msg", 1, 200)] * 10, ("compact", 3), ("reopen", 0), ("msg", 0, 90)]
)
def test_history_across_segments_equals_one_file(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int] | tuple[str, int]]
) -> None:
    root = tmp_path_factory.mktemp("seg")
    flat_root = tmp_path_factory.mktemp("flat")
    for path, size in ((root, 700), (flat_root, 0)):
        store = _store(path, segment_bytes=size, settle=5)
        store.snapshot_every = 3
        _apply(store, ops)
    seg = _store(root, 700)
    seg_state = seg.load(KEY).state
    flat_state = _store(flat_root, 0).load(KEY, snapshot=False).state
    assert seg_state == _store(root, 700).load(KEY, snapshot=False).state
    assert seg_state.seq == flat_state.seq
    assert _untimed(seg_state) == _untimed(flat_state)
    for n in (1, 7, 500):
        assert history(seg_state, max_messages=n) == history(flat_state, max_messages=n)
    seg.write_snapshot(KEY)
    again = _store(root, 700).load(KEY).state
    assert _indexed(again) or not again.messages
    assert _untimed(again) == _untimed(flat_state)
    assert replay.verify(_store(root, 700)).ok


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_segment_replaced_by_a_non_regular_file_is_reported_by_verify(
    tmp_path: Path, kind: str
) -> None:
    """One session's closed segment replaced after its index was written: verify reports that
    session (it does not raise and leave the others unchecked); the index's reads refuse it."""
    store = _store(tmp_path)
    _fill(store, 80)
    with store.session("tg:10") as w:
        w.append_message("user", "another session")
    store.close()
    assert _store(tmp_path).write_snapshot(KEY).written
    seg = tmp_path / f"{STEM}.1.seg"
    assert seg.exists()
    seg.unlink()
    if kind == "fifo":
        os.mkfifo(seg)
    elif kind == "symlink":
        os.symlink("/etc/hostname", seg)
    else:
        seg.mkdir()
    report = replay.verify(_store(tmp_path))
    assert not report.ok
    bad = [s for s in report.sessions if s.problems]
    assert [s.key for s in bad] == [KEY]
    assert str(seg) in str(bad[0].problems[0])
    with pytest.raises(CorruptLogError):  # opened from the index, a message of segment 1
        history(_store(tmp_path).load(KEY).state, max_messages=80)

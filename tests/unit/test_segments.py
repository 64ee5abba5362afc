"""Logs in segments: every reader crosses them, a roll survives a crash at each step, two
processes append across a roll, and a missing, planted or tampered segment is never a gap."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from crash import die_at_roll_step
from pg_support import StoreFactory

from sessionledger import replay
from sessionledger.eventlog import (
    AsyncFileStore,
    CorruptLogError,
    FileStore,
    InvalidEventError,
    KnownEvent,
    MemoryStore,
    NewerFormatError,
    StorageError,
    UnsafePathError,
    _segfiles,
    decode_log,
)
from sessionledger.eventlog._codec import _decode_unknown, encode_line
from sessionledger.eventlog._segments import next_header, parse_segment_name, segment_name
from sessionledger.eventlog.backend import catalog_source
from sessionledger.projections import history, list_sessions
from sessionledger.tools.cli import main

KEY = "tg:7"
STEM = "tg_3a7"
SMALL = 1500  # bytes per segment: a few messages each


def _store(root: Path, **kw: object) -> FileStore:
    return FileStore(root, durability="none", segment_bytes=SMALL, **kw)  # type: ignore[arg-type]


def _fill(store: FileStore, n: int, key: str = KEY, start: int = 0) -> None:
    with store.session(key) as w:
        for i in range(start, start + n):
            w.append_message("user" if i % 2 == 0 else "assistant", f"message {i} " + "x" * 60)


def _segments(root: Path, stem: str = STEM) -> list[str]:
    return sorted(
        (n for n in os.listdir(root) if n.startswith(stem + ".") and ".seg" in n),
        key=lambda n: int(n.split(".")[1]),
    )


@pytest.fixture
def rolled(tmp_path: Path) -> tuple[FileStore, Path]:
    store = _store(tmp_path / "s")
    _fill(store, 60)
    assert len(_segments(tmp_path / "s")) >= 3
    return store, tmp_path / "s"


def test_names_and_headers_follow_the_rules() -> None:
    assert segment_name("a", 3) == "a.3.seg"
    assert parse_segment_name("a_3a1.12.seg.gz") == ("a_3a1", 12, True)
    for bad in ("a.0.seg", ".a.1.seg", "a.1.seg.tmp", "a.x.seg", "a.jsonl"):
        assert parse_segment_name(bad) is None, bad


def test_every_reader_crosses_segments(rolled: tuple[FileStore, Path]) -> None:
    store, root = rolled
    whole = store.read_bytes(KEY)
    assert whole.count(b'{"type":"header"') == len(_segments(root)) + 1
    loaded = store.load(KEY, snapshot=False)
    assert loaded.state.seq == 60
    assert [m["content"][:10] for m in loaded.state.message_dicts][:2] == [
        "message 0 ",
        "message 1 ",
    ]
    # writers (a fresh store, and one that reopens): appending continues the one chain
    again = _store(root)
    with again.session(KEY) as w:
        assert history(w.state, 3)[-1]["content"].startswith("message 59")
        w.append_message("user", "after")
    assert replay.verify(again).ok
    assert replay.state_at(again, KEY, 30).seq == 30
    assert replay.state_at(again, KEY).seq == 61
    exported = replay.export_jsonl(again, KEY)
    assert exported == again.read_bytes(KEY)
    follow = replay.follow(again, KEY, idle_timeout=0.05)
    assert [e.seq for e in follow] == list(range(1, 62))
    [info] = list_sessions(again)
    assert (info.key, info.messages) == (KEY, 61)


def test_the_cli_shows_and_verifies_across_segments(
    rolled: tuple[FileStore, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, root = rolled
    assert main(["verify", "--store", str(root)]) == 0
    assert main(["show", KEY, "--store", str(root), "--json"]) == 0
    out = capsys.readouterr().out
    assert "message 0 " in out and "message 59" in out


def test_recover_and_repair_cross_segments(rolled: tuple[FileStore, Path]) -> None:
    store, root = rolled
    live = root / f"{STEM}.jsonl"
    with live.open("ab") as f:
        f.write(b'{"type":"message","seq":61,"ts":"2026-')  # a dead writer's torn line
    assert replay.recover(store).ok
    assert store.load(KEY).torn is None
    assert replay.verify(store).ok
    assert store.load(KEY).state.seq == 60
    assert replay.repair(store, KEY) is not None
    assert replay.verify(store).ok


def test_a_writer_and_a_roll_that_ends_the_log_keep_the_head(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 30)
    with store.session(KEY) as w:
        w.refresh()  # may roll with nothing after the header
        w.append_message("user", "next")
    assert replay.verify(store).ok


def test_an_index_snapshot_taken_before_the_log_rolled_still_verifies(tmp_path: Path) -> None:
    one = FileStore(tmp_path, segment_bytes=0, durability="none")
    w = one.session("k")
    for i in range(50):
        w.append_message("user", f"before {i} " + "x" * 40)
    assert one.write_snapshot("k").written  # an index snapshot of a log in one file
    one.close()
    many = FileStore(tmp_path, segment_bytes=2_000, durability="none")
    w = many.session("k")
    for i in range(50):
        w.append_message("user", f"after {i} " + "x" * 40)
    many.close()
    reopened = FileStore(tmp_path, segment_bytes=2_000, durability="none")
    assert sorted(tmp_path.glob("k.*.seg"))  # the log did go on in segments
    report = replay.verify(reopened)
    assert report.ok, [p.what for s in report.sessions for p in s.problems]
    assert reopened.snapshot_status("k").health == "valid"
    assert len(history(reopened.state("k"), max_messages=500)) == 100


def test_a_version_1_reader_refuses_both_halves(rolled: tuple[FileStore, Path]) -> None:
    _, root = rolled
    live = (root / f"{STEM}.jsonl").read_bytes()
    # the live segment alone does not chain from the zero hash: not a log, at line 1
    alone = decode_log(live)
    assert alone.header is None and alone.bad is not None and alone.bad.line == 1
    # this reader, given the live segment without the closed ones, names what is missing
    other = FileStore(root.parent / "v1", durability="none")
    other.path_for(KEY).write_bytes(live)
    with pytest.raises(CorruptLogError, match=r"segment 1 of \d+ is missing"):
        other.load(KEY)
    # the whole log: a version-1 reader decodes a later header as an event and fails on it
    header_line = live[: live.index(b"\n")]
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(header_line, type=KnownEvent)
    assert _decode_unknown(header_line) is None
    assert json.loads(header_line)["version"] == 2


def test_a_newer_segment_version_is_read_but_never_appended_to(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 3)
    data = store.read_bytes(KEY)
    loaded = store.load(KEY)
    assert loaded.header is not None
    header = next_header(
        loaded.header,
        segment=2,
        seq=3,
        prev_h=loaded.state.head,
        offset=len(data),
        ts=loaded.header.ts,
    )
    header = msgspec.structs.replace(header, version=3)
    line, _ = encode_line(header, loaded.state.head)
    os.link(store.path_for(KEY), tmp_path / f"{STEM}.1.seg")
    os.unlink(store.path_for(KEY))
    store.path_for(KEY).write_bytes(line)
    assert store.load(KEY).state.seq == 3
    with pytest.raises(NewerFormatError, match="format version 3"):
        _store(tmp_path).session(KEY)


def test_a_missing_middle_segment_is_reported_not_skipped(rolled: tuple[FileStore, Path]) -> None:
    _, root = rolled
    (root / f"{STEM}.2.seg").unlink()
    with pytest.raises(CorruptLogError, match=r"segment 2 of \d+ is missing"):
        _store(root).load(KEY, snapshot=False)
    with pytest.raises(CorruptLogError, match="segment 2"):
        _store(root).session(KEY)
    assert not replay.verify(_store(root)).ok


def test_a_cut_or_foreign_segment_is_found(rolled: tuple[FileStore, Path]) -> None:
    _, root = rolled
    seg = root / f"{STEM}.2.seg"
    data = seg.read_bytes()
    seg.chmod(0o600)
    seg.write_bytes(data[:-10])
    with pytest.raises(CorruptLogError, match="segment"):
        _store(root).load(KEY, snapshot=False)
    seg.write_bytes(data.replace(b"message", b"massage", 1))  # same length, tampered
    with pytest.raises(CorruptLogError, match="hash mismatch"):
        _store(root).load(KEY, snapshot=False)
    assert not replay.verify(_store(root)).ok


def test_a_symlink_or_fifo_segment_is_refused(rolled: tuple[FileStore, Path]) -> None:
    _, root = rolled
    seg = root / f"{STEM}.1.seg"
    seg.rename(root / "elsewhere")
    seg.symlink_to(root / "elsewhere")
    with pytest.raises(UnsafePathError):
        _store(root).load(KEY, snapshot=False)
    seg.unlink()
    os.mkfifo(seg)
    with pytest.raises(UnsafePathError, match="FIFO"):
        _store(root).load(KEY, snapshot=False)


def test_a_planted_file_in_the_way_of_a_roll_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 2)
    os.mkfifo(tmp_path / f"{STEM}.1.seg")
    with pytest.raises(UnsafePathError, match="in the way"), store.session(KEY) as w:
        for i in range(40):
            w.append_message("user", f"m{i} " + "y" * 60)
    # nothing was lost: the log is whole and writable once the name is free
    (tmp_path / f"{STEM}.1.seg").unlink()
    fresh = _store(tmp_path)
    assert replay.verify(fresh).ok
    _fill(fresh, 40, start=100)
    assert replay.verify(fresh).ok


def test_a_compressed_old_segment_reads_and_verifies(rolled: tuple[FileStore, Path]) -> None:
    store, root = rolled
    before = store.read_bytes(KEY)
    done = store.compress_segments(KEY)
    assert done and all(p.name.endswith(".seg.gz") for p in done)
    assert not [n for n in os.listdir(root) if n.endswith(".seg")]
    assert gzip.decompress((root / f"{STEM}.1.seg.gz").read_bytes()).startswith(b'{"type"')
    again = _store(root)
    assert again.read_bytes(KEY) == before
    assert replay.verify(again).ok
    _fill(again, 30, start=60)
    assert replay.verify(again).ok
    assert again.load(KEY, snapshot=False).state.seq == 90


def test_trash_restore_and_delete_move_every_segment(rolled: tuple[FileStore, Path]) -> None:
    store, root = rolled
    n = len(_segments(root))
    assert store.archive(KEY)
    store.cleanup(0, now=datetime.now(UTC) + timedelta(hours=1))
    assert _segments(root) == [] and not store.exists(KEY)
    [entry] = store.trash()
    store.restore(entry)
    assert len(_segments(root)) == n
    assert replay.verify(store).ok and store.load(KEY).state.seq == 61
    assert store.delete(KEY)
    assert _segments(root) == [] and not store.exists(KEY)


def test_tampering_in_an_old_segment_is_detected(rolled: tuple[FileStore, Path]) -> None:
    _, root = rolled
    seg = root / f"{STEM}.1.seg"
    seg.chmod(0o600)
    seg.write_bytes(seg.read_bytes().replace(b"message 1 ", b"message 9 ", 1))
    report = replay.verify(_store(root))
    assert not report.ok


# -- crashes during a roll, and two processes --------------------------------------------------


def _crash_at(root: str, step: str) -> None:
    die_at_roll_step(step)
    store = FileStore(root, durability="always", segment_bytes=SMALL)
    with store.session(KEY) as w:
        for i in range(200):
            w.append_message("user", f"c{i} " + "z" * 60)


@pytest.mark.parametrize("step", ["created", "header", "retired", "linked", "renamed"])
def test_kill_9_at_every_step_of_a_roll(tmp_path: Path, step: str) -> None:
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_crash_at, args=(str(tmp_path), step))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    store = FileStore(tmp_path, durability="none", segment_bytes=SMALL)
    before = store.load(KEY, snapshot=False).state.seq
    assert before >= 1
    assert replay.recover(store).ok  # removes what the roll left (see the next test)
    assert replay.verify(store).ok, replay.verify(store)
    live = os.stat(store.path_for(KEY)).st_ino
    assert all(os.stat(p).st_ino != live for p in store._files.segment_paths(KEY))
    store.compress_segments(KEY)  # never the live file, even through a crashed roll's link
    assert store.load(KEY, snapshot=False).state.seq == before
    _fill(store, 30, start=1000)  # writing on rolls again, past what the crash left
    after = store.load(KEY, snapshot=False)
    assert after.state.seq == before + 30
    assert replay.verify(store).ok
    assert not (tmp_path / f".{STEM}.roll").exists()


def _append_many(root: str, who: str, n: int) -> None:
    store = FileStore(root, durability="none", segment_bytes=SMALL)
    with store.session(KEY) as w:
        for i in range(n):
            w.append_message("user", f"{who}-{i} " + "w" * 40, id=f"{who}-{i}")
    store.close()


def test_two_processes_append_across_rolls(tmp_path: Path) -> None:
    FileStore(tmp_path, durability="none", segment_bytes=SMALL).session(KEY).close()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, 150)) for w in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = FileStore(tmp_path, durability="none", segment_bytes=SMALL)
    state = store.load(KEY, snapshot=False).state
    assert state.seq == 300
    ids = {m["content"].split(" ")[0] for m in state.message_dicts}
    assert ids == {f"{w}-{i}" for w in "ab" for i in range(150)}
    assert len(_segments(tmp_path)) >= 10
    assert replay.verify(store).ok


def test_a_writer_holding_a_rolled_segment_follows_it(tmp_path: Path) -> None:
    one = _store(tmp_path)
    two = _store(tmp_path)
    w1 = one.session(KEY)
    w2 = two.session(KEY)
    for i in range(40):
        (w1 if i % 3 else w2).append_message("user", f"{i} " + "v" * 60)
    assert w2.append_message("user", "last") == 41
    assert w1.refresh() == 41
    w1.close()
    w2.close()
    assert replay.verify(_store(tmp_path)).ok


def test_the_catalog_follows_a_log_in_segments_without_rereading_it(
    rolled: tuple[FileStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionledger.projections import _catalog_log

    store, root = rolled
    assert list_sessions(store)[0].messages == 60
    st = catalog_source(store).stat_log(f"{STEM}.jsonl")
    assert st is not None and st.size == len(store.read_bytes(KEY))
    assert [s.size for s in catalog_source(store).scan_logs()] == [st.size]
    wide = FileStore(root, durability="none", segment_bytes=1 << 20)  # no roll now
    _fill(wide, 2, start=60)

    def whole(*_: object) -> None:
        raise AssertionError("the log was read whole")

    monkeypatch.setattr(_catalog_log, "_read_whole", whole)
    monkeypatch.setattr(_catalog_log, "_folded_row", whole)
    assert list_sessions(wide)[0].messages == 62


def test_the_catalog_continues_from_its_row_after_a_roll(
    rolled: tuple[FileStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A roll gives the log a new live file: the catalog still reads only what was appended
    (its row's line chains on), not the whole log."""
    from sessionledger.projections import _catalog_log

    store, root = rolled
    assert list_sessions(store)[0].messages == 60
    before = len(_segments(root))
    live = os.stat(store.path_for(KEY)).st_ino
    _fill(_store(root), 20, start=60)
    assert len(_segments(root)) > before and os.stat(store.path_for(KEY)).st_ino != live
    reads: list[int] = []
    real = _catalog_log._advance

    def advancing(*args: object) -> object:
        reads.append(1)
        return real(*args)  # type: ignore[arg-type]

    def whole(*_: object) -> None:
        raise AssertionError("the log was read whole")

    monkeypatch.setattr(_catalog_log, "_advance", advancing)
    monkeypatch.setattr(_catalog_log, "_read_whole", whole)
    monkeypatch.setattr(_catalog_log, "_folded_row", whole)
    [info] = list_sessions(store)
    assert reads and info.messages == 80 and info.seq == 80
    monkeypatch.undo()
    (root / ".catalog").unlink()
    assert list_sessions(_store(root)) == [info]  # what a rebuild from the log gives


def test_repair_never_cuts_a_closed_segment(rolled: tuple[FileStore, Path]) -> None:
    _, root = rolled
    seg = root / f"{STEM}.2.seg"
    seg.chmod(0o600)
    seg.write_bytes(seg.read_bytes().replace(b"message", b"massage", 1))
    before = {n: (root / n).read_bytes() for n in os.listdir(root) if not n.startswith(".")}
    with pytest.raises(InvalidEventError, match="closed segment"):
        replay.repair(_store(root), KEY)
    after = {n: (root / n).read_bytes() for n in os.listdir(root) if not n.startswith(".")}
    assert after == before  # nothing cut, nothing put in quarantine


def test_repair_in_the_live_segment_keeps_the_right_seq(rolled: tuple[FileStore, Path]) -> None:
    store, root = rolled
    live = root / f"{STEM}.jsonl"
    good = store.load(KEY).state.seq
    with live.open("ab") as f:
        f.write(b'{"type":"bogus"}\n{"also":"bad"}\n')
    report = replay.repair(_store(root), KEY)
    assert report.repaired and report.kept_seq == good
    assert replay.verify(_store(root)).ok


def test_snapshots_of_a_log_in_segments(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 40)
    with store.session(KEY) as w:
        w.refresh()
    store.write_snapshot(KEY)
    again = _store(tmp_path)
    assert again.load(KEY).state == again.load(KEY, snapshot=False).state
    _fill(again, 20, start=40)  # opens from the snapshot, rolls again
    third = _store(tmp_path)
    assert third.load(KEY).state == third.load(KEY, snapshot=False).state
    assert third.load(KEY).state.seq == 60
    assert replay.verify(third).ok


def test_an_evicted_writer_reopens_onto_the_rolled_log(tmp_path: Path) -> None:
    one = FileStore(tmp_path, durability="none", segment_bytes=SMALL, max_open_files=1)
    w = one.session(KEY)
    w.append_message("user", "first")
    one.session("other").append_message("user", "evicts the first log's descriptor")
    _fill(_store(tmp_path), 40)  # another store rolls the log several times meanwhile
    assert w.append_message("user", "after the rolls") == 42
    w.close()
    assert replay.verify(_store(tmp_path)).ok


def test_threads_with_group_commit_append_across_rolls(tmp_path: Path) -> None:
    import threading

    stores = [FileStore(tmp_path, durability="batch", segment_bytes=SMALL) for _ in range(2)]
    errors: list[BaseException] = []

    def run(store: FileStore, who: str) -> None:
        try:
            with store.session(KEY) as w:
                for i in range(60):
                    w.append_message("user", f"{who}-{i} " + "u" * 40, id=f"{who}-{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(stores[i % 2], f"t{i}")) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for store in stores:
        store.close()
    assert errors == []
    check = _store(tmp_path)
    state = check.load(KEY, snapshot=False).state
    assert state.seq == 240
    assert replay.verify(check).ok


# -- other stores, imports and exports ---------------------------------------------------------


def test_an_exported_log_in_segments_imports_byte_for_byte(
    rolled: tuple[FileStore, Path], tmp_path: Path
) -> None:
    store, _ = rolled
    exported = replay.export_jsonl(store, KEY)
    memory = MemoryStore()
    assert memory.import_bytes(KEY, exported) == "created"
    assert memory.read_bytes(KEY) == exported
    assert replay.verify(memory).ok
    other = _store(tmp_path / "other")
    assert other.import_bytes(KEY, exported) == "created"
    assert other.import_bytes(KEY, exported) == "unchanged"
    assert other.read_bytes(KEY) == exported
    assert len(_segments(tmp_path / "other")) == exported.count(b'{"type":"header"') - 1
    _fill(other, 10, start=60)  # rolls on from the imported segments
    assert replay.verify(other).ok
    assert other.read_bytes(KEY).startswith(exported)
    with memory.session(KEY) as w:
        w.append_message("user", "the memory store appends after a segment header too")
    assert replay.verify(memory).ok


def test_a_log_in_segments_cannot_be_extended_across_a_boundary(
    rolled: tuple[FileStore, Path], tmp_path: Path
) -> None:
    store, _ = rolled
    exported = store.read_bytes(KEY)
    other = _store(tmp_path / "other")
    first = exported[: exported.index(b'\n{"type":"header"') + 1]
    assert other.import_bytes(KEY, first) == "created"
    with pytest.raises(InvalidEventError, match="segment boundary"):
        other.import_bytes(KEY, exported)
    assert other.read_bytes(KEY) == first


def test_a_failed_import_never_removes_a_session_created_once_it_let_go(
    rolled: tuple[FileStore, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An import into a new key fails (a file planted in the way of its segment 2). The log it
    # created must be gone before it lets go of the lock: another store that gets the lock
    # then creates the session anew, and nothing the failed import does after removes it.
    # Before, the import let go first and then removed the key, whatever held it by then.
    from sessionledger.eventlog._fileio import FileIO

    store, _ = rolled
    exported = store.read_bytes(KEY)
    root = tmp_path / "other"
    importer, writer = _store(root), _store(root)
    (root / segment_name(STEM, 2)).write_bytes(b"planted")
    real_close = FileIO.close
    done: list[bool] = []

    def close_then_another_writer(io: FileIO) -> None:
        real_close(io)
        if io.name.endswith(f"{STEM}.jsonl") and not done:
            done.append(True)
            with writer.session(KEY) as w:  # the lock is free: another writer creates KEY
                w.append_message("user", "mine")

    monkeypatch.setattr(FileIO, "close", close_then_another_writer)
    with pytest.raises(UnsafePathError, match="in the way of segment 2"):
        importer.import_bytes(KEY, exported)
    monkeypatch.undo()
    assert done
    assert [m.message["content"] for m in _store(root).load(KEY).state.messages] == ["mine"]
    assert not (root / segment_name(STEM, 1)).exists()  # the segment the import wrote


def test_postgres_keeps_one_table_and_refuses_a_log_in_segments(
    rolled: tuple[FileStore, Path], make_pg: StoreFactory
) -> None:
    target = make_pg()
    source, _ = rolled
    exported = source.read_bytes(KEY)
    with pytest.raises(InvalidEventError, match="segments"):
        target.import_bytes(KEY, exported)
    assert not target.exists(KEY)
    # an unsegmented log keeps its bytes, as before
    first = exported[: exported.index(b'\n{"type":"header"') + 1]
    assert target.import_bytes(KEY, first) == "created"
    assert target.read_bytes(KEY) == first


@pytest.mark.anyio
async def test_the_async_file_store_rolls_and_reads_across_segments(tmp_path: Path) -> None:
    async with AsyncFileStore(tmp_path, durability="none", segment_bytes=SMALL) as store:
        s = await store.session(KEY)
        for i in range(40):
            await s.append_message("user", f"async {i} " + "a" * 50)
        await s.close()
    assert len(_segments(tmp_path)) >= 3
    check = _store(tmp_path)
    assert check.load(KEY, snapshot=False).state.seq == 40
    assert replay.verify(check).ok


def test_follow_crosses_a_roll_that_happens_while_it_follows(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _fill(store, 3)
    follow = replay.follow(store, KEY, idle_timeout=0.05)
    assert [next(follow).seq for _ in range(3)] == [1, 2, 3]
    _fill(_store(tmp_path), 30, start=3)
    assert [e.seq for e in follow] == list(range(4, 34))


def test_a_store_that_never_rolls_still_reads_and_appends_to_segments(
    rolled: tuple[FileStore, Path],
) -> None:
    _, root = rolled
    n = len(_segments(root))
    plain = FileStore(root, durability="none", segment_bytes=0)
    _fill(plain, 50, start=60)
    assert len(_segments(root)) == n
    assert plain.load(KEY, snapshot=False).state.seq == 110
    assert replay.verify(plain).ok


@pytest.mark.anyio
async def test_the_async_store_compresses_segments(rolled: tuple[FileStore, Path]) -> None:
    store, root = rolled
    before = store.read_bytes(KEY)
    async with AsyncFileStore(root, durability="none", segment_bytes=SMALL) as async_store:
        done = await async_store.compress_segments(KEY)
    assert done and all(p.name.endswith(".seg.gz") for p in done)
    assert _store(root).read_bytes(KEY) == before


def test_a_segment_compressed_while_it_is_read_is_read_compressed(
    rolled: tuple[FileStore, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = rolled
    before = store.read_bytes(KEY)
    real = _segfiles.read_segment
    calls: list[str] = []

    def compressing_meanwhile(path: str, compressed: bool) -> bytes:
        if not calls:
            calls.append(path)
            store.compress_segments(KEY)  # the plain file is gone now
        return real(path, compressed)

    monkeypatch.setattr(_segfiles, "read_segment", compressing_meanwhile)
    assert store.read_bytes(KEY) == before
    assert calls


def test_recover_removes_what_a_crashed_roll_left_and_verify_names_strays(
    tmp_path: Path,
) -> None:
    for step in ("header", "linked"):
        root = tmp_path / step
        ctx = multiprocessing.get_context("fork")
        proc = ctx.Process(target=_crash_at, args=(str(root), step))
        proc.start()
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
        store = FileStore(root, durability="none", segment_bytes=SMALL)
        if step == "linked":
            [(path, why)] = store.stray_segments()
            assert (
                "crashed roll" in why
                and os.stat(path).st_ino == os.stat(store.path_for(KEY)).st_ino
            )
            assert not replay.verify(store).ok
        else:
            assert (root / f".{STEM}.roll").exists()
        done = store.clean_leftovers()
        assert done and all("roll" in line for line in done), done
        assert store.stray_segments() == []
        assert not (root / f".{STEM}.roll").exists()
        assert replay.verify(store).ok
        _fill(store, 30, start=500)
        assert replay.verify(store).ok


def test_a_planted_segment_of_no_log_is_named_and_left_alone(
    rolled: tuple[FileStore, Path],
) -> None:
    store, root = rolled
    (root / "nobody.1.seg").write_bytes(b"planted\n")
    (root / f"{STEM}.99.seg").write_bytes(b"planted\n")
    with store.session(KEY) as w:  # a writer holds the log: nothing of it is touched
        assert store.clean_leftovers() == []
        w.append_message("user", "still writable")
    found = {p.name: why for p, why in store.stray_segments()}
    assert set(found) == {"nobody.1.seg", f"{STEM}.99.seg"}
    report = replay.verify(store)
    assert not report.ok
    assert {Path(f.file).name for f in report.store_problems} >= set(found)
    assert store.clean_leftovers() == []  # not a roll's leftover: left for a human
    assert (root / "nobody.1.seg").exists() and (root / f"{STEM}.99.seg").exists()
    assert store.load(KEY).state.seq == 61


@pytest.mark.parametrize("fault", ["raise", "short"])
def test_a_full_disk_at_a_roll_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    store = _store(tmp_path)
    _fill(store, 10)
    before = store.read_bytes(KEY)

    def full(fd: int, data: bytes) -> int:
        if fault == "raise":
            raise OSError(28, "No space left on device")
        return os.write(fd, data[:3])

    monkeypatch.setattr(_segfiles, "_write", full)
    w = _store(tmp_path).session(KEY)
    with pytest.raises(StorageError, match="roll"):
        for i in range(30):
            w.append_message("user", f"d{i} " + "f" * 60)
    data = store.read_bytes(KEY)
    assert data.startswith(before) and replay.verify(store).ok
    assert not (tmp_path / f".{STEM}.roll").exists()
    assert os.stat(store.path_for(KEY)).st_mode & 0o200  # still the writable live log
    monkeypatch.undo()
    w.append_message("user", "the disk has room again")
    w.close()
    assert replay.verify(_store(tmp_path)).ok
    assert _segments(tmp_path)

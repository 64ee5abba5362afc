"""replay.verify: which line failed and why; every single-byte change is caught."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from replay_sample import KEY, build_sample

from sessionledger import replay
from sessionledger.eventlog import (
    FileStore,
    Header,
    MemoryStore,
    MessageAppended,
    NotALogError,
    SessionNotFoundError,
)
from sessionledger.eventlog.codec import ZERO_HASH, encode_lines


def sample_bytes() -> bytes:
    store = MemoryStore()
    build_sample(store)
    return store.read_bytes(KEY)


def test_a_sound_store_verifies(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    build_sample(store, "slack:7")
    report = replay.verify(store)
    assert report.ok and report.problems == []
    assert report.checked == 2
    one = report.session(KEY)
    assert one.ok and one.seq == 16 and one.lines == 17
    assert one.head == store.load(KEY).state.head


def test_every_single_byte_change_is_caught() -> None:
    data = sample_bytes()
    path = "sample.jsonl"
    assert replay.check_log(data, key=KEY, path=path).ok
    line_of = [data.count(b"\n", 0, i) + 1 for i in range(len(data))]
    for i in range(len(data)):
        for new in {data[i] ^ 0x01, data[i] ^ 0x20, ord("0") if data[i] != ord("0") else ord("1")}:
            mutated = data[:i] + bytes([new]) + data[i + 1 :]
            report = replay.check_log(mutated, key=KEY, path=path)
            assert not report.ok, f"byte {i} -> {new:#x} not caught"
            # The report names the line that was changed (or, for a newline, the line it ended).
            assert report.problems[0].line in (line_of[i], line_of[i] + 1), (i, report.problems)


def test_a_deleted_or_swapped_line_is_caught() -> None:
    lines = sample_bytes().splitlines(keepends=True)
    deleted = b"".join(lines[:5] + lines[6:])
    swapped = b"".join([*lines[:5], lines[6], lines[5], *lines[7:]])
    for data in (deleted, swapped):
        report = replay.check_log(data, key=KEY, path="x")
        assert [(p.line, "hash mismatch" in p.what) for p in report.problems][:1] == [(6, True)]


def test_a_torn_tail_is_reported_with_its_line() -> None:
    data = sample_bytes()
    report = replay.check_log(data + b'{"type":"mess', key=KEY, path="x")
    assert not report.ok and report.torn_bytes == 13
    assert report.problems[0].line == 18 and "torn" in report.problems[0].what


def test_keyed_verify_needs_the_key(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", hash_key="s3cret")
    build_sample(store)
    assert replay.verify(store).ok
    assert replay.verify(store, hash_key="s3cret").ok
    wrong = replay.verify(store, KEY, hash_key="guess")
    assert not wrong.ok
    assert wrong.problems[0].line == 1 and "not a session log" in wrong.problems[0].what
    # An unkeyed reader cannot vouch for a keyed log either.
    assert not replay.verify(FileStore(tmp_path, durability="none"), KEY).ok


def test_repeated_ids_and_a_wrong_header_key_are_reported() -> None:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    header = Header(seq=0, ts=ts, id="h", key="other", created_at=ts)
    events = [
        MessageAppended.of(seq=1, ts=ts, id="same", message={"role": "user", "content": "a"}),
        MessageAppended.of(seq=2, ts=ts, id="same", message={"role": "user", "content": "b"}),
    ]
    data, _ = encode_lines([header, *events], ZERO_HASH)
    report = replay.check_log(data, key="mine", path="x")
    whats = [(p.line, p.what) for p in report.problems]
    assert whats[0] == (1, "the header names session 'other', not 'mine'")
    assert whats[1] == (3, "event id 'same' repeats line 2")


def test_bad_input_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    build_sample(store)
    with pytest.raises(SessionNotFoundError):
        replay.verify(store, "nobody")
    # A file that is not a log, filed under a key's name, is reported, not fixed.
    junk = store.path_for("junk")
    junk.write_bytes(b"hello\nworld\n")
    report = replay.verify(store, "junk")
    assert report.problems[0].file == str(junk)
    assert "not a session log" in report.problems[0].what
    assert junk.read_bytes() == b"hello\nworld\n"
    gone = FileStore(tmp_path / "gone", durability="none")
    os.rmdir(gone.root)
    with pytest.raises(NotALogError, match="gone"):
        replay.verify(gone)


def test_whole_line_truncation_is_caught_through_the_snapshot_and_the_catalog(
    tmp_path: Path,
) -> None:
    from sessionledger import projections

    store = FileStore(tmp_path, durability="none")
    for key in ("snap", "cat"):
        with store.session(key) as s:
            for i in range(300):  # past the snapshot threshold: closing writes a snapshot
                s.append_message("user", f"m{i}")
    assert len(projections.list_sessions(store)) == 2  # the catalog now records both heads
    store.snapshot_path("cat").unlink()  # "cat" is checked through the catalog alone
    assert replay.verify(store).ok
    for key, keep in (("snap", 200), ("cat", 299)):
        path = store.path_for(key)
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[: keep + 1]))  # header + seq 1..keep: still chains
    report = replay.verify(store)
    snap, cat = report.session("snap"), report.session("cat")
    assert snap.truncated and cat.truncated
    assert any("the snapshot records seq 300" in p.what for p in snap.problems)
    assert [p.what for p in cat.problems] == [
        "truncated: the catalog records seq 300, but the log ends at seq 299; "
        "whole lines are missing"
    ]
    # Recover reports the loss once and rebuilds the views from the logs that are left.
    recovered = replay.recover(store)
    assert not recovered.ok and recovered.catalog_rebuilt
    assert "snap" in recovered.snapshots_rebuilt
    assert replay.verify(store).ok


def test_a_rewritten_log_disagrees_with_the_catalog(tmp_path: Path) -> None:
    from sessionledger import projections

    store = FileStore(tmp_path, durability="none")
    with store.session("k") as s:
        s.append_message("user", "original")
    projections.list_sessions(store)
    path = store.path_for("k")
    header = path.read_bytes().splitlines(keepends=True)[0]
    # Someone rebuilds the log with other content: it chains, from the same header.
    from sessionledger.eventlog import decode_log

    decoded = decode_log(header)
    assert decoded.header is not None
    fake = MessageAppended.of(
        seq=1, ts=decoded.header.ts, id="f", message={"role": "user", "content": "forged"}
    )
    data, _ = encode_lines([decoded.header, fake], ZERO_HASH)
    path.write_bytes(data)
    (problem,) = replay.verify(store).problems
    assert problem.line == 2 and "the log was rewritten" in problem.what


def test_a_corrupt_snapshot_is_reported_and_rebuilt(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as s:
        for i in range(300):
            s.append_message("user", f"m{i}")
    store.snapshot_path("k").write_bytes(b"garbage")
    report = replay.verify(store)
    assert [p.what.split(" (")[0] for p in report.problems] == ["the snapshot is corrupt"]
    recovered = replay.recover(store)
    assert recovered.ok and recovered.snapshots_rebuilt == ["k"]
    assert store.snapshot_status("k").health == "valid"
    assert replay.verify(store).ok

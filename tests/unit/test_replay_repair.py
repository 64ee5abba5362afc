"""replay.repair: keep the valid prefix, move the rest to quarantine, only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_sample import KEY, build_sample

from sessionledger import replay
from sessionledger.eventlog import (
    CorruptLogError,
    FileStore,
    MemoryStore,
    NotALogError,
    SessionNotFoundError,
)


def corrupt_line(store: FileStore, line: int) -> tuple[bytes, bytes]:
    path = store.path_for(KEY)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].replace(b'"seq"', b'"Seq"', 1)
    data = b"".join(lines)
    path.write_bytes(data)
    return data, b"".join(lines[line - 1 :])


def test_repair_keeps_the_prefix_and_quarantines_the_rest(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    data, rest = corrupt_line(store, 6)
    with pytest.raises(CorruptLogError, match="line 6 of"):
        store.open(KEY)
    report = replay.repair(store, KEY)
    assert report.repaired and report.line == 6 and report.kept_seq == 4
    assert report.lines_moved == 12 and report.bytes_moved == len(rest)
    assert "hash mismatch" in report.reason and "line 6" in str(report)
    assert store.read_bytes(KEY) == data[: len(data) - len(rest)]
    record = json.loads(Path(report.quarantine or "").read_text())
    assert record["text"].encode() == rest and record["line"] == 6
    assert replay.verify(store).ok
    with store.open(KEY) as s:
        assert s.state.seq == 4
        s.append_message("user", "continues after the repair")
    # Nothing left to repair: a second run says so and changes nothing.
    before = store.read_bytes(KEY)
    again = replay.repair(store, KEY)
    assert not again.repaired and store.read_bytes(KEY) == before


def test_repair_of_a_torn_tail_and_of_repeated_ids() -> None:
    store = MemoryStore()
    build_sample(store)
    whole = store.read_bytes(KEY)
    store.put_bytes(KEY, whole + b"{partial")
    report = replay.repair(store, KEY)
    assert report.repaired and report.bytes_moved == 8 and store.read_bytes(KEY) == whole
    # A correctly chained line that repeats an earlier id is the first bad line.
    with store.session("dup") as s:
        s.append_message("user", "a", id="x")
        s.append_message("user", "b", id="y")
    raw = store.read_bytes("dup")
    from sessionledger.eventlog import decode_log
    from sessionledger.eventlog.codec import encode_lines

    decoded = decode_log(raw)
    import msgspec

    assert decoded.header is not None
    events = [decoded.header, decoded.events[0], msgspec.structs.replace(decoded.events[1], id="x")]
    forged, _ = encode_lines(events)  # type: ignore[arg-type]
    store.put_bytes("dup", forged)
    report = replay.repair(store, "dup")
    assert report.repaired and report.line == 3 and "repeats line 2" in report.reason


def test_repair_refuses_what_is_not_a_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    path = store.path_for("junk")
    path.write_bytes(b"not a log\nat all\n")
    with pytest.raises(NotALogError, match=r"junk\.jsonl"):
        replay.repair(store, "junk")
    assert path.read_bytes() == b"not a log\nat all\n"
    assert not store.quarantine_path("junk").exists()
    with pytest.raises(SessionNotFoundError):
        replay.repair(store, "nobody")

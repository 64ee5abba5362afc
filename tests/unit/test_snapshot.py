"""Snapshots: opening from one equals folding the log; stale, corrupt and missing are caught."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from sessionledger.eventlog import BaseStore, FileStore, IdIndex, MemoryStore, SessionWriter
from sessionledger.eventlog._snapshot import _dec_hook
from sessionledger.eventlog.backend import peek_snapshot
from sessionledger.projections import rebuild_snapshot, snapshot_status, write_snapshot

STORES = ("file", "memory")


def make(kind: str, tmp_path: Path, **kw: object) -> BaseStore:
    if kind == "file":
        return FileStore(tmp_path / "s", durability="none", **kw)  # type: ignore[arg-type]
    return MemoryStore(**kw)  # type: ignore[arg-type]


def fill(writer: SessionWriter, rng: random.Random, n: int) -> None:
    for i in range(n):
        live = len(writer.state.messages)
        op = rng.random()
        if op < 0.7:
            writer.append_message(
                rng.choice(["user", "assistant", "tool"]),
                f"message {i} " * rng.randint(0, 5),
                tool_calls=[{"id": f"c{i}", "n": 1.5, "deep": {"a": [None, True]}}],
            )
        elif op < 0.78:
            writer.update_metadata(set={"title": f"t{i}", "n": i}, unset=["gone"])
        elif op < 0.84 and live:
            writer.compact(f"summary {i}", rng.randint(0, live), tokens_before=10, model="m")
        elif op < 0.88 and live:
            writer.trim(rng.randint(1, live), "retain_suffix")
        elif op < 0.91 and live:
            writer.retract(1)
        elif op < 0.93:
            writer.clear()
        elif op < 0.96 and live:
            writer.mark_consolidated(rng.randint(0, live))
        else:
            writer.set_lifecycle("idle")


@pytest.mark.parametrize("kind", STORES)
def test_opening_with_a_snapshot_gives_the_same_state(kind: str, tmp_path: Path) -> None:
    store = make(kind, tmp_path)
    rng = random.Random(11)
    with store.session("a:b:c") as w:
        fill(w, rng, 120)
    assert write_snapshot(store, "a:b:c").written
    with store.session("a:b:c") as w:
        fill(w, rng, 40)
    full = store.load("a:b:c", snapshot=False)
    fast = store.load("a:b:c")
    assert fast.snapshot_seq > 0 and full.snapshot_seq == 0
    assert fast.state == full.state
    assert fast.events == full.events[fast.snapshot_seq :]
    assert fast.valid_length == full.valid_length
    assert list(store.events("a:b:c")) == full.events
    writer = store.session("a:b:c")
    assert writer.state == full.state
    writer.append_message("user", "after")  # the writer continues the chain
    writer.close()
    assert store.load("a:b:c").state == store.load("a:b:c", snapshot=False).state


@pytest.mark.parametrize("kind", STORES)
def test_status_missing_valid_behind_and_extended(kind: str, tmp_path: Path) -> None:
    store = make(kind, tmp_path)
    with store.session("k") as w:
        w.append_message("user", "one")
    assert snapshot_status(store, "k").health == "missing"
    status = write_snapshot(store, "k")
    assert (status.health, status.seq, status.written) == ("valid", 1, True)
    with store.session("k") as w:
        w.append_message("user", "two")
        w.append_message("user", "three")
    status = snapshot_status(store, "k")
    assert (status.health, status.seq, status.behind) == ("valid", 1, 2)
    status = write_snapshot(store, "k")
    assert (status.health, status.seq, status.written) == ("valid", 3, True)
    assert not write_snapshot(store, "k").written  # nothing new: nothing written
    assert snapshot_status(store, "k").behind == 0


def test_a_log_without_events_gets_no_snapshot() -> None:
    store = MemoryStore()
    store.session("k").close()
    assert write_snapshot(store, "k").health == "missing"
    assert store.snapshot_bytes("k") is None


@pytest.mark.parametrize("kind", STORES)
def test_a_corrupt_snapshot_is_ignored_and_rebuilt(kind: str, tmp_path: Path) -> None:
    store = make(kind, tmp_path)
    with store.session("k") as w:
        for i in range(10):
            w.append_message("user", f"m{i}")
    write_snapshot(store, "k")
    blob = store.snapshot_bytes("k")
    assert blob is not None
    damaged = bytearray(blob)
    damaged[len(damaged) // 2] ^= 0xFF
    store.put_snapshot("k", bytes(damaged))
    status = snapshot_status(store, "k")
    assert status.health == "corrupt" and "digest" in status.reason
    loaded = store.load("k")
    assert loaded.snapshot_seq == 0 and len(loaded.state.messages) == 10
    store.put_snapshot("k", b"short")
    assert snapshot_status(store, "k").health == "corrupt"
    assert write_snapshot(store, "k").written
    assert snapshot_status(store, "k").health == "valid"


def test_a_snapshot_written_with_another_key_is_corrupt(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none", hash_key="secret")
    with store.session("k") as w:
        w.append_message("user", "hi")
    write_snapshot(store, "k")
    other = FileStore(tmp_path, durability="none", hash_key="other")
    assert snapshot_status(other, "k").health == "corrupt"


@pytest.mark.parametrize("kind", STORES)
def test_a_stale_snapshot_never_wins_over_the_log(kind: str, tmp_path: Path) -> None:
    store = make(kind, tmp_path)
    with store.session("k") as w:
        for i in range(6):
            w.append_message("user", f"old {i}")
    write_snapshot(store, "k")
    blob = store.snapshot_bytes("k")
    assert blob is not None
    store.delete("k")  # a new log under the same key: the snapshot's anchor is gone
    with store.session("k") as w:
        for i in range(8):
            w.append_message("assistant", f"new {i}")
    store.put_snapshot("k", blob)
    status = snapshot_status(store, "k")
    assert status.health == "stale" and status.seq == 6
    loaded = store.load("k")
    assert loaded.snapshot_seq == 0
    assert loaded.state == store.load("k", snapshot=False).state
    assert store.session("k").state.messages[0].message["content"] == "new 0"
    store.close()
    assert rebuild_snapshot(store, "k").seq == 8
    assert snapshot_status(store, "k").health == "valid"


def test_a_log_cut_before_the_snapshot_makes_it_stale() -> None:
    store = MemoryStore()
    with store.session("k") as w:
        for i in range(5):
            w.append_message("user", f"m{i}")
    write_snapshot(store, "k")
    data = store.read_bytes("k")
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    store.put_bytes("k", data[:cut])
    status = snapshot_status(store, "k")
    assert status.health == "stale" and "ends before" in status.reason
    assert len(store.load("k").state.messages) == 4
    # Same length, different last line: the anchor line no longer matches.
    other = data[:cut] + data[cut:].replace(b"m4", b"m9")
    store.put_bytes("k", other)
    assert snapshot_status(store, "k").health == "stale"


def test_a_snapshot_of_another_session_is_corrupt() -> None:
    store = MemoryStore()
    for key in ("a", "b"):
        with store.session(key) as w:
            w.append_message("user", key)
        write_snapshot(store, key)
    store.put_snapshot("a", store.snapshot_bytes("b"))
    status = snapshot_status(store, "a")
    assert status.health == "corrupt" and "'b'" in status.reason
    assert store.load("a").state.messages[0].message["content"] == "a"


def test_a_closing_writer_snapshots_past_the_threshold() -> None:
    store = MemoryStore()
    store.snapshot_every = 10
    with store.session("k") as w:
        for i in range(9):
            w.append_message("user", f"m{i}")
    assert snapshot_status(store, "k").health == "missing"
    with store.session("k") as w:
        w.append_message("user", "tenth")
    assert snapshot_status(store, "k").seq == 10
    with store.session("k") as w:
        for i in range(9):
            w.append_message("user", f"more {i}")
    assert snapshot_status(store, "k").seq == 10  # 9 past the snapshot: not yet
    store.snapshot_every = 0
    with store.session("k") as w:
        for _ in range(20):
            w.append_message("user", "x")
    assert snapshot_status(store, "k").seq == 10  # disabled


def test_a_torn_tail_after_the_snapshot_is_cut_on_open(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        for i in range(5):
            w.append_message("user", f"m{i}")
    write_snapshot(store, "k")
    with open(store.path_for("k"), "ab") as f:
        f.write(b'{"type":"message","seq":6')
    loaded = store.load("k")
    assert loaded.snapshot_seq == 5 and loaded.torn is not None
    writer = store.session("k")
    report = store.open_report("k")
    assert report is not None and report.torn is not None
    assert writer.append_message("user", "next") == 6
    writer.close()
    assert store.load("k", snapshot=False).state == store.load("k").state


def test_snapshot_file_is_private_and_not_a_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        w.append_message("user", "hi")
    write_snapshot(store, "k")
    path = store.snapshot_path("k")
    assert path.stat().st_mode & 0o777 == 0o600
    assert store.keys() == ["k"]
    names = ["k.jsonl", "k.snapshot", "k.index", "k.ids"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".staging", *names])
    assert list((tmp_path / ".staging").iterdir()) == []  # the temporary was renamed into place
    assert all((tmp_path / n).stat().st_mode & 0o777 == 0o600 for n in names)
    store.delete("k")
    assert not path.exists()


def test_peek_reads_the_anchor_the_snapshot_records() -> None:
    store = MemoryStore()
    writer = store.session("k")
    for i in range(3):
        writer.append_message("user", f"m{i}")
    assert write_snapshot(store, "k").health == "valid"
    data = store.snapshot_bytes("k")
    assert data is not None
    assert peek_snapshot(data, "k") == (writer.seq, writer.state.head)
    assert peek_snapshot(data, "other") is None
    assert peek_snapshot(data[:8], "k") is None
    assert peek_snapshot(b"not a snapshot" * 4, "k") is None


def test_a_sealed_snapshot_that_does_not_decode_is_refused_not_raised() -> None:
    """Correctly sealed (right digest) yet undecodable, e.g. invalid UTF-8 in a string."""
    from sessionledger.eventlog._snapshot import (
        DIGEST_SIZE,
        SnapshotError,
        decode_snapshot,
        digest,
    )

    store = MemoryStore()
    with store.session("bad:1") as w:
        w.append_message("user", "hello")
    assert write_snapshot(store, "bad:1").written
    data = store.snapshot_bytes("bad:1")
    assert data is not None
    body = bytes(data[:-DIGEST_SIZE])
    at = body.index(b"bad:1")  # a msgpack string: the session key
    bad_utf8 = body[:at] + b"\xff" * 5 + body[at + 5 :]
    bad_msgpack = body[:12] + b"\xc1" * 8 + body[20:]  # 0xc1 is never valid msgpack
    for damaged in (bad_utf8, bad_msgpack):
        with pytest.raises(SnapshotError, match="undecodable"):
            decode_snapshot(damaged + digest(damaged, b""), "bad:1")
    assert store.load("bad:1").state.seq == 1  # the store itself still opens from the log


def test_stored_ids_decode_to_an_index_empty_or_not() -> None:
    empty = _dec_hook(IdIndex, {})
    assert isinstance(empty, IdIndex) and dict(empty.items()) == {}
    full = _dec_hook(IdIndex, {"a": 1, "b": 2})
    assert isinstance(full, IdIndex) and dict(full.items()) == {"a": 1, "b": 2}
    with pytest.raises(msgspec.ValidationError):
        _dec_hook(IdIndex, {"a": "x"})
    with pytest.raises(msgspec.ValidationError):
        _dec_hook(IdIndex, [])

"""Index snapshots (format 4): a read costs the window, and the index never wins over the log."""

from __future__ import annotations

import os
import random
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_snapshot import fill

from sessionledger import projections, replay
from sessionledger.eventlog import (
    BaseStore,
    CorruptLogError,
    FileStore,
    LocalKeyFile,
    SessionState,
    StorageError,
    UnsafePathError,
    _filebackend,
    _fileindex,
    _idindex,
    _indexsnap,
    _safeio,
)

KEY = "telegram:42"


def store_with(tmp_path: Path, n: int, *, snapshot: bool = True) -> FileStore:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(n):
            w.append_message("user" if i % 2 == 0 else "assistant", f"message {i} " * 8)
    if snapshot:
        store.write_snapshot(KEY)  # closing wrote one already (past snapshot_every)
        assert store.load(KEY).snapshot_seq == n
    return store


def message_line(seq: int, tokens: int) -> bytes:
    """A message event's line, chained from the zero hash (a record test's log bytes)."""
    from sessionledger.eventlog._codec import ZERO_HASH, encode_line
    from sessionledger.eventlog._events import MessageAppended

    event = MessageAppended.of(
        seq=seq,
        ts=datetime(2026, 1, 1, tzinfo=UTC),
        id=f"m{seq}",
        message={"role": "user"},
        tokens=tokens,
    )
    return encode_line(event, ZERO_HASH)[0]


def test_open_reads_the_index_not_the_messages(tmp_path: Path) -> None:
    store = store_with(tmp_path, 3_000)
    loaded = store.load(KEY)
    assert loaded.snapshot_seq == 3_000 and loaded.events == []
    messages = loaded.state.messages
    assert len(messages) == 3_000 and messages.in_memory == [] and len(messages.ranges) == 1
    assert loaded.state.ids.recent == {}


def test_history_reads_about_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_with(tmp_path, 5_000)
    log_size = store.path_for(KEY).stat().st_size
    read: list[int] = []
    original = _fileindex.FileIndexFiles.read_log

    def counting(self: _fileindex.FileIndexFiles, offset: int, length: int) -> bytes:
        data = original(self, offset, length)
        read.append(len(data))
        return data

    monkeypatch.setattr(_fileindex.FileIndexFiles, "read_log", counting)
    state = store.load(KEY).state
    got = projections.history(state, max_messages=100)
    assert [m["content"].strip() for m in got] == [
        (f"message {i} " * 8).strip() for i in range(4_900, 5_000)
    ]
    # Blocks of 64 records: at most 3 blocks' lines for 100 messages, plus the anchor line.
    assert 0 < sum(read) < log_size / 10
    full = store.load(KEY, snapshot=False).state
    assert projections.history(full, max_messages=100) == got


def test_writer_opens_from_the_snapshot_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with(tmp_path, 500)
    with store.session(KEY) as w:
        w.append_message("user", "after the snapshot")
    starts: list[int] = []
    original = _safeio.read_fd

    def spying(fd: int, offset: int = 0) -> bytes:
        starts.append(offset)
        return original(fd, offset)

    monkeypatch.setattr(_filebackend, "read_fd", spying)
    again = FileStore(tmp_path / "s", durability="none")
    writer = again.session(KEY)
    assert starts and starts[0] > 0  # never byte 0
    assert writer.state == again.load(KEY, snapshot=False).state
    writer.append_message("user", "continues the chain")
    writer.close()
    assert replay.verify(again).ok


def test_snapshot_extension_equals_a_rebuild(tmp_path: Path) -> None:
    """Records are a function of the log: extending writes the bytes a rebuild writes."""
    store = FileStore(tmp_path / "s", durability="none")
    rng = random.Random(5)
    for _ in range(4):
        with store.session(KEY) as w:
            fill(w, rng, 700)
        store.write_snapshot(KEY)
    index = tmp_path / "s" / (store.path_for(KEY).stem + ".index")
    ids = index.with_suffix(".ids")
    extended = (index.read_bytes(), ids.read_bytes(), store.snapshot_bytes(KEY))
    assert store.load(KEY).state == store.load(KEY, snapshot=False).state
    store.write_snapshot(KEY, rebuild=True)
    assert (index.read_bytes(), ids.read_bytes(), store.snapshot_bytes(KEY)) == extended


def test_a_damaged_index_falls_back_to_the_log(tmp_path: Path) -> None:
    store = store_with(tmp_path, 2_000)
    index = tmp_path / "s" / (store.path_for(KEY).stem + ".index")
    data = bytearray(index.read_bytes())
    data[-100] ^= 0xFF
    index.write_bytes(bytes(data))
    state = store.load(KEY).state
    assert projections.history(state, max_messages=50) == projections.history(
        store.load(KEY, snapshot=False).state, max_messages=50
    )
    assert state.messages.source is None  # every message now in memory, from the log
    assert store.write_snapshot(KEY, rebuild=True).written
    assert store.load(KEY).state.messages.source is not None


def test_a_short_index_means_no_snapshot(tmp_path: Path) -> None:
    store = store_with(tmp_path, 300)
    index = tmp_path / "s" / (store.path_for(KEY).stem + ".index")
    os.truncate(index, 64 * 10)
    loaded = store.load(KEY)
    assert loaded.snapshot_seq == 0 and len(loaded.state.messages) == 300


def test_an_edited_body_before_the_snapshot_is_refused(tmp_path: Path) -> None:
    store = store_with(tmp_path, 200)
    path = store.path_for(KEY)
    data = path.read_bytes()
    at = data.index(b"message 150 ")
    path.write_bytes(data[:at] + b"MESSAGE" + data[at + 7 :])  # same length, hash field kept
    state = store.load(KEY).state  # the snapshot's own line is intact: it is used
    with pytest.raises(CorruptLogError, match="does not chain"):
        projections.history(state, max_messages=100)
    assert not replay.verify(store).ok


def test_a_replaced_log_makes_the_snapshot_stale(tmp_path: Path) -> None:
    store = store_with(tmp_path, 300)
    store.delete(KEY)
    with store.session(KEY) as w:
        w.append_message("user", "a new life")
    loaded = store.load(KEY)
    assert len(loaded.state.messages) == 1 and loaded.state.messages[0].message["content"]


def test_retried_ids_are_found_on_disk_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(300):
            w.append_message("user", f"m{i}", id=f"id-{i}")
    store.write_snapshot(KEY)
    writer = FileStore(tmp_path / "s", durability="none").session(KEY)
    assert writer.state.ids.recent == {}
    assert writer.append_message("user", "again", id="id-17") == 18  # a retry: nothing written
    assert writer.seq == 300
    # Every digest collides: a new id is still new (each candidate is checked on its line).
    monkeypatch.setattr(_idindex, "id_digest", lambda event_id, key=b"": b"\0" * 8)
    blind = FileStore(tmp_path / "s2", durability="none")
    with blind.session(KEY) as w:
        for i in range(50):
            w.append_message("user", f"m{i}", id=f"id-{i}")
    blind.write_snapshot(KEY)
    w2 = FileStore(tmp_path / "s2", durability="none").session(KEY)
    assert w2.append_message("user", "new", id="fresh") == 51
    assert w2.append_message("user", "retry", id="id-3") == 4
    w2.close()
    writer.close()


def test_a_damaged_id_file_still_finds_retries(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(100):
            w.append_message("user", f"m{i}", id=f"id-{i}")
    store.write_snapshot(KEY)
    ids = tmp_path / "s" / (store.path_for(KEY).stem + ".ids")
    ids.write_bytes(b"\xff" * ids.stat().st_size)
    writer = FileStore(tmp_path / "s", durability="none").session(KEY)
    assert writer.append_message("user", "again", id="id-42") == 43
    assert writer.append_message("user", "new", id="id-new") == 101
    writer.close()


def test_close_reads_only_what_was_written_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with(tmp_path, 2_000)
    line_start = store.load(KEY).valid_length - 1
    offsets: list[int] = []
    original = FileStore.read_tail

    def spying(self: FileStore, key: str, offset: int) -> tuple[int, bytes]:
        offsets.append(offset)
        return original(self, key, offset)

    monkeypatch.setattr(FileStore, "read_tail", spying)
    monkeypatch.setattr(FileStore, "read_bytes", None)  # a full read would fail
    again = FileStore(tmp_path / "s", durability="none")
    with again.session(KEY) as w:
        for i in range(300):
            w.append_message("user", f"late {i}")
    assert offsets and min(offsets) > line_start - 2_000
    assert again.load(KEY).snapshot_seq == 2_300


def test_exists_is_a_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_with(tmp_path, 3, snapshot=False)

    def no_reads(path: str) -> bytes:
        raise AssertionError("exists() read the log")

    monkeypatch.setattr(_filebackend, "read_whole", no_reads)
    assert store.exists(KEY) and not store.exists("other")
    os.symlink(store.path_for(KEY), store.path_for("link"))
    with pytest.raises(UnsafePathError):
        store.exists("link")
    os.mkdir(store.path_for("dir"))
    with pytest.raises(UnsafePathError):
        store.exists("dir")

    def eio(*args: object, **kwargs: object) -> os.stat_result:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "stat", eio)
    with pytest.raises(StorageError, match="Input/output error"):
        store.exists(KEY)


def test_delete_and_trash_remove_the_index_files(tmp_path: Path) -> None:
    store = store_with(tmp_path, 10)
    root = tmp_path / "s"
    assert any(p.suffix == ".index" for p in root.iterdir())
    report = store.cleanup(0, now=datetime.now(UTC) + timedelta(hours=1))
    assert report.trashed == [KEY]
    assert not any(p.suffix in (".index", ".ids") for p in root.iterdir())
    store.restore(store.trash()[0])
    assert store.load(KEY).snapshot_seq == 0  # the restored snapshot has no index: not used
    assert store.write_snapshot(KEY).written and store.load(KEY).snapshot_seq == 10
    store.delete(KEY)
    assert not any(p.suffix in (".index", ".ids", ".snapshot") for p in root.iterdir())


@pytest.mark.parametrize(
    "cut", [slice(250, None), slice(None, 30), slice(40, 60), slice(1, 9, 2), -1]
)
def test_deleting_from_an_indexed_list_is_list_deletion(tmp_path: Path, cut: slice | int) -> None:
    store = store_with(tmp_path, 300)
    with store.session(KEY) as w:
        w.append_message("user", "in memory")
    messages = store.load(KEY).state.messages
    assert messages.ranges and messages.in_memory
    expected = list(messages)
    del expected[cut]
    del messages[cut]
    assert list(messages) == expected and len(messages) == len(expected)


def test_a_closing_writer_indexes_from_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close path works from the writer's state (decoding only lines it no longer holds)
    and writes the bytes a rebuild writes."""
    from sessionledger.eventlog import _indexsnap, _views

    store = store_with(tmp_path, 400)
    written: list[bool] = []
    original = _indexsnap.extend_from_state

    def spying(*args: object, **kwargs: object) -> bytes | None:
        blob = original(*args, **kwargs)  # type: ignore[arg-type]
        written.append(blob is not None)
        return blob

    monkeypatch.setattr(_views, "extend_from_state", spying)
    rng = random.Random(3)
    with FileStore(tmp_path / "s", durability="none").session(KEY) as w:
        fill(w, rng, 600)
        w.append_message("user", "last", id="the-last")
    assert written == [True]
    fresh = FileStore(tmp_path / "s", durability="none")
    assert fresh.load(KEY).events == []
    assert fresh.load(KEY).state == fresh.load(KEY, snapshot=False).state
    index = tmp_path / "s" / (store.path_for(KEY).stem + ".index")
    before = (index.read_bytes(), index.with_suffix(".ids").read_bytes(), fresh.snapshot_bytes(KEY))
    fresh.write_snapshot(KEY, rebuild=True)
    after = (index.read_bytes(), index.with_suffix(".ids").read_bytes(), fresh.snapshot_bytes(KEY))
    assert before == after
    assert fresh.session(KEY).append_message("user", "again", id="the-last") == 1001


def test_sealed_sessions_keep_format_2_snapshots(tmp_path: Path) -> None:
    """Sealed content never sits in an index as offsets to ciphertext: the snapshot keeps it."""
    store = FileStore(
        tmp_path / "s",
        durability="none",
        key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"),
    )
    with store.session(KEY) as w:
        for i in range(300):
            w.append_message("user", f"secret {i}")
    store.redact(KEY, 10)
    store.write_snapshot(KEY)
    blob = store.snapshot_bytes(KEY)
    assert blob is not None and not _indexsnap.is_index_snapshot(blob)
    reopened = FileStore(
        tmp_path / "s",
        durability="none",
        key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"),
    )
    assert reopened.load(KEY).snapshot_seq > 0
    assert reopened.load(KEY).state == reopened.load(KEY, snapshot=False).state


def test_a_window_slice_is_one_read_and_equals_indexing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with(tmp_path, 3_000)
    reads: list[tuple[int, int]] = []
    original = _fileindex.FileIndexFiles.read_log

    def counting(self: _fileindex.FileIndexFiles, offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return original(self, offset, length)

    monkeypatch.setattr(_fileindex.FileIndexFiles, "read_log", counting)
    messages = store.load(KEY).state.messages
    reads.clear()
    window = messages[2_500:]
    assert len(reads) == 1  # 500 messages over 9 blocks: one read
    one_by_one = store.load(KEY).state.messages
    assert window == [one_by_one[i] for i in range(2_500, 3_000)]
    # With holes (the ranges a Cleared keep or a redaction leave): still each message once.
    keep = [i for i in range(3_000) if i % 7 != 3 and not 1_000 <= i < 1_700]
    messages.keep(keep)
    fresh = store.load(KEY).state.messages
    assert len(keep) > 1_900
    assert messages[100:1_900] == [fresh[keep[i]] for i in range(100, 1_900)]
    assert messages[::-500] == [fresh[keep[i]] for i in range(len(keep) - 1, -1, -500)]


def _settled(store: BaseStore, writer_state: SessionState) -> None:
    full = store.load(KEY, snapshot=False).state
    assert writer_state == full
    assert projections.history(full, max_messages=80) == projections.history(
        writer_state, max_messages=80
    )


@pytest.mark.parametrize("opened_from_snapshot", [False, True])
def test_a_writer_lets_its_own_events_go(tmp_path: Path, opened_from_snapshot: bool) -> None:
    """Past settle_every events a writer indexes what it holds and reads it back on demand;
    its state, its history and its retried ids stay exactly the log's."""
    store = (
        store_with(tmp_path, 300)
        if opened_from_snapshot
        else FileStore(tmp_path / "s", durability="none")
    )
    store.settle_every = 100
    w = store.session(KEY)
    seqs: dict[str, int] = {}
    for i in range(450):
        if i % 50 == 7:
            seqs[f"meta-{i}"] = w.update_metadata(set={"n": i}, id=f"meta-{i}")
        seqs[f"id-{i}"] = w.append_message("user", f"mine {i} " * 5, id=f"id-{i}")
        state = w.state
        assert len(state.messages.in_memory) <= 100 and len(state.ids.recent) <= 100
    assert state.messages.source is not None and state.ids.cold is not None
    _settled(store, state)
    size = store.path_for(KEY).stat().st_size
    for event_id in ("id-0", "meta-7", "id-200", "id-449"):  # retries: found, nothing written
        assert w.append_message("user", "again", id=event_id) == seqs[event_id]
    assert store.path_for(KEY).stat().st_size == size
    w.close()
    assert replay.verify(store).ok
    again = FileStore(tmp_path / "s", durability="none")
    assert again.load(KEY).state == again.load(KEY, snapshot=False).state


def test_two_stores_settling_one_session_agree(tmp_path: Path) -> None:
    """Two writers (two store objects, as two processes) append in turns and both settle:
    each one's state stays the log's, and the log verifies."""
    a = FileStore(tmp_path / "s", durability="none")
    b = FileStore(tmp_path / "s", durability="none")
    a.settle_every = b.settle_every = 64
    wa, wb = a.session(KEY), b.session(KEY)
    rng = random.Random(3)
    for i in range(600):
        writer = wa if rng.random() < 0.5 else wb
        writer.append_message("user" if i % 2 else "assistant", f"turn {i}", id=f"t{i}")
        # Each settles past the snapshot the other one moved on, so neither holds more.
        assert len(writer.state.messages.in_memory) <= 64
    wa.refresh()
    wb.refresh()
    _settled(a, wa.state)
    _settled(b, wb.state)
    assert wa.append_message("user", "dup", id="t5") == wb.append_message("user", "d", id="t5")
    wa.close()
    wb.close()
    assert replay.verify(a).ok


@pytest.mark.anyio
async def test_an_async_writer_lets_its_own_events_go(tmp_path: Path) -> None:
    from sessionledger.eventlog import AsyncFileStore

    store = AsyncFileStore(tmp_path / "s", durability="none")
    store.sync.settle_every = 50
    async with store.session(KEY) as w:
        for i in range(180):
            await w.append_message("user", f"async {i}", id=f"a{i}")
        assert len(w.state.messages.in_memory) <= 50 and w.state.messages.source is not None
        _settled(store.sync, w.state)
        assert await w.append_message("user", "again", id="a3") == 4
    assert replay.verify(store.sync).ok


class _ZeroHasher:
    """A hasher whose every digest is eight zero bytes (every id digest collides)."""

    def copy(self) -> _ZeroHasher:
        return self

    def update(self, data: bytes) -> None:
        pass

    def digest(self) -> bytes:
        return b"\0" * 8


@pytest.mark.parametrize("collide", [False, True])
def test_ids_stay_exact_past_the_sorted_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collide: bool
) -> None:
    """Past the first lookups the on-disk id digests are sorted for binary search, and a
    settling writer carries them over: retries are still found wherever they are, and new ids
    (even when every digest collides) are still new."""
    if collide:
        for module in (_idindex, _indexsnap):
            monkeypatch.setattr(module, "id_digest", lambda event_id, key=b"": b"\0" * 8)
        # A settling writer digests the ids it holds with the primed hasher itself.
        monkeypatch.setattr(_indexsnap, "id_hasher", lambda key=b"": _ZeroHasher())
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(300):
            w.append_message("user", f"m{i}", id=f"id-{i}")
    store.write_snapshot(KEY)
    again = FileStore(tmp_path / "s", durability="none")
    again.settle_every = 40
    writer = again.session(KEY)
    seq = 300
    for i in range(120):  # new ids: past the scans, across three settles
        seq += 1
        assert writer.append_message("user", f"n{i}", id=f"new-{i}") == seq
        if i % 10 == 0:
            assert writer.append_message("user", "retry", id=f"id-{i * 2}") == i * 2 + 1
            assert writer.append_message("user", "retry", id=f"new-{i // 2}") == 301 + i // 2
    assert writer.state.ids.recent.keys() < {f"new-{i}" for i in range(120)}
    assert writer.state.ids == again.load(KEY, snapshot=False).state.ids
    writer.close()


def test_a_writer_settles_past_an_older_snapshot(tmp_path: Path) -> None:
    """A snapshot put back older than the one a writer settled on (another handle closing
    late writes its older state) does not stop the writer settling: the lines in between are
    read from the log."""
    store = FileStore(tmp_path / "s", durability="none")
    store.settle_every = 50
    w = store.session(KEY)
    for i in range(60):
        w.append_message("user", f"a {i}", id=f"a{i}")
    older = store.snapshot_bytes(KEY)
    assert older is not None
    for i in range(60):
        w.append_message("user", f"b {i}", id=f"b{i}")
    store.put_snapshot(KEY, older)  # back to seq 50
    for i in range(120):
        w.append_message("assistant", f"c {i}", id=f"c{i}")
        assert len(w.state.messages.in_memory) <= 50
    _settled(store, w.state)
    assert w.append_message("user", "again", id="b7") == 68
    w.close()
    assert replay.verify(store).ok


@pytest.mark.parametrize("compress", [False, True])
def test_a_writer_from_the_index_reads_on_after_the_log_rolls(
    tmp_path: Path, compress: bool
) -> None:
    """A writer opened from the index that rolls the log into a new segment still reads the
    messages it holds as offsets: they are in the closed segment now."""
    store_with(tmp_path, 300)
    size = FileStore(tmp_path / "s").path_for(KEY).stat().st_size
    store = FileStore(tmp_path / "s", durability="none", segment_bytes=size + 2_000)
    w = store.session(KEY)
    assert w.state.messages.source is not None
    for i in range(60):
        w.append_message("assistant", f"after {i} " * 8)
    assert store.path_for(KEY).with_name(store.path_for(KEY).stem + ".1.seg").exists()
    if compress:
        assert store.compress_segments(KEY)
    full = store.load(KEY, snapshot=False).state
    assert list(w.state.messages) == list(full.messages)
    assert projections.history(w.state, max_messages=200) == projections.history(
        full, max_messages=200
    )
    w.close()


def test_a_settling_writer_indexes_its_messages_as_their_lines_say(tmp_path: Path) -> None:
    """The records a settling writer packs for the messages it holds (roles, flags, tokens,
    offsets, hashes) are the records of their lines in the log, read back and decoded."""
    import msgspec

    from sessionledger.eventlog._events import MessageAppended
    from sessionledger.eventlog._msgindex import RECORD, fill_spans, pack_record

    kinds: list[dict[str, object]] = [
        {"role": "user", "content": "hi", "media": ["/a.png"]},
        {"role": "user", "content": "plain", "media": []},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "/new", "_command": True},
        {"role": "user", "content": "delivered", "_channel_delivery": True},
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": "an unknown role"},
        {"role": "assistant", "content": "", "tool_calls": []},
    ]
    store = FileStore(tmp_path / "s", durability="none")
    store.settle_every = 20
    w = store.session(KEY)
    for i in range(90):
        w.append_message_dict(kinds[i % len(kinds)])
    assert w.state.messages.source is not None  # it settled
    w.close()
    log = store.path_for(KEY).read_bytes()
    records = store.path_for(KEY).with_suffix(".index").read_bytes()
    expected: list[bytes] = []
    offset = 0
    for line in log.splitlines(keepends=True):
        if line.startswith(b'{"type":"message"'):
            event = msgspec.json.decode(line, type=MessageAppended)
            expected.append(pack_record(event, offset, len(line)))
        offset += len(line)
    fill_spans(expected, 0, log, 0, b"", None)  # block digests, from the log
    held = len(records) // RECORD.size  # what the last settle indexed (close adds no more)
    assert len(expected) == 90 and 60 <= held <= 90
    assert records[: held * RECORD.size] == b"".join(expected[:held])


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["body", "between", "partial block"])
def test_a_flipped_log_byte_under_the_index_is_refused(tmp_path: Path, where: str) -> None:
    """A span digest checks a block's bytes, lines between messages included: a changed byte
    is a CorruptLogError naming the message (or the line) where the chain breaks."""
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(200):  # 3 full blocks of 64 messages, then a partial one
            w.append_message("user", f"message {i} " * 8)
            if i == 150:
                w.update_metadata({"title": "between messages 151 and 152"})
    store.write_snapshot(KEY)
    path = store.path_for(KEY)
    data = path.read_bytes()
    if where == "body":
        at, match = data.index(b"message 140 "), "message 141 .* does not chain"
    elif where == "between":
        at, match = data.index(b"between messages"), "a line between .* does not chain"
    else:
        at, match = data.index(b"message 195 "), "message 197 .* does not chain"
    _flip(path, at)
    state = store.load(KEY).state  # the snapshot's own line is intact: it is used
    assert state.messages.source is not None
    with pytest.raises(CorruptLogError, match=match):
        projections.history(state, max_messages=100)
    assert not replay.verify(store).ok


def test_a_truncated_log_under_the_index_is_refused(tmp_path: Path) -> None:
    store = store_with(tmp_path, 200)
    state = store.load(KEY).state
    path = store.path_for(KEY)
    data = path.read_bytes()
    os.truncate(path, data.index(b"message 190 "))
    with pytest.raises(CorruptLogError):
        projections.history(state, max_messages=50)


def test_a_format_3_index_snapshot_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    store = store_with(tmp_path, 300)
    snap = tmp_path / "s" / (store.path_for(KEY).stem + ".snapshot")
    snap.write_bytes(b"SLSNAP3\n" + snap.read_bytes()[8:])
    loaded = store.load(KEY)
    assert loaded.snapshot_seq == 0 and len(loaded.state.messages) == 300
    assert store.write_snapshot(KEY).written
    assert store.load(KEY).state.messages.source is not None


def test_an_extension_never_vouches_for_bytes_changed_under_the_index(tmp_path: Path) -> None:
    """Extending a partial block re-checks its bytes against the snapshot's span digest of it
    first: a byte changed there is not hashed into the new digests."""
    store = store_with(tmp_path, 100)  # records 64..99: a partial block
    path = store.path_for(KEY)
    _flip(path, path.read_bytes().index(b"message 70 "))
    with store.session(KEY) as w:
        for i in range(50):
            w.append_message("user", f"more {i}")
    store.write_snapshot(KEY)
    with pytest.raises(CorruptLogError):
        projections.history(store.load(KEY).state, max_messages=200)


def test_a_block_continued_after_lines_that_are_not_messages(tmp_path: Path) -> None:
    """A snapshot whose last lines are not messages: its partial block's span digest runs to
    its line end, and the extensions after it (one adding no message) continue that block
    from there (the same records and snapshot as a rebuild's)."""
    store = store_with(tmp_path, 100)
    with store.session(KEY) as w:
        w.update_metadata({"title": "t"})
        w.update_metadata({"title": "u"})
    store.write_snapshot(KEY)
    with store.session(KEY) as w:
        for i in range(50):
            w.append_message("user", f"more {i}")
    store.write_snapshot(KEY)
    index = tmp_path / "s" / (store.path_for(KEY).stem + ".index")
    extended = index.read_bytes()
    state = store.load(KEY).state
    assert state.messages.source is not None
    plain = store.load(KEY, snapshot=False).state
    assert projections.history(state, max_messages=200) == projections.history(
        plain, max_messages=200
    )
    snapshot = store.snapshot_bytes(KEY)
    store.write_snapshot(KEY, rebuild=True)
    assert index.read_bytes() == extended and store.snapshot_bytes(KEY) == snapshot


def test_a_line_changed_before_its_writer_settles_is_never_vouched_for(tmp_path: Path) -> None:
    """A settling writer vouches only for the bytes it wrote: a line of its own changed in the
    log before it settles is not indexed from the changed bytes (it keeps its events)."""
    store = FileStore(tmp_path / "s", durability="none")
    store.settle_every = 100
    w = store.session(KEY)
    for i in range(50):
        w.append_message("user", f"message {i} " * 8)
    path = store.path_for(KEY)
    data = path.read_bytes()
    at = data.index(b"message 20 ")
    path.write_bytes(data[:at] + b"MESSAGE" + data[at + 7 :])  # same length, hash field kept
    for i in range(50, 120):
        w.append_message("user", f"message {i} " * 8)
    assert w.state.messages.source is None  # the settle did not go through
    assert w.state.messages[20].message["content"] == "message 20 " * 8
    w.close()
    with pytest.raises(CorruptLogError):
        projections.history(FileStore(tmp_path / "s").load(KEY).state, max_messages=200)


def test_a_format_3_index_snapshot_is_no_problem_for_verify_and_recover_rebuilds_it(
    tmp_path: Path,
) -> None:
    """An index snapshot an earlier version wrote (format 3) is treated as none: verify does
    not report the store as damaged (its logs are whole), and recover replaces it."""
    store = store_with(tmp_path, 300)
    snap = tmp_path / "s" / (store.path_for(KEY).stem + ".snapshot")
    snap.write_bytes(b"SLSNAP3\n" + snap.read_bytes()[8:])
    status = store.snapshot_status(KEY)
    assert status.health == "missing" and "format 3" in status.reason
    report = replay.verify(store)
    assert report.ok, report.problems
    recovered = replay.recover(store)
    assert recovered.ok and recovered.snapshots_rebuilt == [KEY]
    assert store.snapshot_status(KEY).health == "valid"
    assert store.load(KEY).state.messages.source is not None


def test_a_read_costs_the_window_when_many_lines_follow_the_last_message(
    tmp_path: Path,
) -> None:
    """A window of the newest messages reads about its own lines, not the metadata lines
    written after the last message (a partial block's digest ran to the snapshot's line: 2 MB
    read here), and extending the index past them reads them once (checked on the chain)."""
    store = store_with(tmp_path, 1_000, snapshot=False)
    with store.session(KEY) as w:
        for i in range(10_000):
            w.update_metadata({"status": f"tick {i}"})
    store.write_snapshot(KEY)
    state = store.load(KEY).state
    source = state.messages.source
    assert source is not None
    reads: list[int] = []
    original = source.read

    def counting(offset: int, length: int) -> bytes:
        reads.append(length)
        return original(offset, length)

    source.read = counting  # type: ignore[method-assign]
    assert len(projections.history(state, max_messages=50)) == 50
    assert sum(reads) < 2 * 64 * 400  # two blocks of message lines of about 330 bytes
    with store.session(KEY) as w:
        w.append_message("user", "after the ticks")
    store.write_snapshot(KEY)
    state = store.load(KEY).state
    plain = store.load(KEY, snapshot=False).state
    assert projections.history(state, max_messages=100) == projections.history(
        plain, max_messages=100
    )
    extended = store.snapshot_bytes(KEY)
    store.write_snapshot(KEY, rebuild=True)
    assert store.snapshot_bytes(KEY) == extended


def test_an_extension_checks_the_lines_after_the_last_message_on_the_chain(
    tmp_path: Path,
) -> None:
    """The lines between a partial block's last message and the snapshot's line are under no
    digest: an extension that takes them into the block checks them on the chain first."""
    store = store_with(tmp_path, 100, snapshot=False)  # records 64..99: a partial block
    with store.session(KEY) as w:
        w.update_metadata({"title": "between the blocks"})
        w.update_metadata({"title": "the snapshot's line"})
    store.write_snapshot(KEY)
    path = store.path_for(KEY)
    _flip(path, path.read_bytes().index(b"between the blocks"))
    with store.session(KEY) as w:
        w.append_message("user", "more")
    assert not store.write_snapshot(KEY).written
    with pytest.raises(CorruptLogError):
        store.write_snapshot(KEY)


def _sealed(tmp_path: Path) -> FileStore:
    return FileStore(
        tmp_path / "s",
        durability="none",
        key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"),
    )


def test_a_redacted_sessions_writer_keeps_no_line_with_its_events(tmp_path: Path) -> None:
    """A settling writer keeps each message's line until it settles; a redacted (or erased)
    session never settles, so its writer keeps its events without their lines (they were
    about a fifth of its memory, for nothing)."""
    from sessionledger.eventlog._events import HELD_LINE

    store = _sealed(tmp_path)
    with store.session(KEY) as w:
        for i in range(10):
            w.append_message("user", f"secret {i}")
        assert all(HELD_LINE in m.__dict__ for m in w.state.messages.in_memory)
    store.redact(KEY, 3)
    with store.session(KEY) as w:
        for i in range(10):
            w.append_message("user", f"more {i}")
        assert len(w.state.messages.in_memory) == 20
        assert not any(HELD_LINE in m.__dict__ for m in w.state.messages.in_memory[10:])


@pytest.mark.anyio
async def test_a_redacted_sessions_async_writer_keeps_no_line_with_its_events(
    tmp_path: Path,
) -> None:
    from sessionledger.eventlog import AsyncFileStore
    from sessionledger.eventlog._events import HELD_LINE

    store = _sealed(tmp_path)
    with store.session(KEY) as w:
        w.append_message("user", "secret")
    store.redact(KEY, 1)
    astore = AsyncFileStore(
        tmp_path / "s",
        durability="none",
        key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"),
    )
    async with await astore.session(KEY) as aw:
        for i in range(5):
            await aw.append_message("user", f"more {i}")
        held = aw.state.messages.in_memory
        assert len(held) == 6 and not any(HELD_LINE in m.__dict__ for m in held)
    await astore.close()


def test_a_window_over_lines_between_messages_decodes_each_run_once(tmp_path: Path) -> None:
    """A window is decoded one run of adjacent message lines at a time (metadata lines
    between them are skipped, never decoded as messages): the same events as the log's fold,
    in order, whatever the runs."""
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(300):
            w.append_message("user" if i % 2 == 0 else "assistant", f"message {i} " * 4)
            if i % 7 in (2, 3):  # runs of 1 to 5 messages, some with two lines between
                w.update_metadata({"n": i})
    store.write_snapshot(KEY)
    state = store.load(KEY).state
    assert state.messages.source is not None
    plain = store.load(KEY, snapshot=False).state
    assert state.messages[37:291] == plain.messages[37:291]
    assert projections.history(state, max_messages=250) == projections.history(
        plain, max_messages=250
    )


def test_a_run_that_disagrees_with_its_records_is_left_to_the_line_by_line_check() -> None:
    """``_decode_runs`` returns None (the caller then names the line) when the lines do not
    say what the records say: another seq or tokens, or no final newline."""
    from sessionledger.eventlog import _msgindex
    from sessionledger.eventlog._events import MessageAppended

    lines = [message_line(s, t) for s, t in ((1, 5), (2, 6), (3, 7))]
    data = b"".join(lines)
    offsets = [0, len(lines[0]), len(lines[0]) + len(lines[1])]

    def runs(said: list[tuple[int, int]], buffer: bytes = data) -> list[MessageAppended] | None:
        seqs = [s for s, _ in said]
        tokens = [t for _, t in said]
        lengths = [len(line) for line in lines]
        return _msgindex._decode_runs(seqs, offsets, lengths, tokens, buffer, 0)

    good = runs([(1, 5), (2, 6), (3, 7)])
    assert good is not None and [(e.seq, e.tokens) for e in good] == [(1, 5), (2, 6), (3, 7)]
    assert runs([(1, 5), (2, 9), (3, 7)]) is None
    assert runs([(1, 5), (4, 6), (3, 7)]) is None
    assert runs([(1, 5), (2, 6), (3, 7)], data[:-1] + b" ") is None


def test_a_run_is_accepted_only_when_each_record_is_exactly_one_line() -> None:
    """The fast path accepts no more than the line-by-line check: records whose bytes make
    the same run but are not one message line each (a line cut before its newline, two lines
    in one record and a blank line in the next, two values on one line) are left to the
    line-by-line check, which refuses them."""
    from sessionledger.eventlog import _msgindex
    from sessionledger.eventlog._events import MessageAppended

    one, two = message_line(1, 1), message_line(2, 2)

    def runs(buffer: bytes, lengths: list[int]) -> list[MessageAppended] | None:
        offsets, offset = [], 0
        for length in lengths:
            offsets.append(offset)
            offset += length
        assert offset == len(buffer)
        seqs = list(range(1, len(lengths) + 1))
        return _msgindex._decode_runs(seqs, offsets, lengths, seqs, buffer, 0)

    assert runs(one + two, [len(one), len(two)]) is not None
    # The first record stops before its newline, the second starts with it.
    assert runs(one + two, [len(one) - 1, len(two) + 1]) is None
    # Two lines in the first record, a blank line as the second.
    assert runs(one + two + b"\n", [len(one) + len(two), 1]) is None
    # Two values on one line, cut between them.
    glued = one[:-1] + two
    assert runs(glued, [len(one) - 1, len(two)]) is None
    # Two values on one line and a blank line, each record ending in a newline.
    assert runs(glued + b"\n", [len(glued), 1]) is None


def test_an_empty_record_where_the_read_ends_leaves_the_run_to_the_line_check() -> None:
    """A record of no bytes where the read ends (a damaged record file) leaves the run to the
    line-by-line check, which names it; it never raises IndexError."""
    from sessionledger.eventlog import _msgindex

    one = message_line(1, 1)
    for seqs, offsets, lengths in (
        ([1, 2], [0, len(one)], [len(one), 0]),
        ([2], [len(one)], [0]),
    ):
        assert _msgindex._decode_runs(seqs, offsets, lengths, seqs, one, 0) is None


def test_a_record_past_its_blocks_bytes_is_named_not_an_index_error() -> None:
    """A record inside a block that points past the bytes the block's records span (a record
    file written with the key but wrong) is named as a CorruptLogError, on the fast path and
    the line-by-line one alike; no IndexError leaves the library."""
    from collections.abc import Callable
    from typing import Any

    from sessionledger.eventlog import _msgindex
    from sessionledger.eventlog._events import MessageAppended

    one, two = message_line(1, 1), message_line(2, 2)
    log = one + two
    hasher = _msgindex.span_hasher(b"").copy()
    hasher.update(log)

    class Source:
        where = "planted"
        hash_key = b""
        count = 2
        last_span = hasher.digest()[:16]
        opener: Callable[[MessageAppended], dict[str, Any]] | None = None

        def records(self, start: int, count: int) -> bytes:
            packed = [
                _msgindex.RECORD.pack(1, 0, 10_000, 1, 1, 0, bytes(16), bytes(16)),
                _msgindex.RECORD.pack(2, len(one), len(two), 2, 1, 0, bytes(16), bytes(16)),
            ]
            return b"".join(packed[start : start + count])

        def read(self, offset: int, length: int) -> bytes:
            return log[offset : offset + length]

        def all_messages(self) -> list[MessageAppended]:
            raise AssertionError("not used")

    with pytest.raises(CorruptLogError, match="message 1 at byte 0"):
        _msgindex._read_lines(Source(), 0, 2)


@pytest.mark.parametrize("native", [True, False])
def test_a_reads_columns_are_the_records_fields(
    monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """The seqs, offsets, lengths and tokens a read takes from packed records (strided views
    on a little-endian machine, a narrower struct elsewhere) are the records' own fields,
    at the edges of their types too."""
    from sessionledger.eventlog import _msgindex

    if native and not _msgindex._NATIVE_LE:
        pytest.skip("not a little-endian machine")
    monkeypatch.setattr(_msgindex, "_NATIVE_LE", native)
    rng = random.Random(7)
    fields = [(2**63 - 1, 2**62 + 5, 2**32 - 1, 2**31 - 1), (1, 0, 1, -(2**31)), (7, 9, 0, 0)]
    fields += [
        (rng.randrange(2**40), rng.randrange(2**40), rng.randrange(2**32), rng.randrange(2**31))
        for _ in range(200)
    ]
    packed = b"".join(
        _msgindex.RECORD.pack(s, o, n, t, 3, 9, rng.randbytes(16), rng.randbytes(16))
        for s, o, n, t in fields
    )
    assert _msgindex._columns(packed) == tuple(list(column) for column in zip(*fields, strict=True))
    with pytest.raises(struct.error):
        _msgindex._columns(packed[:-8])


@pytest.mark.parametrize("count", [2**31, -(2**31) - 1, 2**70, -1])
def test_a_token_count_the_index_cannot_hold_is_refused_at_append(
    tmp_path: Path, count: int
) -> None:
    """A token counter's result must fit the index record (0 to 2**31 - 1): outside it the
    append is refused with the library's error and writes nothing (it was a bare struct.error
    from close() once the line was in the log)."""
    from sessionledger.eventlog import InvalidEventError

    store = FileStore(tmp_path / "s", durability="none", token_counter=lambda m: count)
    with store.session(KEY) as w:
        with pytest.raises(InvalidEventError, match="token_counter returned"):
            w.append_message("user", "hello")
        assert w.state.seq == 0
    assert store.load(KEY).state.seq == 0


def test_a_planted_line_with_a_token_count_past_32_bits_gets_no_index(tmp_path: Path) -> None:
    """A log line (written by hand, or by another tool) whose tokens do not fit a record:
    the snapshot is not written (SnapshotError inside, never a bare struct.error), and the
    session still opens from the log."""
    from sessionledger.eventlog._codec import encode_line
    from sessionledger.eventlog._events import MessageAppended

    store = store_with(tmp_path, 3)
    path = store.path_for(KEY)
    last = store.load(KEY, snapshot=False).state
    event = MessageAppended.of(
        seq=last.seq + 1,
        ts=datetime.now(UTC),
        id="planted",
        message={"role": "user", "content": "big"},
        tokens=2**40,
    )
    line, _ = encode_line(event, last.head, b"")
    with open(path, "ab") as f:
        f.write(line)
    assert not store.write_snapshot(KEY).written
    state = store.load(KEY).state
    assert state.seq == 4 and state.messages[-1].tokens == 2**40


@pytest.mark.parametrize("body", [b"[1]", b'"text"', b"null"])
def test_a_planted_line_whose_message_is_not_an_object_gets_no_index(
    tmp_path: Path, body: bytes
) -> None:
    """A chained log line whose ``message`` is JSON but not an object (written by hand, or by
    another tool): the snapshot is not written (SnapshotError inside, as before the token
    check narrowed that except to struct.error; never the InvalidEventError its decode
    raises), and the session still opens from the log, and closes."""
    import msgspec

    from sessionledger.eventlog._codec import encode_line
    from sessionledger.eventlog._events import MessageAppended

    store = store_with(tmp_path, 3)
    path = store.path_for(KEY)
    last = store.load(KEY, snapshot=False).state
    event = MessageAppended(
        seq=last.seq + 1, ts=datetime.now(UTC), id="planted", body=msgspec.Raw(body), tokens=1
    )
    line, _ = encode_line(event, last.head, b"")
    with open(path, "ab") as f:
        f.write(line)
    assert not store.write_snapshot(KEY).written
    state = store.load(KEY).state
    assert state.seq == 4 and len(state.messages) == 4
    with store.session(KEY) as w:
        w.append_message("user", "after")
    assert store.load(KEY).state.seq == 5


@pytest.mark.parametrize("count", [float("inf"), float("-inf"), float("nan"), None, "many"])
def test_a_token_count_that_is_no_number_is_refused_naming_it(
    tmp_path: Path, count: object
) -> None:
    """A token counter returning what is no count (infinity was a bare OverflowError; nan and
    None were blamed on the message, "a value is not JSON-serialisable") is refused with the
    library's error naming what it returned; nothing is written."""
    from sessionledger.eventlog import InvalidEventError

    def counter(message: object) -> int:
        return count  # type: ignore[return-value]  # what a counter should never return

    store = FileStore(tmp_path / "s", durability="none", token_counter=counter)
    with store.session(KEY) as w:
        with pytest.raises(InvalidEventError, match=f"token_counter returned {count!r} for a"):
            w.append_message("user", "hello")
        assert w.state.seq == 0
    assert store.load(KEY).state.seq == 0

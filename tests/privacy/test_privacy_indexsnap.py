"""A sealed session's index snapshot (format 3): opens to what the log opens to, holds no
plaintext, and nothing in it opens once erase or redact destroyed the keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privacy_support import SECRETS, encrypted_store, files_containing, write_secrets

from sessionledger import projections
from sessionledger.eventlog import WITHHELD, FileStore, KeyUnavailableError, LocalKeyFile
from sessionledger.eventlog._indexsnap import is_index_snapshot
from sessionledger.eventlog._msgindex import RECORD


def _reopen(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))


def _write(tmp_path: Path, key: str = "k", n: int = 300) -> FileStore:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 1
    s = store.session(key, metadata={"title": SECRETS["title"]})
    write_secrets(s)
    for i in range(n):
        s.append_message("user" if i % 2 == 0 else "assistant", f"{SECRETS['message']} #{i}")
    s.close()  # the closing writer writes the snapshot
    return store


def _dicts(store: FileStore, key: str, *, snapshot: bool) -> list[object]:
    return [m.message for m in store.load(key, snapshot=snapshot).state.messages]


def test_a_sealed_session_gets_an_index_snapshot_that_opens_like_its_log(tmp_path: Path) -> None:
    store = _write(tmp_path)
    blob = store.snapshot_path("k").read_bytes()
    assert is_index_snapshot(blob)
    again = _reopen(tmp_path)
    loaded = again.load("k")
    assert loaded.snapshot_seq == loaded.state.seq  # opened from the index snapshot
    state = loaded.state
    assert state.messages.source is not None  # messages are read from the log lines
    assert state.metadata["title"] == SECRETS["title"]
    assert SECRETS["summary"] in (state.compaction.summary if state.compaction else "")
    assert _dicts(again, "k", snapshot=True) == _dicts(again, "k", snapshot=False)
    window = projections.history(state, max_messages=50)
    assert window[-1]["content"] == f"{SECRETS['message']} #299"
    # A writer opened from it goes on, and its closing snapshot extends the index.
    again.snapshot_every = 1
    s = again.session("k")
    s.update_metadata(set={"later": SECRETS["meta"]})
    s.append_message("user", "more")
    s.close()
    third = _reopen(tmp_path)
    assert is_index_snapshot(third.snapshot_path("k").read_bytes())
    reloaded = third.load("k")
    assert reloaded.snapshot_seq == reloaded.state.seq
    assert reloaded.state.metadata["later"] == SECRETS["meta"]
    assert _dicts(third, "k", snapshot=True) == _dicts(third, "k", snapshot=False)
    # No plaintext in any file: the snapshot, the message and id record files included.
    stem = str(store.path_for("k"))[: -len(".jsonl")]
    assert Path(stem + ".index").exists() and Path(stem + ".ids").exists()
    assert files_containing(tmp_path / "s", list(SECRETS.values())) == {}


def test_sealed_message_records_carry_the_role_and_no_content_flags(tmp_path: Path) -> None:
    store = _write(tmp_path, n=0)
    stem = str(store.path_for("k"))[: -len(".jsonl")]
    records = Path(stem + ".index").read_bytes()
    got = [RECORD.unpack_from(records, i) for i in range(0, len(records), RECORD.size)]
    assert [(r[4], r[5]) for r in got] == [(1, 0), (2, 0), (3, 0), (1, 0)]  # no tool flags


def test_without_the_key_the_index_snapshot_reads_as_an_error_never_garbage(
    tmp_path: Path,
) -> None:
    _write(tmp_path)
    plain = FileStore(tmp_path / "s")
    assert plain.snapshot_status("k").health == "valid"  # checked without any key
    with pytest.raises(KeyUnavailableError):
        plain.load("k")
    other = FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "other.key"))
    with pytest.raises(KeyUnavailableError):
        other.load("k")


@pytest.mark.parametrize("how", ["erase", "redact"])
def test_an_old_index_snapshot_put_back_opens_nothing_destroyed(tmp_path: Path, how: str) -> None:
    store = _write(tmp_path, n=20)
    path = store.snapshot_path("k")
    old = path.read_bytes()
    target = store.load("k").state.messages[-5].seq
    if how == "erase":
        store.erase("k")
    else:
        store.redact("k", target)
    assert not path.exists() or path.read_bytes() != old  # dropped with the keys
    path.write_bytes(old)  # an attacker (or a backup) puts the old snapshot back
    again = _reopen(tmp_path)
    messages = again.load("k").state.messages
    if how == "erase":
        assert all(m.message.get(WITHHELD) == "erased" for m in messages)
        assert again.load("k").state.metadata == {}
    else:
        opened = {m.seq: m.message for m in messages}
        assert opened.get(target, {WITHHELD: "redacted"}).get(WITHHELD) == "redacted"
        assert not any(m.get("content") == f"{SECRETS['message']} #15" for m in opened.values())
    text = json.dumps([m.message for m in messages])
    assert f"{SECRETS['message']} #15" not in text


def test_a_sealed_writer_settles_and_keeps_nothing_readable_on_disk(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.settle_every = 50
    s = store.session("k", metadata={"title": SECRETS["title"]})  # no snapshot yet: from byte 0
    texts = [f"{SECRETS['message']} #{i}" for i in range(230)]
    for text in texts:
        s.append_message("user", text)
    # Its own messages left memory (read back from the sealed lines, opened as they are read).
    assert s.state.messages.source is not None
    assert len(s.state.messages.in_memory) < 50
    assert [m.message["content"] for m in s.state.messages] == texts
    assert projections.history(s.state, max_messages=5)[-1]["content"] == texts[-1]
    assert is_index_snapshot(store.snapshot_path("k").read_bytes())
    assert files_containing(tmp_path / "s", list(SECRETS.values())) == {}
    s.update_metadata(set={"later": SECRETS["meta"]})
    for text in texts[:60]:
        s.append_message("assistant", text)  # settles again, extending the sealed index
    again = _reopen(tmp_path)
    loaded = again.load("k")
    assert loaded.snapshot_seq >= 250 and loaded.state.messages.source is not None
    assert loaded.state.metadata == {"title": SECRETS["title"], "later": SECRETS["meta"]}
    assert _dicts(again, "k", snapshot=True) == _dicts(again, "k", snapshot=False)
    assert files_containing(tmp_path / "s", list(SECRETS.values())) == {}
    s.close()


def test_a_settled_sealed_writer_reads_erased_and_redacted_back_as_withheld(
    tmp_path: Path,
) -> None:
    store = encrypted_store(tmp_path)
    store.settle_every = 20
    s = store.session("k")
    for i in range(70):
        s.append_message("user", f"m{i}")
    assert s.state.messages.source is not None
    store.redact("k", 5)
    assert s.state.messages[4].message[WITHHELD] == "redacted"
    assert s.state.messages[5].message["content"] == "m5"
    store.erase("k")
    assert all(m.message[WITHHELD] == "erased" for m in s.state.messages)
    s.append_message("user", "after")  # goes on (and settles again) with the new tree
    assert s.state.messages[-1].message["content"] == "after"
    assert _dicts(_reopen(tmp_path), "k", snapshot=False)[-1] == s.state.messages[-1].message
    s.close()


def test_two_stores_settling_one_sealed_session_in_turn(tmp_path: Path) -> None:
    a = encrypted_store(tmp_path)
    b = _reopen(tmp_path)
    for store in (a, b):
        store.settle_every = 8
    wa, wb = a.session("k"), b.session("k")
    texts = []
    for i in range(90):
        writer = wa if (i // 7) % 2 == 0 else wb  # each catches up on the other's lines
        text = f"{SECRETS['message']} {i}"
        writer.append_message("user" if i % 2 == 0 else "assistant", text)
        texts.append(text)
    seen_a = [m.message["content"] for m in wa.state.messages]  # wrote last: holds all
    seen_b = [m.message["content"] for m in wb.state.messages]  # holds what it caught up on
    assert seen_a == texts and seen_b == texts[: len(seen_b)] and len(seen_b) >= 84
    assert wa.state.messages.source is not None and wb.state.messages.source is not None
    wa.close()
    wb.close()
    again = _reopen(tmp_path)
    assert [m["content"] for m in _dicts(again, "k", snapshot=True)] == texts  # type: ignore[index]
    assert _dicts(again, "k", snapshot=True) == _dicts(again, "k", snapshot=False)
    assert files_containing(tmp_path / "s", list(SECRETS.values())) == {}

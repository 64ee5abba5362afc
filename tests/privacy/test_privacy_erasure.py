"""Crypto-shredding: erase and redact destroy keys, keep the chain, leave nothing readable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privacy_support import SECRETS, contents, encrypted_store, files_containing, write_secrets

from sessionledger import projections, replay
from sessionledger.eventlog import (
    WITHHELD,
    AsyncFileStore,
    Erased,
    FileStore,
    InvalidEventError,
    LocalKeyFile,
    MemoryStore,
    Redacted,
    SessionState,
)
from sessionledger.eventlog._crypto import SessionSeal


def _reopen(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))


def _plaintexts_with_every_key(tmp_path: Path, key: str) -> list[str]:
    """Try to open every sealed field of ``key``'s log with whatever keys the key store holds."""
    store = _reopen(tmp_path)
    keyring = store.keyring
    assert keyring is not None
    data = store.read_bytes(key)
    header = json.loads(data.split(b"\n", 1)[0])
    tree = keyring.tree(header["id"])
    seal = SessionSeal(keyring, key, header["id"], tree)
    out: list[str] = []
    for line in data.splitlines():
        doc = json.loads(line)
        seq = doc["seq"]
        for name, value in _sealed_fields(doc):
            if tree.leaf(seq) is None:
                continue
            out.append(seal.open_bytes(seq, name, value).decode())
    return out


def _sealed_fields(doc: dict[str, object]) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    message = doc.get("message")
    if isinstance(message, dict) and "$sealed" in message:
        fields.append(("message", message["$sealed"]))
    for values in (doc.get("metadata"), doc.get("set")):
        if isinstance(values, dict):
            for k, v in values.items():
                if isinstance(v, dict) and "$sealed" in v:
                    fields.append(("m:" + k, v["$sealed"]))
    extra = doc.get("extra")
    if isinstance(extra, dict) and "$sealed" in extra:
        fields.append(("compacted", extra["$sealed"]))
    return fields


def test_erase_destroys_everything_and_keeps_the_chain(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 2
    s = store.session("telegram:42", metadata={"title": SECRETS["title"]})
    write_secrets(s)
    s.close()
    assert projections.list_sessions(store)
    assert store.snapshot_path("telegram:42").exists()
    before = store.read_bytes("telegram:42")
    seq = store.erase("telegram:42", by="dpo@example", reason="GDPR art. 17")
    after = store.read_bytes("telegram:42")
    assert after.startswith(before)  # nothing rewritten: one line appended
    event = store.load("telegram:42").events[-1]
    assert isinstance(event, Erased) and event.seq == seq
    assert (event.by, event.reason) == ("dpo@example", "GDPR art. 17")
    assert b"dpo@example" in after.splitlines()[-1]
    state = _reopen(tmp_path).load("telegram:42").state
    assert state.metadata == {}
    assert all(m.message[WITHHELD] == "erased" for m in state.messages)
    assert state.compaction is not None and state.compaction.summary == ""
    assert projections.history(state) == []
    assert replay.verify(FileStore(tmp_path / "s")).ok
    # Even with the master key, nothing in any file opens any more.
    assert _plaintexts_with_every_key(tmp_path, "telegram:42") == []
    assert files_containing(tmp_path, list(SECRETS.values())) == {}


def test_erase_and_redact_reach_ended_conversations(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k", metadata={"title": "T"})
    s.append_message("user", "first chat")
    s.clear(reason="new")
    s.append_message("user", "second chat")
    s.clear(reason="new")
    store.redact("k", 1)
    state = _reopen(tmp_path).load("k").state
    assert state.ended[0].preview == []
    assert "second chat" in json.dumps(state.ended[1].preview)
    store.erase("k")
    state = _reopen(tmp_path).load("k").state
    assert [(e.title, e.preview) for e in state.ended] == [("", []), ("", [])]


def test_erased_session_keeps_working(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", "old secret")
    store.erase("k")
    s = store.session("k")
    s.append_message("user", "new words")
    assert contents(_reopen(tmp_path), "k") == [None, "new words"]
    assert [m["content"] for m in projections.history(_reopen(tmp_path).load("k").state)] == [
        "new words"
    ]


def test_redact_one_message(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 2
    s = store.session("k")
    s.append_message("user", "first question")
    target = s.append_message("assistant", SECRETS["reply"])
    s.append_message("user", "second question")
    s.append_message("assistant", "second answer")
    s.close()
    done = store.redact("k", target, by="ops", reason="pasted a card number")
    assert done > target
    event = store.load("k", snapshot=False).events[-1]
    assert isinstance(event, Redacted) and event.target == target
    again = _reopen(tmp_path)
    state = again.load("k").state
    assert [m.seq for m in state.messages] == [1, 2, 3, 4]  # the event and its envelope stay
    assert state.messages[1].message == {"role": "assistant", "content": None, WITHHELD: "redacted"}
    history = [m["content"] for m in projections.history(state)]
    assert history == ["first question", "second question", "second answer"]
    exported = replay.export_nanobot(again, "k")
    assert SECRETS["reply"].encode() not in exported
    assert b'"_withheld": "redacted"' in exported
    assert SECRETS["reply"].encode() not in replay.export_jsonl(again, "k")
    assert replay.verify(FileStore(tmp_path / "s")).ok
    opened = _plaintexts_with_every_key(tmp_path, "k")
    assert opened and not [t for t in opened if SECRETS["reply"] in t]
    assert files_containing(tmp_path, [SECRETS["reply"]]) == {}
    # Redacting again appends nothing; other messages are untouched.
    assert again.redact("k", target) == 0
    assert contents(again, "k")[2:] == ["second question", "second answer"]


def test_redact_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    plain = MemoryStore()
    plain.session("k").append_message("user", "x")
    with pytest.raises(InvalidEventError, match="encrypted store"):
        plain.redact("k", 1)
    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", "x")
    s.update_metadata(set={"a": 1})
    with pytest.raises(InvalidEventError, match="not a message"):
        store.redact("k", 2)
    with pytest.raises(InvalidEventError, match="not a message"):
        store.redact("k", 99)
    with pytest.raises(InvalidEventError):
        store.redact("k", 0)
    with pytest.raises(InvalidEventError):
        store.erase("k", by=123)  # type: ignore[arg-type]
    assert contents(store, "k") == ["x"]


def test_redact_a_trimmed_message(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", "gone from view")
    s.append_message("user", "kept")
    s.trim(1, "file_cap")
    store.redact("k", 1)
    events = _reopen(tmp_path).load("k", snapshot=False).events
    assert events[0].message[WITHHELD] == "redacted"  # type: ignore[union-attr]


def test_rotation_rewraps_without_touching_logs(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    for key in ("a", "b", "c"):
        store.session(key).append_message("user", f"text {key}")
    store.close()
    logs = {k: store.read_bytes(k) for k in ("a", "b", "c")}
    provider = LocalKeyFile(tmp_path / "keys" / "master.key")
    old_ids = provider.key_ids()
    again = FileStore(tmp_path / "s", key_provider=provider)
    assert again.rotate_master_key() == 3
    assert provider.key_ids() != old_ids and len(provider.key_ids()) == 1
    assert {k: again.read_bytes(k) for k in logs} == logs
    fresh = _reopen(tmp_path)
    assert [contents(fresh, k) for k in ("a", "b", "c")] == [["text a"], ["text b"], ["text c"]]
    assert fresh.rotate_master_key() == 3


def test_delete_destroys_the_key_record(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.session("k").append_message("user", "x")
    assert len(list((tmp_path / "s" / ".keys").glob("*.key"))) == 1
    assert store.delete("k")
    assert list((tmp_path / "s" / ".keys").glob("*.key")) == []


def test_fold_of_erase_and_redact_is_pure() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(key_provider=LocalKeyFile(Path(tmp) / "m.key"))
        s = store.session("k", metadata={"t": "x"})
        s.append_message("user", "a")
        s.append_message("user", "b")
        store.redact("k", 2)
        live: SessionState = store.session("k").state
        reread = store.load("k").state
        assert [m.message for m in live.messages] == [m.message for m in reread.messages]
        assert live.redacted == reread.redacted == [2]


@pytest.mark.anyio
async def test_async_twins(tmp_path: Path) -> None:
    provider = LocalKeyFile(tmp_path / "m.key")
    async with AsyncFileStore(tmp_path / "s", durability="none", key_provider=provider) as store:
        s = await store.session("k")
        await s.append_message("user", "one")
        await s.append_message("user", "two")
        assert await store.redact("k", 1) > 0
        s = await store.session("k")
        await s.append_message("user", "three")
        assert await store.rotate_master_key() == 1
        await store.erase("k", by="me")
        state = await store.state("k")
        assert all(m.message.get(WITHHELD) for m in state.messages)

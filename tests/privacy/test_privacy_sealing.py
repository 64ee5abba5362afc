"""Encryption at rest: no plaintext on disk, the envelope readable, keys needed to read."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from privacy_support import (
    SECRETS,
    contents,
    encrypted_store,
    files_containing,
    key_file,
    write_secrets,
)

from sessionledger import projections, replay
from sessionledger.eventlog import (
    EventLogError,
    FileKeyStore,
    FileStore,
    KeyUnavailableError,
    LocalKeyFile,
    MemoryStore,
    UnsafePathError,
)


def test_no_plaintext_in_any_file_of_the_store(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 3
    s = store.session("telegram:42", metadata={"title": SECRETS["title"]})
    write_secrets(s)
    s.close()
    ended = store.session("ended:1")
    write_secrets(ended)
    ended.clear(reason="new")  # an ended conversation keeps its title and preview in the state
    ended.append_message("user", "next")
    ended.close()
    assert store.write_snapshot("ended:1").health == "valid"
    # Every derived view is written: snapshot, catalog; a torn tail goes to quarantine.
    assert store.write_snapshot("telegram:42").health == "valid"
    assert store.snapshot_path("telegram:42").exists()
    assert projections.list_sessions(store)
    assert projections.search(store, SECRETS["message"]) == []  # sealed sessions: not indexed
    assert (tmp_path / "s" / ".search.sqlite3").exists()
    with open(store.path_for("telegram:42"), "ab") as f:
        f.write(b'{"type":"message","seq":99,"message":{"role":"user","content":"torn')
    store.session("telegram:42").close()
    assert store.quarantine_path("telegram:42").exists()
    assert files_containing(tmp_path / "s", list(SECRETS.values())) == {}
    # ... and it all reads back with the key.
    again = encrypted_store(tmp_path, key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))
    assert again.snapshot_status("telegram:42").health == "valid"
    loaded = again.load("telegram:42")
    assert loaded.snapshot_seq > 0  # the sealed snapshot opens
    state = loaded.state
    assert state.metadata["title"] == SECRETS["title"]
    assert state.metadata["note"] == {"deep": [SECRETS["meta"]]}
    assert SECRETS["summary"] in (state.compaction.summary if state.compaction else "")
    texts = json.dumps([m.message for m in state.messages])
    assert SECRETS["reply"] in texts and SECRETS["tool"] in texts
    ended_state = again.load("ended:1").state
    assert again.load("ended:1").snapshot_seq > 0
    assert ended_state.ended[0].title == SECRETS["title"]
    assert SECRETS["message"] in json.dumps(ended_state.ended[0].preview)


def test_header_metadata_survives_reopening_for_writing(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 1
    s = store.session("k", metadata={"title": "from the header"})
    s.append_message("user", "x")
    s.close()
    for _ in range(2):
        again = encrypted_store(
            tmp_path, key_provider=LocalKeyFile(tmp_path / "keys" / "master.key")
        )
        w = again.session("k")
        assert w.state.metadata == {"title": "from the header"}
        w.append_message("user", "y")
        w.close()
        assert again.load("k").state.metadata == {"title": "from the header"}
        assert again.load("k", snapshot=False).state.metadata == {"title": "from the header"}


def test_the_envelope_stays_readable(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", "hello there")
    lines = [json.loads(line) for line in store.read_bytes("k").splitlines()]
    header, message = lines
    assert header["sealing"] and header["key"] == "k"
    assert set(message) == {"type", "seq", "ts", "id", "message", "tokens", "h"}
    assert message["message"]["role"] == "user" and "content" not in message["message"]
    assert message["tokens"] == s.state.messages[0].tokens


def test_live_state_equals_reopened_state(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k", metadata={"title": "t"})
    write_secrets(s)
    live = s.state
    s.close()
    again = encrypted_store(tmp_path, key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))
    reopened = again.load("k").state
    assert [m.message for m in reopened.messages] == [m.message for m in live.messages]
    assert reopened.metadata == live.metadata
    assert reopened.compaction == live.compaction
    assert reopened.head == live.head


def test_verify_needs_no_key_and_still_detects_tampering(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path, hash_key="chain-secret")
    write_secrets(store.session("k"))
    store.close()
    keyless = FileStore(tmp_path / "s", hash_key="chain-secret")
    assert replay.verify(keyless).ok
    with pytest.raises(KeyUnavailableError, match="encrypted"):
        keyless.load("k")
    path = keyless.path_for("k")
    data = bytearray(path.read_bytes())
    at = data.index(b'"$sealed":"') + 20
    data[at] = ord("A") if data[at] != ord("A") else ord("B")
    path.write_bytes(bytes(data))
    assert not replay.verify(keyless).ok


def test_wrong_master_key_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    write_secrets(store.session("k"))
    store.close()
    before = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    other = FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "other.key"))
    with pytest.raises(KeyUnavailableError, match="master key"):
        other.load("k")
    with pytest.raises(KeyUnavailableError):
        other.session("k")
    other.close()
    after = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    assert {p: d for p, d in after.items() if p in before} == before


def test_missing_key_record_is_a_clear_error(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    write_secrets(store.session("k"))
    store.close()
    for record in (tmp_path / "s" / ".keys").glob("*.key"):
        record.unlink()
    again = encrypted_store(tmp_path, key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))
    with pytest.raises(KeyUnavailableError, match="no key record"):
        again.load("k")


def test_a_record_moved_to_another_session_does_not_open(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.session("a").append_message("user", "A")
    store.session("b").append_message("user", "B")
    store.close()
    records = sorted((tmp_path / "s" / ".keys").glob("*.key"))
    records[0].write_bytes(records[1].read_bytes())
    os.chmod(records[0], 0o600)
    again = encrypted_store(tmp_path, key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))
    failures = 0
    for key in ("a", "b"):
        try:
            again.load(key)
        except KeyUnavailableError:
            failures += 1
    assert failures == 1


def test_key_file_is_private_and_loose_modes_are_refused(tmp_path: Path) -> None:
    provider = key_file(tmp_path)
    assert provider.path.stat().st_mode & 0o777 == 0o600
    os.chmod(provider.path, 0o644)
    with pytest.raises(UnsafePathError, match="0600"):
        LocalKeyFile(provider.path)
    store = encrypted_store(tmp_path / "x")
    store.session("k")
    keys_dir = tmp_path / "x" / "s" / ".keys"
    assert keys_dir.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in keys_dir.glob("*.key"))


def test_a_key_file_that_is_a_fifo_or_unreadable_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UnsafePathError, match="not a regular file"):
        LocalKeyFile(fifo)  # opening a FIFO used to block until a writer came
    (tmp_path / "dir.key").mkdir(mode=0o700)
    with pytest.raises(EventLogError):
        LocalKeyFile(tmp_path / "dir.key")


def test_plaintext_sessions_stay_plaintext_beside_sealed_ones(tmp_path: Path) -> None:
    plain = FileStore(tmp_path / "s", durability="none")
    plain.session("old").append_message("user", "visible")
    plain.close()
    store = encrypted_store(tmp_path)
    store.session("old").append_message("user", "still visible")
    store.session("new").append_message("user", "hidden")
    assert b"still visible" in store.read_bytes("old")
    assert b"hidden" not in store.read_bytes("new")
    assert contents(store, "new") == ["hidden"]


def test_memory_store_seals_the_same_way() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(key_provider=LocalKeyFile(Path(tmp) / "m.key"))
        write_secrets(store.session("k"))
        data = store.read_bytes("k")
        assert not [v for v in SECRETS.values() if v.encode() in data]
        assert SECRETS["reply"] in json.dumps(contents(store, "k"))


def test_history_window_reads_only_what_it_shows(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k")
    for i in range(50):
        s.append_message("user", f"q{i}")
        s.append_message("assistant", f"a{i}")
    s.close()
    state = store.load("k").state
    msgs = projections.history(state, max_messages=4)
    assert [m["content"] for m in msgs] == ["q48", "a48", "q49", "a49"]
    opened = sum("message" in m.__dict__ for m in state.messages)
    assert opened <= 6


def test_a_planted_session_id_names_no_file(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from sessionledger.eventlog import Header
    from sessionledger.eventlog._crypto import SEALING
    from sessionledger.eventlog.codec import ZERO_HASH, encode_line

    store = encrypted_store(tmp_path)
    store.session("real").append_message("user", "x")
    now = datetime.now(UTC)
    header = Header(
        seq=0, ts=now, id="../../../evil", key="planted", created_at=now, sealing=SEALING
    )
    line, _ = encode_line(header, ZERO_HASH)
    store.path_for("planted").write_bytes(line)
    os.chmod(store.path_for("planted"), 0o600)
    with pytest.raises(KeyUnavailableError, match="session id"):
        store.load("planted")
    with pytest.raises(KeyUnavailableError):
        store.session("planted")
    assert not (tmp_path / "evil.key").exists() and not (tmp_path / "s" / "evil.key").exists()
    assert contents(store, "real") == ["x"]


@pytest.mark.parametrize(
    "reform",
    [
        pytest.param(lambda body: body.replace(b"/", b"\\/"), id="escaped-slashes"),
        pytest.param(lambda body: body[:-1] + b',"x":"y"}', id="a-key-after"),
        pytest.param(lambda body: body.replace(b',"$sealed"', b', "$sealed" '), id="spaces"),
        pytest.param(
            lambda body: b'{"$sealed"' + body[body.index(b":", 9) : -1] + b',"role":"user"}',
            id="keys-reordered",
        ),
        pytest.param(lambda body: body.replace(b'"user"', b'"\\u0075ser"'), id="escaped-role"),
    ],
)
def test_a_sealed_body_in_another_json_form_opens_the_same(
    tmp_path: Path, reform: Callable[[bytes], bytes]
) -> None:
    # The reader takes the base64 in place from the body as this library writes it; any other
    # JSON form of the same envelope (another writer's escapes, spacing, key order) must open
    # to the same message, never to an error or garbage.
    store = encrypted_store(tmp_path)
    s = store.session("k")
    message = {"role": "user", "content": "a/b" * 40 + SECRETS["message"], "n": [1, 2]}
    for _ in range(16):  # each is sealed with its own key and nonce: new random base64
        s.append_message(**message)  # type: ignore[arg-type]
    s.close()

    def slashed(e: Any) -> bool:  # the base64 has a slash to escape (about 99% of bodies)
        return b"/" in bytes(e.body)[bytes(e.body).index(b'"$sealed"') :]

    event = next(e for e in store.load("k").state.messages if slashed(e))
    opener = event.__dict__["_open"]
    expected = opener(event)
    assert expected["content"] == message["content"] and expected["n"] == [1, 2]
    body = bytes(event.body)
    other = reform(body)
    assert other != body
    assert {k: v for k, v in json.loads(other).items() if k != "x"} == json.loads(body)
    moved = msgspec.structs.replace(event, body=msgspec.Raw(other))
    assert "message" not in moved.__dict__
    assert opener(moved) == expected


def test_a_load_reads_the_key_record_once(tmp_path: Path) -> None:
    # From an index snapshot, from a format-2 snapshot (a session with a redaction keeps
    # those), and from the log: one key record read each. Before, a snapshot load read it
    # twice (once to open the snapshot, once for the messages).
    reads: list[str] = []

    class Counting(FileKeyStore):
        def get(self, session_id: str) -> bytes | None:
            reads.append(session_id)
            return super().get(session_id)

    store = encrypted_store(tmp_path, key_store=Counting(tmp_path / "s" / ".keys"))
    for key in ("indexed", "redacted"):
        s = store.session(key)
        for i in range(6):
            s.append_message("user", f"m{i}")
        s.close()
    store.redact("redacted", 2)
    for key in ("indexed", "redacted"):
        store.write_snapshot(key)
        fresh = encrypted_store(tmp_path, key_store=Counting(tmp_path / "s" / ".keys"))
        reads.clear()
        loaded = fresh.load(key)
        assert loaded.snapshot_seq == loaded.state.seq
        assert len(reads) == 1, key
        second = None if key == "redacted" else "m1"
        assert [m.message["content"] for m in loaded.state.messages][:2] == ["m0", second]
        reads.clear()
        fresh.load(key, snapshot=False)
        assert len(reads) == 1, key


@pytest.mark.parametrize(
    "body",
    [
        b'{"role":"user","$sealed":5}',
        b'{"role":"user","$sealed":null}',
        b'{"role":"user","$sealed":["AAAA"]}',
        b"[1,2]",
        b'"x"',
    ],
)
def test_a_chained_message_body_that_is_no_envelope_is_a_library_error(
    tmp_path: Path, body: bytes
) -> None:
    # A line whose chain checks but whose sealed body is not an object with a string
    # "$sealed" (another writer's, or a crafted one) must not open to msgspec's ValidationError
    # (a ValueError): only the library's errors leave it.
    from sessionledger.eventlog.codec import encode_line

    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", SECRETS["message"])
    s.close()
    event = store.load("k").state.messages[0]
    path = tmp_path / "s" / "k.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    forged = msgspec.structs.replace(event, body=msgspec.Raw(body))
    line, _ = encode_line(forged, json.loads(lines[0])["h"], store._hash_key)
    path.write_bytes(lines[0] + line)
    fresh = encrypted_store(tmp_path)
    with pytest.raises(KeyUnavailableError, match="not a sealed message"):
        _ = fresh.load("k").state.messages[0].message
    fresh.close()

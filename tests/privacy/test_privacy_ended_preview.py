"""An ended conversation's preview in a sealed snapshot: each preview message is sealed under
its own message's key, so redacting it leaves the preview readable in no file (a snapshot
left behind included), while redacting any other message leaves the preview as it was."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from privacy_support import encrypted_store

from sessionledger import projections
from sessionledger.eventlog import (
    AsyncFileStore,
    EndedConversation,
    FileStore,
    Header,
    LocalKeyFile,
    Redacted,
    fold,
    initial_state,
)
from sessionledger.eventlog._crypto import SEALED
from sessionledger.eventlog._indexsnap import decode_meta, encode_meta, is_index_snapshot
from sessionledger.eventlog._jsonbytes import encode_json
from sessionledger.eventlog._snapshot import Anchored, decode_snapshot

KEY = "k"
FIRST = "Zanzibar-hospital-7731 first"
REPLY = "Quokka-mortgage-4410 reply"


def _reopen(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))


def _write(tmp_path: Path) -> FileStore:
    """seq 1 user (the preview), 2 assistant, 3 user, 4 clear, 5 user; an index snapshot."""
    store = encrypted_store(tmp_path)
    store.snapshot_every = 1
    s = store.session(KEY, metadata={"title": "T-Okapi"})
    s.append_message("user", FIRST)
    s.append_message("assistant", REPLY)
    s.append_message("user", "a later question")
    s.clear(reason="new")
    s.append_message("user", "the second conversation")
    s.close()
    assert is_index_snapshot(store.snapshot_path(KEY).read_bytes())
    return store


def _opened(store: FileStore, blob: bytes) -> list[EndedConversation] | None:
    """The ended conversations of snapshot bytes ``blob`` as ``store``'s keys open them now
    (None: the snapshot does not open)."""
    snap: Anchored = (
        decode_meta(blob, KEY, store.hash_key)
        if is_index_snapshot(blob)
        else decode_snapshot(blob, KEY, store.hash_key)  # format 2 (a redacted session's)
    )
    seal = store._privacy.seal_of(KEY, snap.header)
    return list(snap.state.ended) if seal.open_snapshot(snap) else None


def test_the_fold_records_the_seqs_of_the_preview_messages(tmp_path: Path) -> None:
    store = _write(tmp_path)
    ended = store.load(KEY).state.ended
    assert [(e.preview_seqs, e.title) for e in ended] == [([1], "T-Okapi")]
    assert ended[0].preview == [{"role": "user", "content": FIRST}]
    blob = store.snapshot_path(KEY).read_bytes()
    sealed = decode_meta(blob, KEY, store.hash_key).state.ended[0]
    assert sealed.title == "" and sealed.preview_seqs == [1]
    assert len(sealed.preview) == 2 and all(set(p) == {SEALED} for p in sealed.preview)
    assert FIRST.encode() not in blob
    assert _opened(_reopen(tmp_path), blob) == ended


def test_redacting_a_message_outside_the_preview_keeps_the_preview(tmp_path: Path) -> None:
    store = _write(tmp_path)
    old = store.snapshot_path(KEY).read_bytes()
    store.redact(KEY, 2)
    again = _reopen(tmp_path)
    ended = again.load(KEY).state.ended
    assert ended[0].preview == [{"role": "user", "content": FIRST}]
    assert again.write_snapshot(KEY).health == "valid"
    loaded = _reopen(tmp_path).load(KEY)
    assert loaded.snapshot_seq == loaded.state.seq  # from the snapshot written after it
    assert loaded.state.ended == ended
    # A snapshot from before the redaction still opens it: its key was not destroyed.
    left = _opened(again, old)
    assert left is not None and left[0].preview == ended[0].preview
    rows = projections.list_conversations(_reopen(tmp_path), KEY)
    assert [r.preview for r in rows if not r.current] == [FIRST]


def test_redacting_the_preview_message_leaves_it_in_no_snapshot(tmp_path: Path) -> None:
    store = _write(tmp_path)
    old = store.snapshot_path(KEY).read_bytes()
    store.redact(KEY, 1)
    again = _reopen(tmp_path)
    left = _opened(again, old)  # a snapshot left behind (kill -9 before it was dropped)
    assert left is not None
    assert (left[0].title, left[0].preview, left[0].preview_seqs) == ("T-Okapi", [], [])
    assert FIRST not in str(again.load(KEY).state.ended)
    assert again.write_snapshot(KEY).health == "valid"
    new = again.snapshot_path(KEY).read_bytes()
    assert _opened(_reopen(tmp_path), new) == again.load(KEY).state.ended
    assert again.load(KEY).state.ended[0].preview == []


def test_erase_leaves_no_snapshot_that_opens(tmp_path: Path) -> None:
    store = _write(tmp_path)
    old = store.snapshot_path(KEY).read_bytes()
    store.erase(KEY)
    again = _reopen(tmp_path)
    assert _opened(again, old) is None
    assert [(e.title, e.preview) for e in again.load(KEY).state.ended] == [("", [])]
    meta = decode_meta(old, KEY, again.hash_key)
    seal = again._privacy.seal_of(KEY, meta.header)
    for e in meta.state.ended:  # no preview message opens on its own either
        assert all(seal.tree.leaf(p) is None for p in e.preview_seqs)


def test_rotation_still_opens_the_preview_from_the_snapshot(tmp_path: Path) -> None:
    store = _write(tmp_path)
    expected = store.load(KEY).state.ended
    assert _reopen(tmp_path).rotate_master_key() == 1
    loaded = _reopen(tmp_path).load(KEY)
    assert loaded.snapshot_seq == loaded.state.seq
    assert loaded.state.ended == expected and expected[0].preview


def test_a_preview_message_that_does_not_open_fails_the_snapshot(tmp_path: Path) -> None:
    store = _write(tmp_path)
    meta = decode_meta(store.snapshot_path(KEY).read_bytes(), KEY, store.hash_key)
    seal = store._privacy.seal_of(KEY, meta.header)
    e = meta.state.ended[0]
    # Its key exists, the text is another field's: wrong key, not a redaction.
    moved = {SEALED: seal.seal_bytes(1, "s:e:999:0:0", b'{"role":"user","content":"x"}')}
    meta.state.ended[0] = msgspec.structs.replace(e, preview=[e.preview[0], moved])
    assert not seal.open_snapshot(meta)
    # A preview count that does not match its seqs is not read either.
    meta = decode_meta(store.snapshot_path(KEY).read_bytes(), KEY, store.hash_key)
    e = meta.state.ended[0]
    meta.state.ended[0] = msgspec.structs.replace(e, preview_seqs=[1, 2])
    assert not seal.open_snapshot(meta)


def test_a_snapshot_of_the_layout_before_the_seqs_is_read_from_the_log(tmp_path: Path) -> None:
    store = _write(tmp_path)
    path = store.snapshot_path(KEY)
    meta = decode_meta(path.read_bytes(), KEY, store.hash_key)
    seal = store._privacy.seal_of(KEY, meta.header)
    e = meta.state.ended[0]
    inner = {"title": "T-Okapi", "preview": [{"role": "user", "content": FIRST}]}
    old = {SEALED: seal.seal_bytes(meta.seq, "s:e:0", encode_json(inner))}  # as sealed before
    meta.state.ended[0] = msgspec.structs.replace(e, preview=[old], preview_seqs=[])
    meta.window, meta.window_span = b"", (0, 0)
    blob = encode_meta(meta, store.hash_key)
    assert _opened(_reopen(tmp_path), blob) is None  # never read without its seqs
    path.write_bytes(blob)
    loaded = _reopen(tmp_path).load(KEY)
    assert loaded.snapshot_seq == 0  # the log, folded whole
    assert loaded.state.ended[0].preview_seqs == [1]
    assert loaded.state.ended[0].preview == [{"role": "user", "content": FIRST}]
    assert _reopen(tmp_path).write_snapshot(KEY).health == "valid"  # replaced, new layout
    assert _reopen(tmp_path).load(KEY).snapshot_seq == loaded.state.seq
    assert _opened(_reopen(tmp_path), path.read_bytes()) == loaded.state.ended
    # An old entry with no preview (only a title) opens as before.
    meta.state.ended[0] = msgspec.structs.replace(
        e,
        preview=[{SEALED: seal.seal_bytes(meta.seq, "s:e:0", b'{"title":"T","preview":[]}')}],
        preview_seqs=[],
    )
    opened = _opened(_reopen(tmp_path), encode_meta(meta, store.hash_key))
    assert opened is not None and (opened[0].title, opened[0].preview) == ("T", [])


def test_the_fold_drops_a_preview_recorded_without_seqs_on_any_redaction_in_it() -> None:
    now = datetime.now(UTC)
    header = Header(seq=0, ts=now, id="i", key=KEY, created_at=now)
    state = initial_state(header)
    preview = [{"role": "user", "content": "x"}]
    old = EndedConversation(
        start_seq=0, end_seq=4, reason="new", messages=3, ended_at=now, preview=preview
    )
    new = msgspec.structs.replace(old, start_seq=4, end_seq=8, preview_seqs=[5])
    state.ended = [old, new]
    redact = Redacted(seq=9, ts=now, id="r", target=2, by="", reason="")
    got = fold(header, [redact], state)
    assert [e.preview for e in got.ended] == [[], preview]
    redact = Redacted(seq=10, ts=now, id="r2", target=6, by="", reason="")
    assert fold(header, [redact], got).ended[1].preview == preview  # not a preview message
    redact = Redacted(seq=11, ts=now, id="r3", target=5, by="", reason="")
    assert fold(header, [redact], got).ended[1].preview == []


@pytest.mark.anyio
async def test_the_async_store_seals_and_opens_the_same(tmp_path: Path) -> None:
    provider = LocalKeyFile(tmp_path / "m.key")
    root = tmp_path / "s"
    async with AsyncFileStore(root, durability="none", key_provider=provider) as store:
        s = await store.session(KEY)
        await s.append_message("user", FIRST)
        await s.append_message("assistant", REPLY)
        await s.clear(reason="new")
        await s.append_message("user", "next")
        await store.redact(KEY, 2)
        assert (await store.write_snapshot(KEY)).health == "valid"
    async with AsyncFileStore(root, durability="none", key_provider=provider) as store:
        state = await store.state(KEY)
        assert state.ended[0].preview == [{"role": "user", "content": FIRST}]
        await store.redact(KEY, 1)
        assert (await store.state(KEY)).ended[0].preview == []

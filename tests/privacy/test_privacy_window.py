"""The window of a sealed index snapshot: the newest messages sealed as one, so a history opens
them without a decryption each. It opens to what the log opens to, holds no plaintext, and
opens no more once any key under it was destroyed: whatever file still holds it (a crash
between destroying the keys and dropping the snapshot), and whatever a state in memory
already opened with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from privacy_support import SECRETS, encrypted_store, files_containing

from sessionledger import projections
from sessionledger.eventlog import WITHHELD, FileStore, KeyUnavailableError, LocalKeyFile, _crypto
from sessionledger.eventlog._crypto import WINDOW, SessionSeal, WindowOpener
from sessionledger.eventlog._indexsnap import WINDOW_MARK, decode_meta, is_index_snapshot
from sessionledger.eventlog._keytree import DEPTH, KeyTree, child_seed

KEY = "k"
CHILD = Path(__file__).with_name("privacy_crash_child.py")


def _reopen(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))


def _text(i: int) -> str:
    return f"{SECRETS['message']} #{i}"


def _write(tmp_path: Path, n: int = 40, **kw: object) -> FileStore:
    store = encrypted_store(tmp_path, **kw)
    store.snapshot_every = 1
    s = store.session(KEY, metadata={"title": SECRETS["title"]})
    for i in range(n):
        s.append_message("user" if i % 2 == 0 else "assistant", _text(i))
    s.close()  # the closing writer writes the index snapshot, with its window
    return store


def _window_opens(store: FileStore, blob: bytes) -> bool:
    """Whether the window in snapshot bytes ``blob`` opens with ``store``'s keys (now)."""
    meta = decode_meta(blob, KEY, store.hash_key)
    seal = store._privacy.seal_of(KEY, meta.header)
    return bool(seal.open_window(meta.seq, meta.window_view()))


def _count_single_opens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    opened: list[int] = []
    real = SessionSeal.open_message

    def spy(self: SessionSeal, event: object) -> dict[str, object]:
        opened.append(event.seq)  # type: ignore[attr-defined]
        return real(self, event)  # type: ignore[arg-type]

    monkeypatch.setattr(SessionSeal, "open_message", spy)
    return opened


def test_the_window_opens_what_the_log_opens_and_saves_each_decryption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _write(tmp_path, n=WINDOW + 40)
    blob = store.snapshot_path(KEY).read_bytes()
    assert is_index_snapshot(blob) and blob.endswith(WINDOW_MARK)
    assert files_containing(tmp_path / "s", list(SECRETS.values())) == {}
    assert _window_opens(_reopen(tmp_path), blob)
    opened = _count_single_opens(monkeypatch)
    again = _reopen(tmp_path)
    loaded = again.load(KEY)
    assert loaded.snapshot_seq == loaded.state.seq
    messages = loaded.state.messages
    assert isinstance(messages[-1].__dict__.get("_open"), WindowOpener)
    got = projections.history(loaded.state, max_messages=WINDOW)
    assert [e["content"] for e in got] == [_text(i) for i in range(40, WINDOW + 40)]
    assert opened == []  # every one came from the window
    assert messages[0].message["content"] == _text(0)  # older than the window: on its own
    assert opened == [messages[0].seq]
    reference = [m.message for m in again.load(KEY, snapshot=False).state.messages]
    assert [m.message for m in again.load(KEY).state.messages] == reference


def test_a_window_keeps_its_messages_exact_through_settles_and_closes(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.settle_every = 64
    store.snapshot_every = 1
    s = store.session(KEY)
    texts = []
    for i in range(300):
        # Values whose JSON a careless copy would not give back byte for byte.
        extra = {"n": i, "f": 0.1 * i, "u": "é\u2028", "nested": {"b": [1, {"c": None}]}}
        s.append_message("user", _text(i), meta=extra)
        texts.append(_text(i))
        if i % 97 == 0:
            s.close()
            s = store.session(KEY)
    s.close()
    again = _reopen(tmp_path)
    blob = again.snapshot_path(KEY).read_bytes()
    assert _window_opens(again, blob)
    meta = decode_meta(blob, KEY, again.hash_key)
    seal = again._privacy.seal_of(KEY, meta.header)
    entries = seal.open_window(meta.seq, meta.window_view())
    log = again.load(KEY, snapshot=False).state.messages
    for event in log:
        if event.seq in entries:
            h, plain = entries[event.seq]
            assert h == event.h
            assert bytes(plain) == seal.plain_of(event.detached())  # the line's own plaintext
    assert len(entries) == 300
    assert [m.message for m in again.load(KEY).state.messages] == [m.message for m in log]


@pytest.mark.parametrize("how", ["erase", "redact", "redact-older"])
def test_a_window_left_behind_opens_nothing_once_a_key_under_it_is_gone(
    tmp_path: Path, how: str
) -> None:
    store = _write(tmp_path)
    path = store.snapshot_path(KEY)
    old = path.read_bytes()
    assert _window_opens(store, old)
    target = store.load(KEY).state.messages[-3 if how != "redact-older" else 0].seq
    if how == "erase":
        store.erase(KEY)
    else:
        store.redact(KEY, target)
    # A kill -9 between destroying the keys and dropping the snapshot leaves it there: the
    # window in it must not open, even with the master key, in any store.
    path.write_bytes(old)
    again = _reopen(tmp_path)
    assert not _window_opens(again, old)
    messages = again.load(KEY).state.messages
    withheld = [m.message.get(WITHHELD) for m in messages]
    if how == "erase":
        assert set(withheld) == {"erased"}
    else:
        assert withheld.count("redacted") == 1
        assert {m.seq: m.message for m in messages}[target][WITHHELD] == "redacted"
        assert sum(1 for m in messages if m.message.get("content")) == len(messages) - 1


def test_a_state_that_opened_its_window_opens_nothing_destroyed_since(tmp_path: Path) -> None:
    store = _write(tmp_path)
    state = _reopen(tmp_path).load(KEY).state  # another store's state, held in memory
    here = store.load(KEY).state
    assert here.messages[-1].message["content"] == _text(39)  # its window is now open
    opener = here.messages[-1].__dict__["_open"]
    assert isinstance(opener, WindowOpener)
    target = here.messages[-2].seq
    store.redact(KEY, target)  # this store's seal gets the new tree
    assert here.messages[-2].message[WITHHELD] == "redacted"
    assert opener.plain(here.messages[-3]) is None  # what it opened under the old tree: gone
    assert here.messages[-3].message["content"] == _text(37)  # opened on its own instead
    # The other store read its key record before the redaction; its next load reads it again.
    again = state.messages[-2]
    del state
    fresh = _reopen(tmp_path).load(KEY).state
    assert fresh.messages[-2].message[WITHHELD] == "redacted"
    assert again.seq == target


def test_a_damaged_or_misplaced_window_is_not_used_and_costs_nothing_but_time(
    tmp_path: Path,
) -> None:
    store = _write(tmp_path)
    path = store.snapshot_path(KEY)
    blob = path.read_bytes()
    reference = [m.message for m in store.load(KEY, snapshot=False).state.messages]
    meta = decode_meta(blob, KEY, store.hash_key)
    start, end = meta.window_span
    damaged = bytearray(blob)
    damaged[(start + end) // 2] ^= 1
    path.write_bytes(bytes(damaged))
    again = _reopen(tmp_path)
    assert not _window_opens(again, bytes(damaged))
    loaded = again.load(KEY)
    assert loaded.snapshot_seq == loaded.state.seq  # the snapshot itself is still used
    assert [m.message for m in loaded.state.messages] == reference
    # A window sealed for another seq (the AAD names it) does not open either.
    seal = again._privacy.seal_of(KEY, meta.header)
    assert seal.open_window(meta.seq, meta.window_view())
    assert not seal.open_window(meta.seq - 1, meta.window_view())
    # A trailer that claims more than the file holds: the snapshot is refused, the log read.
    path.write_bytes(blob[: start - 1] + blob[end:])
    loaded = _reopen(tmp_path).load(KEY)
    assert loaded.snapshot_seq == 0
    assert [m.message for m in loaded.state.messages] == reference


def test_rotation_keeps_the_window_usable(tmp_path: Path) -> None:
    store = _write(tmp_path)
    blob = store.snapshot_path(KEY).read_bytes()
    store.rotate_master_key()
    assert _window_opens(_reopen(tmp_path), blob)


def test_node_key_is_gone_with_any_leaf_under_it_and_derives_nothing_else() -> None:
    tree = KeyTree.new(bytes(range(32)))
    keys = {p: tree.node_key(6, p) for p in range(4)}
    assert len(set(keys.values())) == 4 and None not in keys.values()
    # Not a seed of the tree (a child's or a leaf's).
    node = bytes(range(32))
    for _ in range(6):
        node = child_seed(node, 0)
    assert keys[0] not in {node, *(child_seed(node, i) for i in range(16))}
    assert keys[0] not in {tree.leaf(s) for s in range(256)}
    redacted = tree.punctured(300, 300)  # under node 1 (seqs 256..511)
    assert redacted.node_key(6, 1) is None
    assert redacted.node_key(6, 0) == keys[0] and redacted.node_key(6, 2) == keys[2]
    erased = tree.punctured(0, 600)
    assert [erased.node_key(6, p) for p in range(4)] == [None, None, None, keys[3]]
    assert tree.node_key(DEPTH, 0) is None and tree.node_key(6, 16**6) is None


def test_a_crash_between_destroying_the_keys_and_dropping_the_snapshot(tmp_path: Path) -> None:
    """kill -9 at each step of erase and redact, with a windowed snapshot on disk: the bytes
    left in the snapshot file never open once the keys are destroyed."""
    for operation in ("erase", "redact"):
        for point, nth in (("destroy", 1), ("rename", 1), ("renamed", 1), ("drop", 1)):
            root = tmp_path / f"{operation}-{point}"
            provider = LocalKeyFile(root / "master.key")  # where the child looks
            store = FileStore(root / "s", key_provider=provider, durability="always")
            store.snapshot_every = 1
            for key in ("victim", "other"):
                s = store.session(key)
                for i in range(3):
                    s.append_message("user", f"{key} {_text(i)}")
                s.close()
            store.close()
            path = store.snapshot_path("victim")
            before = path.read_bytes()
            done = subprocess.run(
                [sys.executable, str(CHILD), str(root), operation, point, str(nth)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == -9, done.stderr
            after = path.read_bytes() if path.exists() else None
            again = _at(root)
            sid = again.load("victim", snapshot=False).state.id
            keyring = again.keyring
            assert keyring is not None
            destroyed = keyring.tree(sid).leaf(2) is None
            for left in (before, after):
                if left is not None and destroyed:
                    assert not _window_opens_for(again, "victim", left)
            again.session("victim").close()  # finishes what the crash interrupted
            assert keyring.tree(sid).leaf(2) is None
            for left in (before, after):
                if left is not None:
                    assert not _window_opens_for(_at(root), "victim", left)
            assert files_containing(root / "s", ["victim " + _text(1)]) == {}


def _at(root: Path) -> FileStore:
    return FileStore(root / "s", key_provider=LocalKeyFile(root / "master.key"))


def _window_opens_for(store: FileStore, key: str, blob: bytes) -> bool:
    meta = decode_meta(blob, key, store.hash_key)
    if not meta.window_view():
        return False
    seal = store._privacy.seal_of(key, meta.header)
    return bool(seal.open_window(meta.seq, meta.window_view()))


def test_the_window_key_needs_every_node_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = KeyTree.new(bytes(32))
    calls: list[tuple[int, int]] = []
    real = KeyTree.node_key

    def spy(self: KeyTree, depth: int, prefix: int) -> bytes | None:
        calls.append((depth, prefix))
        return real(self, depth, prefix)

    monkeypatch.setattr(KeyTree, "node_key", spy)
    seal = SessionSeal.__new__(SessionSeal)
    seal.tree = tree
    assert seal._window_key(2, 4) is not None
    assert calls == [
        (_crypto.WINDOW_DEPTH, 2),
        (_crypto.WINDOW_DEPTH, 3),
        (_crypto.WINDOW_DEPTH, 4),
    ]
    seal.tree = tree.punctured(3 * 256 + 7, 3 * 256 + 7)
    assert seal._window_key(2, 4) is None
    assert seal._window_key(4, 2) is None and seal._window_key(0, 1 << 20) is None


def test_an_opened_window_is_opened_again_under_a_new_tree(tmp_path: Path) -> None:
    store = _write(tmp_path)
    messages = store.load(KEY).state.messages
    last = messages[-1]
    opener = last.__dict__["_open"]
    assert isinstance(opener, WindowOpener)
    assert opener.plain(last) is not None  # opened under the tree the load read
    seal = opener.seal
    # A tree that lacks a node under the window without recording why (another record):
    # what the window opened under the old tree is dropped, and it does not open again.
    punctured = seal.tree.punctured(last.seq, last.seq)
    seal.tree = KeyTree(list(punctured.nodes))
    assert opener.plain(messages[-2]) is None
    assert opener._opened == {}


def test_a_writer_seals_its_own_messages_into_the_window_without_opening_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 1
    s = store.session(KEY)
    for i in range(30):
        s.append_message("user", _text(i))
    assert all("_plain" in m.__dict__ for m in s.state.messages)  # kept from sealing
    decrypted: list[int] = []
    real = SessionSeal._open

    def spy(self: SessionSeal, seq: int, aad: bytes, text: str | bytes | memoryview) -> bytes:
        decrypted.append(seq)
        return real(self, seq, aad, text)

    monkeypatch.setattr(SessionSeal, "_open", spy)
    opened = _count_single_opens(monkeypatch)
    s.close()  # writes the snapshot and its window from what the writer holds
    assert opened == [] and decrypted == []
    assert _window_opens(_reopen(tmp_path), store.snapshot_path(KEY).read_bytes())


def test_a_state_loaded_before_a_rotation_opens_nothing_redacted_after_it(tmp_path: Path) -> None:
    """Rotation rewraps the key records; the trees in them are the same. A state this store
    loaded before it must still see a later redaction by this store (the window it opened
    and the message's own key): the rotation must not leave it with a seal no one updates."""
    store = _write(tmp_path)
    state = store.load(KEY).state
    assert isinstance(state.messages[-1].__dict__.get("_open"), WindowOpener)
    assert state.messages[-1].message["content"] == _text(39)  # its window is open
    store.rotate_master_key()
    target = state.messages[-3]
    store.redact(KEY, target.seq)
    assert _text(37) not in [m["content"] for m in projections.history(state)]
    assert target.message[WITHHELD] == "redacted"


@pytest.mark.parametrize("via", ["seal", "window"])
def test_a_sealed_message_whose_body_keeps_an_empty_seal_does_not_read_back_as_it(
    tmp_path: Path, via: str
) -> None:
    """A crafted line ``{"role":"user","$sealed":""}`` in a sealed session whose key is
    missing (not destroyed on purpose) is no message: opening it raises the library's error
    instead of returning the envelope as the message."""
    store = _write(tmp_path)
    loaded = store.load(KEY).state.messages[-1]
    body = msgspec.Raw(b'{"role":"user","$sealed":""}')
    crafted = msgspec.structs.replace(loaded, body=body, h="another line")
    window = loaded.__dict__["_open"]
    assert isinstance(window, WindowOpener)
    seal = window.seal
    # The leaf is missing from the tree, and no erasure or redaction says why.
    seal.tree = KeyTree(list(seal.tree.punctured(crafted.seq, crafted.seq).nodes))
    assert seal.tree.leaf(crafted.seq) is None and seal.destroyed(crafted.seq) is None
    opener = seal.open_message if via == "seal" else window
    with pytest.raises(KeyUnavailableError, match="not a sealed message"):
        opener(crafted)


def test_a_snapshot_left_behind_opens_no_redacted_preview_of_an_ended_conversation(
    tmp_path: Path,
) -> None:
    store = encrypted_store(tmp_path)
    store.snapshot_every = 1
    s = store.session(KEY)
    s.append_message("user", _text(1))
    s.clear(reason="new")
    s.append_message("user", "the second conversation")
    s.close()
    path = store.snapshot_path(KEY)
    old = path.read_bytes()
    assert is_index_snapshot(old)
    store.redact(KEY, 1)
    path.write_bytes(old)  # a kill -9 before the snapshot was dropped leaves it
    again = _reopen(tmp_path)
    assert _text(1) not in str([e.preview for e in again.load(KEY).state.ended])
    meta = decode_meta(old, KEY, again.hash_key)
    seal = again._privacy.seal_of(KEY, meta.header)
    opened = seal.open_snapshot(meta)
    assert not opened or _text(1) not in str([e.preview for e in meta.state.ended])

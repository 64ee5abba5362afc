"""After erase or redact, an open store holds nothing in memory that derives or shows the
destroyed content: key trees (their caches of derived nodes included) and opened messages
are dropped with the keys (a seal keeps no cipher objects between calls)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from privacy_support import encrypted_store

from sessionledger import projections
from sessionledger.eventlog import MessageAppended
from sessionledger.eventlog._keytree import KeyTree


def _live(kind: type) -> list[object]:
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is kind]


def _opened_with(content: str) -> list[MessageAppended]:
    """Message events held by any live container whose opened message (kept once read)
    has a content starting with ``content``."""
    gc.collect()
    found = []
    for holder in gc.get_objects():
        if type(holder) is list or type(holder) is tuple:
            items = list(holder)
        elif type(holder) is dict:
            items = list(holder.values())
        else:
            continue
        for event in items:
            if type(event) is MessageAppended:
                message = event.__dict__.get("message")
                if isinstance(message, dict) and str(message.get("content")).startswith(content):
                    found.append(event)
    return found


def test_an_open_store_forgets_a_redacted_message_and_its_key(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    secret = "redact-me-" + os.urandom(6).hex()  # built here: no constant holds it
    s = store.session("k")
    for i in range(40):  # across a key-tree group boundary, so the caches are populated
        s.append_message("user", secret if i == 20 else f"m{i}")
    target = s.state.messages[20].seq
    keyring = store.keyring
    assert keyring is not None
    destroyed = keyring.tree(s.state.id).leaf(target)
    assert destroyed is not None
    # Read it in every way a caller might, so every cache has held it.
    assert s.state.messages[20].message["content"] == secret
    assert projections.history(store.load("k").state, max_messages=100)
    assert _opened_with(secret)
    store.redact("k", target)
    assert _opened_with(secret) == []
    for tree in _live(KeyTree):
        assert isinstance(tree, KeyTree)
        assert tree.leaf(target) != destroyed  # no live tree (caches included) derives it
    s.append_message("user", "after")  # the open writer goes on with the new tree
    assert store.load("k").state.messages[-1].message["content"] == "after"
    store.close()


def test_an_open_store_forgets_an_erased_session(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    secret = "erase-me-" + os.urandom(6).hex()
    s = store.session("k")
    for i in range(40):
        s.append_message("user", f"{secret}-{i}")
    assert store.load("k").state.messages[-1].message["content"] == f"{secret}-39"
    assert _opened_with(secret)
    last = s.state.seq
    keyring = store.keyring
    assert keyring is not None
    tree = keyring.tree(s.state.id)
    destroyed = {tree.leaf(seq) for seq in range(last + 1)}
    del tree
    store.erase("k")
    assert _opened_with(secret) == []
    for live in _live(KeyTree):
        assert isinstance(live, KeyTree)
        assert not {live.leaf(seq) for seq in range(last + 1)} & destroyed
    store.close()


def test_a_settled_writer_forgets_an_erased_session(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    store.settle_every = 16  # the writer's messages are read back from the sealed lines
    secret = "settled-" + os.urandom(6).hex()
    s = store.session("k")
    for i in range(60):
        s.append_message("user", f"{secret}-{i}")
    assert s.state.messages.source is not None
    assert [m.message["content"] for m in s.state.messages][-1] == f"{secret}-59"
    assert _opened_with(secret)
    store.erase("k")
    assert _opened_with(secret) == []
    store.close()

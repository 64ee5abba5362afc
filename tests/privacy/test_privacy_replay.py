"""Replay over an encrypted store: time travel, follow and recover open (or finish) like load."""

from __future__ import annotations

from pathlib import Path

import pytest
from privacy_support import encrypted_store

from sessionledger import projections, replay
from sessionledger.eventlog import (
    WITHHELD,
    FileStore,
    KeyUnavailableError,
    LocalKeyFile,
    MessageAppended,
    _crypto,
)


def test_state_at_opens_sealed_content(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k", metadata={"title": "Trip"})
    s.append_message("user", "where to?")
    s.append_message("assistant", "Kyoto")
    s.append_message("user", "when?")
    then = replay.state_at(store, "k", seq=2)
    assert then.metadata == {"title": "Trip"}
    assert [m["content"] for m in projections.history(then)] == ["where to?", "Kyoto"]
    store.redact("k", 2)
    then = replay.state_at(store, "k", seq=2)  # before the redaction, yet its key is gone
    assert then.messages[1].message[WITHHELD] == "redacted"
    with pytest.raises(KeyUnavailableError):
        replay.state_at(FileStore(tmp_path / "s"), "k", seq=2)


def test_follow_yields_opened_events(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", "one")
    s.append_message("user", "two")
    follower = replay.follow(store, "k", idle_timeout=0.05)
    got = [e.message["content"] for e in follower if isinstance(e, MessageAppended)]
    assert got == ["one", "two"]


def test_recover_finishes_an_interrupted_redaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = encrypted_store(tmp_path)
    s = store.session("k")
    s.append_message("user", "keep")
    s.append_message("user", "secret")
    s.close()

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # stands for the process dying between event and key

    monkeypatch.setattr(_crypto.Keyring, "destroy", crash)
    with pytest.raises(KeyboardInterrupt):
        store.redact("k", 2)
    monkeypatch.undo()
    fresh = FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))
    keyring = fresh.keyring
    assert keyring is not None
    sid = fresh.load("k").state.id
    assert keyring.tree(sid).leaf(2) is not None  # the event is there, the key not yet gone
    assert fresh.load("k").state.messages[1].message[WITHHELD] == "redacted"
    assert replay.recover(fresh).ok
    assert keyring.tree(sid).leaf(2) is None
    assert fresh.finish_erasures("k") is False  # nothing left to do

"""Review of the sealed ended-conversation preview (issue 22): what a sealed snapshot gives back
must be what the log gives, whichever was read; a snapshot can be written after an erase."""

from __future__ import annotations

from pathlib import Path

from privacy_support import encrypted_store

from sessionledger import projections
from sessionledger.eventlog import FileStore, LocalKeyFile

KEY = "k"


def _reopen(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "keys" / "master.key"))


def test_a_message_redacted_before_the_end_keeps_the_preview_the_log_gives(
    tmp_path: Path,
) -> None:
    """A candidate redacted before its conversation ended is a placeholder among the preview's
    messages: the snapshot must give the same preview as the log (the other candidates'), not
    drop it because that one message's key is gone."""
    store = encrypted_store(tmp_path)
    s = store.session(KEY)
    s.append_message("user", "Zanzibar-hospital-7731 first")  # seq 1, redacted below
    s.append_message("assistant", "a reply")
    s.append_message("user", "a later question")
    s.close()
    store.redact(KEY, 1)
    s = store.session(KEY)
    s.clear(reason="new")
    s.append_message("user", "the second conversation")
    s.close()
    from_log = _reopen(tmp_path).load(KEY).state.ended
    assert from_log[0].preview  # the placeholder and the two others
    rows = projections.list_conversations(_reopen(tmp_path), KEY)
    before = [r.preview for r in rows if not r.current]
    assert before == ["a later question"]
    again = _reopen(tmp_path)
    assert again.write_snapshot(KEY).health == "valid"
    assert b"Zanzibar" not in again.snapshot_path(KEY).read_bytes()
    loaded = _reopen(tmp_path).load(KEY)
    assert loaded.snapshot_seq == loaded.state.seq
    assert loaded.state.ended == from_log
    rows = projections.list_conversations(_reopen(tmp_path), KEY)
    assert [r.preview for r in rows if not r.current] == before


def test_write_snapshot_right_after_an_erase_does_not_raise(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    s = store.session(KEY, metadata={"title": "T-Okapi"})
    s.append_message("user", "Zanzibar-hospital-7731 first")
    s.clear(reason="new")
    s.close()
    store.erase(KEY)
    again = _reopen(tmp_path)
    status = again.write_snapshot(KEY)
    assert (status.health, status.written) == ("missing", False)
    assert "erased" in status.reason and not again.snapshot_path(KEY).exists()
    assert _reopen(tmp_path).load(KEY).state.erased_upto == again.load(KEY).state.seq

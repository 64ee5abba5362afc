"""Bad arguments to the public API raise the library's own exceptions (EventLogError), write
nothing, and name what was wrong: never a bare TypeError or ValueError from inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessionledger import replay
from sessionledger.eventlog import FileStore, InvalidEventError


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session("a:b") as w:
        w.append_message("user", "hello")
        w.append_message("assistant", "hi")
    return store


@pytest.mark.parametrize("bad", [[1, 2], "ab", 5, [("a", 1)]])
def test_update_metadata_wants_a_mapping(store: FileStore, bad: Any) -> None:
    before = store.read_bytes("a:b")
    with store.session("a:b") as w, pytest.raises(InvalidEventError, match="set takes a mapping"):
        w.update_metadata(set=bad)
    assert store.read_bytes("a:b") == before


@pytest.mark.parametrize("seq", ["1", -1, True, 1.5])
def test_a_bad_seq_for_state_at_and_fork(store: FileStore, seq: Any) -> None:
    before = sorted(store.keys())
    with pytest.raises(InvalidEventError, match="seq must be an integer"):
        replay.state_at(store, "a:b", seq=seq)
    with pytest.raises(InvalidEventError, match="seq must be an integer"):
        replay.fork(store, "a:b", seq)
    assert sorted(store.keys()) == before


def test_state_at_wants_seq_or_at_not_both(store: FileStore) -> None:
    from datetime import UTC, datetime

    with pytest.raises(InvalidEventError, match="not both"):
        replay.state_at(store, "a:b", seq=1, at=datetime.now(UTC))


def test_export_and_follow_refuse_bad_options(store: FileStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidEventError, match="format must be"):
        replay.export_store(store, tmp_path / "out", format="pdf")  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidEventError, match="poll"):
        replay.follow(store, "a:b", poll=0)

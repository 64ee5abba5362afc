"""replay.state_at, timeline and diff: time travel matches a fold of the prefix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from replay_sample import KEY, build_sample

from sessionledger import projections, replay
from sessionledger.eventlog import (
    CorruptLogError,
    FileStore,
    MemoryStore,
    SessionState,
    fold,
    state_enc_hook,
)


def comparable(state: SessionState) -> dict[str, object]:
    encoded = msgspec.json.encode(state, enc_hook=state_enc_hook)
    return msgspec.json.decode(encoded)  # type: ignore[no-any-return]


def test_state_at_every_seq_is_the_fold_of_the_prefix() -> None:
    store = MemoryStore()
    build_sample(store)
    loaded = store.load(KEY)
    for seq in range(0, loaded.state.seq + 1):
        expected = fold(loaded.header, [e for e in loaded.events if e.seq <= seq])
        assert comparable(replay.state_at(store, KEY, seq=seq)) == comparable(expected)
    assert comparable(replay.state_at(store, KEY)) == comparable(loaded.state)
    # What the LLM saw then.
    then = projections.history(replay.state_at(store, KEY, seq=4))
    assert [m["role"] for m in then] == ["user", "assistant", "tool", "assistant"]


def test_state_at_a_time(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    events = store.load(KEY).events
    for event in events:
        got = replay.state_at(store, KEY, at=event.ts)
        # The last event at or before that moment (events with the same time included).
        expected = max(e.seq for e in events if e.ts <= event.ts)
        assert got.seq == expected
    assert replay.state_at(store, KEY, at=events[-1].ts + timedelta(days=1)).seq == events[-1].seq
    naive_local = events[3].ts.astimezone().replace(tzinfo=None)
    assert replay.state_at(store, KEY, at=naive_local).seq >= events[3].seq
    with pytest.raises(replay.PointNotFoundError, match="before the session"):
        replay.state_at(store, KEY, at=datetime(2000, 1, 1, tzinfo=UTC))


def test_state_at_bad_points_and_corruption(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    build_sample(store)
    with pytest.raises(replay.PointNotFoundError, match="past the end"):
        replay.state_at(store, KEY, seq=99)
    with pytest.raises(ValueError):
        replay.state_at(store, KEY, seq=-1)
    path = store.path_for(KEY)
    path.write_bytes(path.read_bytes().replace(b"Nara deer", b"Nara DEER"))
    assert replay.state_at(store, KEY, seq=7).seq == 7  # before the bad line: fine
    with pytest.raises(CorruptLogError, match="line 9 of"):
        replay.state_at(store, KEY, seq=8)


def test_timeline_says_what_each_event_changed() -> None:
    store = MemoryStore()
    build_sample(store)
    entries = {e.seq: e for e in replay.timeline(store, KEY)}
    assert len(entries) == 16
    assert entries[1].added == [1] and entries[1].role == "user"
    assert entries[5].metadata_set == {"title": "Kyoto trip", "tags": ["travel"]}
    assert entries[6].consolidated == (0, 2)
    comp = entries[9].compaction
    assert comp is not None and (comp.first_seq, comp.last_seq, comp.saved) == (1, 4, 780)
    assert entries[10].metadata_was == {"title": "Kyoto trip"}
    assert entries[10].metadata_unset == ["tags"]
    assert entries[12].withdrawn == [11] and entries[12].type == "retracted"
    assert entries[13].withdrawn == [1, 2] and entries[13].reason == "retain_suffix"
    assert entries[14].lifecycle == ("active", "idle")
    assert entries[16].lifecycle == ("idle", "archived") and entries[16].reason == "archive"
    assert "withdrew 2 message(s)" in entries[13].summary
    # Ranges by seq and by time, inclusive.
    assert [e.seq for e in replay.timeline(store, KEY, since=5, until=7)] == [5, 6, 7]
    ts = entries[10].ts
    assert [e.seq for e in replay.timeline(store, KEY, since=ts, until=ts)] == [
        s for s, e in entries.items() if e.ts == ts
    ]
    # Entries are plain data (for --json).
    assert msgspec.json.decode(msgspec.json.encode(entries[9]))["compaction"]["saved"] == 780


def test_diff_between_two_points() -> None:
    store = MemoryStore()
    build_sample(store)
    d = replay.diff(store, KEY, 4, 13)
    assert [m.seq for m in d.added] == [7, 8]
    assert [m.seq for m in d.withdrawn] == [1, 2]
    assert d.metadata_set == {"title": "Kyoto + Nara"} and d.metadata_unset == []
    assert d.last_consolidated == (0, 0) and d.changed
    back = replay.diff(store, KEY, 13, 4)
    assert [m.seq for m in back.added] == [1, 2] and back.seq_a == 13
    assert not replay.diff(store, KEY, 5, 5).changed
    with pytest.raises(replay.PointNotFoundError):
        replay.diff(store, KEY, 0, 17)

"""A plain message append (no ``expected_seq``, no ``id``) takes the log's own path
(``SessionLog.submit_message``, no draft): it must write and fold exactly what the general path
(``_write(message_draft(...))``) does, and be taken only where appends reach the log itself."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionledger import replay
from sessionledger.eventlog import (
    FileStore,
    InvalidEventError,
    MemoryStore,
    MessageAppended,
    SessionWriter,
    StoreClosedError,
    _writeapi,
    _writer,
    decode_log,
)
from sessionledger.eventlog._values import encode_checked
from sessionledger.eventlog._writeapi import Draft, message_draft
from sessionledger.eventlog._writer import SessionLog

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "assistant", "content": "caf\u00e9 \u2028 \x7f \u0085", "name": "x"},
    {"role": "tool", "content": None, "tool_call_id": "t1", "extra": [1, {"a": None}]},
    {"role": "user", "content": "x" * 5000, "timestamp": "2026-01-01T00:00:00"},
]


class _Clock:
    """``datetime`` whose ``now`` is a fixed sequence (the same for both paths)."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def now(self, tz: Any = None) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC).replace(microsecond=next(self._ticks))


def _general(writer: SessionWriter, message: dict[str, Any]) -> int:
    """The general path of ``append_message_dict`` for ``message``."""
    msg = dict(message)
    body = msgspec.Raw(encode_checked(msg, "message"))
    tokens = int(writer._count_tokens(msg))
    return writer._write(message_draft(msg, body, tokens), None, None)


def _events(data: bytes) -> list[MessageAppended]:
    return [e for e in decode_log(data).events if isinstance(e, MessageAppended)]


@pytest.mark.parametrize("durability", ["always", "batch", "none"])
def test_the_fast_path_writes_what_the_general_path_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    calls: list[int] = []
    real_submit = SessionLog.submit

    def counting(self: SessionLog, draft: Draft, *args: Any) -> int:
        calls.append(1)
        return real_submit(self, draft, *args)

    monkeypatch.setattr(SessionLog, "submit", counting)  # before the writers bind it
    store = FileStore(tmp_path, durability=durability)
    fast, slow = store.session("s:fast"), store.session("s:slow")
    calls.clear()
    for writer, append in ((fast, fast.append_message_dict), (slow, lambda m: _general(slow, m))):
        ids = iter(f"{n:032x}" for n in range(100))
        monkeypatch.setattr(_writeapi, "new_event_id", lambda ids=ids: next(ids))
        monkeypatch.setattr(_writer, "new_event_id", lambda ids=ids: next(ids))
        monkeypatch.setattr(_writeapi, "_ids", [])
        clock = _Clock()
        monkeypatch.setattr(_writeapi, "datetime", clock)
        monkeypatch.setattr(_writer, "datetime", clock)
        assert [append(m) for m in MESSAGES] == [1, 2, 3, 4]
        if writer is fast:
            assert calls == []  # no draft, no submit
    assert len(calls) == len(MESSAGES)
    a, b = _events(store.read_bytes("s:fast")), _events(store.read_bytes("s:slow"))
    fields = ("seq", "ts", "id", "tokens")
    assert [[getattr(e, f) for f in fields] for e in a] == [
        [getattr(e, f) for f in fields] for e in b
    ]
    assert [bytes(e.body) for e in a] == [bytes(e.body) for e in b]
    assert [e.message for e in a] == MESSAGES
    # What the writers folded: the same messages, hashes of their own lines, the same totals.
    for writer, events in ((fast, a), (slow, b)):
        state = writer.state
        assert [m.h for m in state.messages] == [e.h for e in events]
        assert state.head == events[-1].h and state.seq == 4
        assert state.message_dicts == MESSAGES
    fs, ss = fast.state, slow.state
    assert (fs.total_tokens, fs.live_tokens, fs.total_messages) == (
        ss.total_tokens,
        ss.live_tokens,
        ss.total_messages,
    )
    fast.close()
    slow.close()
    assert replay.verify(store).ok
    store.close()


def test_a_closed_writer_and_bad_input_behave_as_before(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="always")
    w = store.session("k")
    with pytest.raises(InvalidEventError):
        w.append_message_dict({"role": "user", "content": {1, 2}})
    with pytest.raises(InvalidEventError):
        w.append_message_dict({"content": "no role"})
    assert w.append_message_dict({"role": "user", "content": "ok"}) == 1
    w.close()
    with pytest.raises(StoreClosedError):
        w.append_message_dict({"role": "user", "content": "late"})
    other = store.session("k")
    store.close()
    with pytest.raises(StoreClosedError):  # the log is closed (the store), not the handle
        other.append_message_dict({"role": "user", "content": "late"})
    assert [e.message["content"] for e in _events(FileStore(tmp_path).read_bytes("k"))] == ["ok"]


def test_only_writers_whose_appends_reach_the_log_take_it() -> None:
    """A writer whose appends go elsewhere (a backend's own group commit, PostgreSQL's) or a
    subclass with its own ``_submit`` keeps the general path for every append."""
    store = MemoryStore()
    plain = store.session("k")
    assert plain._append_message is not None
    routed: list[Draft] = []
    log = plain.log

    def elsewhere(draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
        routed.append(draft)
        return log.submit(draft, expected_seq, event_id)

    handle = SessionWriter(log, submit=elsewhere)
    assert handle._append_message is None
    assert handle.append_message_dict({"role": "user", "content": "a"}) == 1
    assert len(routed) == 1

    class Own(SessionWriter):
        def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> int:
            routed.append(draft)
            return super()._submit(draft, expected_seq, event_id)

    own = Own(log)
    assert own._append_message is None
    assert own.append_message_dict({"role": "user", "content": "b"}) == 2
    assert len(routed) == 2
    assert plain.append_message_dict({"role": "user", "content": "c"}) == 3
    assert len(routed) == 2
    assert [m["content"] for m in store.load("k").state.message_dicts] == ["a", "b", "c"]


@pytest.mark.parametrize("durability", ["always", "none"])
def test_a_sealed_store_takes_the_fast_path_and_seals_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """An encrypted store's plain appends skip the draft too: each line is sealed (no
    plaintext in the file), the writer keeps the plaintext it sealed (no decryption to read
    it back), and a new store object with the key opens the same messages."""
    pytest.importorskip("cryptography")
    from sessionledger.eventlog import LocalKeyFile

    calls: list[int] = []
    real_submit = SessionLog.submit

    def counting(self: SessionLog, draft: Draft, *args: Any) -> int:
        calls.append(1)
        return real_submit(self, draft, *args)

    monkeypatch.setattr(SessionLog, "submit", counting)

    def sealed() -> FileStore:
        keys = LocalKeyFile(tmp_path / "keys" / "master.key")
        return FileStore(tmp_path / "s", key_provider=keys, durability=durability)

    store = sealed()
    w = store.session("k")
    calls.clear()
    assert [w.append_message_dict(dict(m)) for m in MESSAGES] == [1, 2, 3, 4]
    assert calls == []
    assert all("_plain" in m.__dict__ for m in w.state.messages)
    assert w.state.message_dicts == MESSAGES
    w.close()
    raw = store.read_bytes("k")
    assert b"plain" not in raw and b"tool_call_id" not in raw and b"xxxxxxxx" not in raw
    store.close()
    again = sealed()
    assert again.load("k").state.message_dicts == MESSAGES
    assert replay.verify(again).ok
    again.close()

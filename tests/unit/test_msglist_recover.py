"""A message list whose record file turns out damaged while it is being iterated."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sessionledger.eventlog import MessageAppended
from sessionledger.eventlog._msgindex import BLOCK, MessageList
from sessionledger.eventlog._snapshot import SnapshotError


class _Damaged:
    """An index source whose records cannot be read (the list falls back to the log)."""

    where = "test"
    hash_key = b""
    count = 0
    last_span = b""
    opener: Any = None

    def __init__(self, events: list[MessageAppended]) -> None:
        self.events = events

    def records(self, start: int, count: int) -> bytes:
        raise SnapshotError("a chunk fails its digest")

    def read(self, offset: int, length: int) -> bytes:
        return b""

    def all_messages(self) -> list[MessageAppended]:
        return list(self.events)


def _events(n: int) -> list[MessageAppended]:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        MessageAppended.of(
            seq=i + 1, ts=ts, id=f"e{i}", message={"role": "user", "content": str(i)}
        )
        for i in range(n)
    ]


def _list(events: list[MessageAppended]) -> MessageList:
    """Every event indexed; the first block already read, so the damage is found at the last
    message (the only one in the second block)."""
    out = MessageList.indexed(_Damaged(events), [(0, len(events))])
    out._cache[0] = list[MessageAppended | None](events[:BLOCK])
    return out


def test_damage_found_at_the_last_message_gives_each_message_once() -> None:
    events = _events(BLOCK + 1)
    assert list(_list(events)) == events
    assert list(reversed(_list(events))) == events[::-1]


def test_damage_found_at_the_last_message_with_messages_in_memory_after_it() -> None:
    events = _events(BLOCK + 3)
    mine = MessageList.indexed(_Damaged(events[: BLOCK + 1]), [(0, BLOCK + 1)])
    mine._cache[0] = list[MessageAppended | None](events[:BLOCK])
    for event in events[BLOCK + 1 :]:
        mine.append(event)
    assert list(mine) == events

"""A session with fixed times and ids (so its exports have fixed bytes), for the viewer tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from sessionledger.eventlog import BaseStore, Event, MemoryStore, MessageAppended, decode_log
from sessionledger.eventlog.codec import encode_lines

KEY = "telegram:42"
T0 = datetime(2026, 11, 25, 9, 0, 0, tzinfo=UTC)
LONG = "Kyoto ryokan list: " + "Gion Yoshiima, 28000 yen; " * 120


def write_session(store: BaseStore, key: str = KEY) -> None:
    """Write a conversation with tool calls, a long result, every kind of event (times vary)."""
    with store.session(key, metadata={"agent": "demo", "email": "kim@example.org"}) as s:
        s.append_message("system", "You are a travel agent.")
        s.append_message("user", "Plan a trip to Kyoto", media=["/tmp/map.png"])
        s.append_message(
            "assistant",
            None,
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "web_search", "arguments": '{"q": "Kyoto ``ryokan``"}'},
                }
            ],
            reasoning_content="Search first.",
        )
        s.append_message("tool", LONG, tool_call_id="call_1", name="web_search")
        s.append_message("assistant", "# Not a heading\nDay 1: temples. Day 2: gardens.")
        s.update_metadata(set={"title": "Kyoto trip", "tags": ["travel"]})
        s.mark_consolidated(2)
        s.append_message("user", "Add a day in Nara")
        s.append_message("assistant", "Day 3: Nara deer park.")
        s.compact("User plans Kyoto and Nara.", upto=4, tokens_before=900, tokens_after=120)
        s.append_message("tool", "late result", tool_call_id="call_9", name="lookup")
        s.set_lifecycle("idle")


def fixed_log(key: str = KEY, hash_key: bytes = b"") -> bytes:
    """The session's log with times T0 + n minutes and ids ``e<n>``: the same bytes every run."""
    scratch = MemoryStore()
    write_session(scratch, key)
    decoded = decode_log(scratch.read_bytes(key))
    assert decoded.header is not None and decoded.bad is None
    header = msgspec.structs.replace(decoded.header, id="s" * 32, created_at=T0, ts=T0)
    events: list[Event] = []
    for e in decoded.events:
        ts = T0 + timedelta(minutes=e.seq)
        if isinstance(e, MessageAppended):
            message = dict(e.message, timestamp=ts.replace(tzinfo=None).isoformat())
            events.append(
                MessageAppended.of(
                    seq=e.seq, ts=ts, id=f"e{e.seq}", message=message, tokens=e.tokens
                )
            )
        else:
            events.append(msgspec.structs.replace(e, id=f"e{e.seq}", ts=ts))
    data, _ = encode_lines([header, *events], key=hash_key)  # type: ignore[list-item]
    return data


def fixed_store(key: str = KEY, hash_key: bytes | None = None) -> MemoryStore:
    """A memory store holding the fixed session."""
    store = MemoryStore(hash_key=hash_key)
    assert store.import_bytes(key, fixed_log(key, store.hash_key)) == "created"
    return store

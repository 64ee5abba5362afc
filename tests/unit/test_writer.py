"""The session writer's API on the memory store: events built, validated, folded, written."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any

import pytest
from threaded import run_threads

from sessionledger.eventlog import (
    Cleared,
    Compacted,
    ConflictError,
    Consolidated,
    InvalidEventError,
    LifecycleChanged,
    MemoryStore,
    MessageAppended,
    MetadataChanged,
    Retracted,
    SessionWriter,
    StoreClosedError,
    Trimmed,
    decode_log,
    estimate_tokens,
    verify_chain,
)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def writer(store: MemoryStore) -> SessionWriter:
    return store.session("cli:1")


def logged(store: MemoryStore, key: str = "cli:1") -> list[Any]:
    decoded = decode_log(store.read_bytes(key))
    assert decoded.bad is None and decoded.torn is None
    return list(decoded.events)


def test_append_message_keeps_every_field_and_adds_timestamp(
    store: MemoryStore, writer: SessionWriter
) -> None:
    fields: dict[str, Any] = {
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
        "reasoning_content": "hmm",
        "thinking_blocks": [{"type": "thinking", "thinking": "..."}],
        "media": ["/tmp/a.png"],
        "_command": True,
        "_channel_delivery": {"chat": 1},
        "anything_else": [1, 2.5, None, {"x": "y"}],
    }
    seq = writer.append_message("assistant", None, **fields)
    assert seq == 1 == writer.seq
    (event,) = logged(store)
    assert isinstance(event, MessageAppended)
    message = event.message
    timestamp = message.pop("timestamp")
    assert datetime.fromisoformat(timestamp).tzinfo is None  # local time, like nanobot
    assert message == {"role": "assistant", "content": None, **fields}
    assert writer.state.messages[0].message["timestamp"] == timestamp


def test_explicit_timestamp_is_kept(store: MemoryStore, writer: SessionWriter) -> None:
    writer.append_message("user", "hi", timestamp="2026-01-01T00:00:00")
    assert logged(store)[0].message["timestamp"] == "2026-01-01T00:00:00"


def test_append_message_dict_is_exact(store: MemoryStore, writer: SessionWriter) -> None:
    msg = {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "web"}
    writer.append_message_dict(msg)
    assert logged(store)[0].message == msg  # no timestamp added


def test_tokens_are_counted_once_at_write_time(store: MemoryStore) -> None:
    calls: list[Mapping[str, Any]] = []

    def counter(message: Mapping[str, Any]) -> int:
        calls.append(message)
        return 42

    counted = MemoryStore(token_counter=counter)
    w = counted.session("k")
    w.append_message("user", "hello")
    assert len(calls) == 1
    assert logged(counted, "k")[0].tokens == 42
    assert w.state.live_tokens == 42
    # The default counter is the byte heuristic.
    d = store.session("d")
    d.append_message_dict({"role": "user", "content": "x" * 400})
    assert d.state.messages[0].tokens == estimate_tokens({"role": "user", "content": "x" * 400})


@pytest.mark.parametrize("role", ["", None, 3])
def test_bad_role_is_refused(store: MemoryStore, writer: SessionWriter, role: Any) -> None:
    before = store.read_bytes("cli:1")
    with pytest.raises(InvalidEventError, match="role"):
        writer.append_message(role, "x")
    with pytest.raises(InvalidEventError, match="role"):
        writer.append_message_dict({"role": role, "content": "x"})
    with pytest.raises(InvalidEventError, match="role"):
        writer.append_message_dict({"content": "x"})
    assert store.read_bytes("cli:1") == before and writer.seq == 0


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"content": object()}, "content"),
        ({"content": "ok", "media": [object()]}, "media"),
        ({"content": "ok", "extra": {1j: 2}}, "extra"),
        ({"content": "\ud800"}, "content"),
        ({"content": "ok", "name": "x\udfff"}, "name"),
    ],
)
def test_unserialisable_message_names_the_field(
    store: MemoryStore, writer: SessionWriter, fields: dict[str, Any], name: str
) -> None:
    before = store.read_bytes("cli:1")
    with pytest.raises(InvalidEventError, match=repr(name)):
        writer.append_message("user", **fields)
    assert store.read_bytes("cli:1") == before
    assert writer.seq == 0 and writer.state.messages == []
    assert writer.append_message("user", "fine") == 1


def test_non_str_message_keys_are_refused(writer: SessionWriter) -> None:
    with pytest.raises(InvalidEventError, match="keys"):
        writer.append_message_dict({"role": "user", 1: "x"})  # type: ignore[dict-item]
    with pytest.raises(InvalidEventError):
        writer.append_message_dict(["role", "user"])  # type: ignore[arg-type]


def test_update_metadata(store: MemoryStore, writer: SessionWriter) -> None:
    writer.update_metadata(set={"title": "Kyoto", "n": 1})
    writer.update_metadata(set={"n": 2}, unset=["title"])
    assert writer.state.metadata == {"n": 2}
    events = logged(store)
    assert events[1] == MetadataChanged(
        seq=2, ts=events[1].ts, id=events[1].id, h=events[1].h, set={"n": 2}, unset=["title"]
    )


def test_update_metadata_refuses_bad_input(store: MemoryStore, writer: SessionWriter) -> None:
    before = store.read_bytes("cli:1")
    with pytest.raises(InvalidEventError, match="'bad'"):
        writer.update_metadata(set={"ok": 1, "bad": {object()}})
    with pytest.raises(InvalidEventError):
        writer.update_metadata(unset="title")
    with pytest.raises(InvalidEventError):
        writer.update_metadata(set={1: "x"})  # type: ignore[dict-item]
    assert store.read_bytes("cli:1") == before


def test_mark_consolidated(store: MemoryStore, writer: SessionWriter) -> None:
    for i in range(3):
        writer.append_message("user", str(i))
    writer.mark_consolidated(2)
    assert writer.state.last_consolidated == 2
    assert isinstance(logged(store)[-1], Consolidated)
    before = store.read_bytes("cli:1")
    for bad in (4, -1, True, 1.5):
        with pytest.raises(InvalidEventError):
            writer.mark_consolidated(bad)  # type: ignore[arg-type]
    assert store.read_bytes("cli:1") == before


def test_compact(store: MemoryStore, writer: SessionWriter) -> None:
    for i in range(5):
        writer.append_message("user", str(i))
    writer.compact("summary", 3, tokens_before=900, tokens_after=100, model="m", seconds=1.5)
    event = logged(store)[-1]
    assert isinstance(event, Compacted)
    assert (event.summary, event.upto, event.removed, event.kept) == ("summary", 3, 3, 2)
    assert (event.tokens_before, event.tokens_after) == (900, 100)
    assert (event.model, event.extra) == ("m", {"seconds": 1.5})
    assert writer.state.compaction is not None and writer.state.compaction.upto == 3
    writer.compact("again", 1, removed=7, kept=9)
    again = logged(store)[-1]
    assert (again.removed, again.kept) == (7, 9)


def test_compact_refuses_bad_input(store: MemoryStore, writer: SessionWriter) -> None:
    writer.append_message("user", "x")
    before = store.read_bytes("cli:1")
    with pytest.raises(InvalidEventError):
        writer.compact(None, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="past"):
        writer.compact("s", 2)
    with pytest.raises(InvalidEventError, match="tokens_before"):
        writer.compact("s", 1, tokens_before=-1)
    with pytest.raises(InvalidEventError, match="'blob'"):
        writer.compact("s", 1, blob=object())
    assert store.read_bytes("cli:1") == before


def test_trim(store: MemoryStore, writer: SessionWriter) -> None:
    for i in range(4):
        writer.append_message("user", str(i))
    writer.mark_consolidated(3)
    writer.trim(2, "retain_suffix")
    assert [m.message["content"] for m in writer.state.messages] == ["2", "3"]
    assert writer.state.last_consolidated == 1
    event = logged(store)[-1]
    assert isinstance(event, Trimmed) and (event.count, event.reason) == (2, "retain_suffix")


@pytest.mark.parametrize(
    ("drop", "reason"),
    [(1, "because"), (0, "file_cap"), (-1, "file_cap"), (3, "file_cap"), (True, "file_cap")],
)
def test_trim_refuses_bad_input(
    store: MemoryStore, writer: SessionWriter, drop: Any, reason: Any
) -> None:
    writer.append_message("user", "a")
    writer.append_message("user", "b")
    before = store.read_bytes("cli:1")
    with pytest.raises(InvalidEventError):
        writer.trim(drop, reason)
    assert store.read_bytes("cli:1") == before


def test_clear(store: MemoryStore, writer: SessionWriter) -> None:
    writer.update_metadata(set={"_last_summary": "s", "title": "t"})
    writer.append_message("user", "a")
    writer.mark_consolidated(1)
    writer.clear()
    assert writer.state.messages == [] and writer.state.last_consolidated == 0
    assert writer.state.metadata == {"title": "t"}
    assert isinstance(logged(store)[-1], Cleared)


def test_retract(store: MemoryStore, writer: SessionWriter) -> None:
    for i in range(3):
        writer.append_message("assistant", str(i))
    writer.retract()
    writer.retract(count=1)
    assert [m.message["content"] for m in writer.state.messages] == ["0"]
    assert isinstance(logged(store)[-1], Retracted)
    before = store.read_bytes("cli:1")
    for bad in (0, 2, -1):
        with pytest.raises(InvalidEventError):
            writer.retract(bad)
    assert store.read_bytes("cli:1") == before


def test_set_lifecycle(store: MemoryStore, writer: SessionWriter) -> None:
    writer.set_lifecycle("archived", "archive")
    assert (writer.state.lifecycle, writer.state.end_reason) == ("archived", "archive")
    assert isinstance(logged(store)[-1], LifecycleChanged)
    before = store.read_bytes("cli:1")
    with pytest.raises(InvalidEventError, match="lifecycle state"):
        writer.set_lifecycle("sleeping")  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="end reason"):
        writer.set_lifecycle("archived", "bored")  # type: ignore[arg-type]
    assert store.read_bytes("cli:1") == before


def test_expected_seq(store: MemoryStore, writer: SessionWriter) -> None:
    assert writer.append_message("user", "a", expected_seq=0) == 1
    before = store.read_bytes("cli:1")
    with pytest.raises(ConflictError) as info:
        writer.append_message("user", "b", expected_seq=0)
    assert (info.value.expected, info.value.actual, info.value.key) == (0, 1, "cli:1")
    calls: list[Callable[[], int]] = [
        lambda: writer.update_metadata(set={"a": 1}, expected_seq=5),
        lambda: writer.mark_consolidated(0, expected_seq=5),
        lambda: writer.clear(expected_seq=5),
        lambda: writer.set_lifecycle("idle", expected_seq=5),
    ]
    for call in calls:
        with pytest.raises(ConflictError):
            call()
    assert store.read_bytes("cli:1") == before
    assert writer.update_metadata(set={"a": 1}, expected_seq=1) == 2


def test_retried_id_is_a_no_op(store: MemoryStore, writer: SessionWriter) -> None:
    assert writer.append_message("user", "a", id="turn-1") == 1
    writer.append_message("user", "b")
    before = store.read_bytes("cli:1")
    assert writer.append_message("user", "a", id="turn-1") == 1
    # Even with a now-stale expected_seq: the retry already succeeded.
    assert writer.append_message("user", "a", id="turn-1", expected_seq=0) == 1
    assert writer.update_metadata(set={"x": 1}, id="turn-1") == 1
    assert store.read_bytes("cli:1") == before
    assert logged(store)[0].id == "turn-1"


@pytest.mark.parametrize("bad", ["", "x" * 201, 5])
def test_bad_event_id_is_refused(store: MemoryStore, writer: SessionWriter, bad: Any) -> None:
    with pytest.raises(InvalidEventError, match="event id"):
        writer.append_message("user", "a", id=bad)
    assert writer.seq == 0


def test_event_ids_are_unique(store: MemoryStore, writer: SessionWriter) -> None:
    for _ in range(50):
        writer.append_message("user", "a")
    assert len({e.id for e in logged(store)}) == 50


def test_state_and_path(writer: SessionWriter) -> None:
    writer.append_message("user", "a")
    assert writer.state.seq == writer.seq == 1
    assert writer.state.key == "cli:1"
    assert writer.path == "memory:cli:1"


def test_head_is_the_last_line_hash(store: MemoryStore, writer: SessionWriter) -> None:
    writer.append_message("user", "a")
    writer.update_metadata(set={"a": 1})
    assert writer.state.head == verify_chain(store.read_bytes("cli:1")).head


def test_closed_writer_raises(store: MemoryStore, writer: SessionWriter) -> None:
    writer.append_message("user", "a")
    with writer:
        pass
    assert writer.closed
    writer.close()  # idempotent
    with pytest.raises(StoreClosedError):
        writer.append_message("user", "b")
    with pytest.raises(StoreClosedError):
        writer.flush()
    # The store hands out a fresh writer that sees the same log.
    again = store.session("cli:1")
    assert again is not writer and again.seq == 1


def test_flush(writer: SessionWriter) -> None:
    writer.append_message("user", "a")
    writer.flush()


def test_bad_durability_is_refused() -> None:
    with pytest.raises(InvalidEventError, match="durability"):
        MemoryStore(durability="sometimes")


@pytest.mark.parametrize("durability", ["always", "batch", "none"])
def test_threads_never_interleave(durability: str) -> None:
    store = MemoryStore(durability=durability)
    w = store.session("k")

    def work(n: int) -> None:
        for i in range(100):
            w.append_message("user", f"{n}-{i}")

    run_threads(*(partial(work, n) for n in range(4)))
    events = logged(store, "k")
    assert [e.seq for e in events] == list(range(1, 401))
    assert sorted(e.message["content"] for e in events) == sorted(
        f"{n}-{i}" for n in range(4) for i in range(100)
    )

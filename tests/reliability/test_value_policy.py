"""The JSON value policy: values JSON cannot carry are refused at every write entry, naming the
field; the nesting limit is the same at write and at read, and never a ``RecursionError``.

The property test (live state equals the state reopened from disk, for any writes) is
tests/property/test_live_equals_reopened.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionledger.eventlog import (
    AsyncFileStore,
    CorruptLogError,
    FileStore,
    InvalidEventError,
    MemoryStore,
    SessionWriter,
    decode_log,
)
from sessionledger.eventlog._values import LINE_MAX_DEPTH, MAX_DEPTH, nesting
from sessionledger.eventlog.codec import encode_line


class Colour(enum.Enum):
    RED = "red"


class Model(msgspec.Struct):
    a: int = 1


class FakePydantic:
    """Anything with ``model_dump`` is taken for a pydantic model (no import needed)."""

    def model_dump(self) -> dict[str, Any]:
        return {"a": 1}


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


NOT_JSON: list[tuple[str, Any, str]] = [
    ("bytes", b"x", "bytes"),
    ("bytearray", bytearray(b"x"), "bytearray"),
    ("set", {1, 2}, "set"),
    ("frozenset", frozenset({1}), "frozenset"),
    ("tuple", (1, 2), "tuple"),
    ("nan", float("nan"), "not a JSON number"),
    ("inf", float("inf"), "not a JSON number"),
    ("-inf", float("-inf"), "not a JSON number"),
    ("int key", {1: "a"}, "keys are str"),
    ("datetime", dt.datetime(2026, 1, 1), "datetime"),
    ("date", dt.date(2026, 1, 1), "date"),
    ("decimal", decimal.Decimal("1.5"), "Decimal"),
    ("uuid", uuid.uuid4(), "UUID"),
    ("enum", Colour.RED, "Colour"),
    ("struct", Model(), "Model"),
    ("pydantic", FakePydantic(), "model_dump()"),
    ("object", object(), "object"),
    ("nested bytes", {"a": [1, {"b": b"x"}]}, "['a'][1]['b']"),
    ("too deep", nested(MAX_DEPTH + 1), f"deeper than {MAX_DEPTH}"),
    ("far too deep", nested(5000), f"deeper than {MAX_DEPTH}"),
]

WRITES: dict[str, Callable[[SessionWriter, Any], object]] = {
    "message content": lambda w, v: w.append_message("user", v),
    "message field": lambda w, v: w.append_message("assistant", "x", tool_calls=v),
    "message dict": lambda w, v: w.append_message_dict({"role": "user", "content": v}),
    "metadata": lambda w, v: w.update_metadata(set={"title": v}),
    "compaction extra": lambda w, v: w.compact("s", 0, stats=v),
}


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize(("name", "value", "said"), NOT_JSON, ids=[n for n, _, _ in NOT_JSON])
def test_refused_at_every_write_naming_the_field(
    tmp_path: Path, write: str, name: str, value: Any, said: str
) -> None:
    store = FileStore(tmp_path, durability="none")
    writer = store.session("k")
    before = store.read_bytes("k")
    with pytest.raises(InvalidEventError) as info:
        WRITES[write](writer, value)
    assert said in str(info.value)
    assert "field" in str(info.value)
    assert store.read_bytes("k") == before  # nothing written
    assert writer.seq == 0


@pytest.mark.parametrize(("name", "value", "said"), NOT_JSON, ids=[n for n, _, _ in NOT_JSON])
def test_refused_in_a_new_sessions_metadata(
    tmp_path: Path, name: str, value: Any, said: str
) -> None:
    store = FileStore(tmp_path, durability="none")
    with pytest.raises(InvalidEventError, match="metadata field 'x'"):
        store.session("k", metadata={"x": value})
    assert not store.exists("k") and list(tmp_path.glob("*.jsonl")) == []


@pytest.mark.anyio
async def test_refused_in_async_session_metadata(tmp_path: Path) -> None:
    store = AsyncFileStore(tmp_path, durability="none")
    try:
        with pytest.raises(InvalidEventError, match=r"model_dump\(\)"):
            await store.session("k", metadata={"x": FakePydantic()})
        writer = await store.session("k")
        with pytest.raises(InvalidEventError, match="set"):
            await writer.append_message("user", {1, 2})
        assert not list(tmp_path.glob("*.quarantine"))
    finally:
        await store.close()


def test_the_memory_store_follows_the_same_policy() -> None:
    writer = MemoryStore().session("k")
    with pytest.raises(InvalidEventError, match="tuple"):
        writer.append_message("user", (1, 2))


@pytest.mark.parametrize("write", WRITES)
def test_the_deepest_accepted_value_reads_back_equal(tmp_path: Path, write: str) -> None:
    store = FileStore(tmp_path, durability="none")
    writer = store.session("k", metadata={"deep": nested(MAX_DEPTH)})
    WRITES[write](writer, nested(MAX_DEPTH))
    writer.append_message("user", "after")
    live = writer.state.copy()
    store.close()
    reopened = FileStore(tmp_path).load("k", snapshot=False)
    assert reopened.state.message_dicts == live.message_dicts
    assert reopened.state.metadata == live.metadata
    assert reopened.header.metadata == {"deep": nested(MAX_DEPTH)}
    assert reopened.bad is None and reopened.torn is None


def test_plain_json_values_are_accepted_exactly(tmp_path: Path) -> None:
    value = {"a": [1, -0.0, 1.5e300, True, None, "\u2028\x00\U0001f338"], "b": {}, "c": 2**80}
    store = FileStore(tmp_path, durability="none")
    writer = store.session("k")
    writer.append_message("user", value)
    writer.update_metadata(set={"v": value})
    store.close()
    state = FileStore(tmp_path).load("k").state
    assert state.message_dicts[0]["content"] == value
    assert state.metadata["v"] == value


def _hostile_log(depth: int, *, then: bool) -> bytes:
    """A correctly chained log whose second line nests ``depth`` containers in its message."""
    from sessionledger.eventlog import Header, MessageAppended

    now = dt.datetime.now(dt.UTC)
    header = Header(seq=0, ts=now, id="h", key="k", created_at=now)
    line0, h = encode_line(header, "0" * 32)
    raw = b'{"role":"user","content":' + b"[" * depth + b"1" + b"]" * depth + b"}"
    event = MessageAppended(seq=1, ts=now, id="e1", body=msgspec.Raw(raw))
    line1, h = encode_line(event, h)
    out = line0 + line1
    if then:
        line2, _ = encode_line(
            MessageAppended.of(seq=2, ts=now, id="e2", message={"role": "user", "content": "x"}),
            h,
        )
        out += line2
    return out


@pytest.mark.parametrize("depth", [LINE_MAX_DEPTH - 1, LINE_MAX_DEPTH + 1, 989, 5000])
def test_the_reader_accepts_exactly_the_writers_nesting(depth: int) -> None:
    data = _hostile_log(depth - 2, then=True)  # the event object and the message: 2 levels
    decoded = decode_log(data)
    if depth <= LINE_MAX_DEPTH:
        assert decoded.bad is None and len(decoded.events) == 2
    else:
        assert decoded.bad is not None and decoded.bad.line == 2
        assert "nested deeper" in decoded.bad.reason


def test_a_deep_line_in_the_middle_is_reported_never_a_recursion_error(tmp_path: Path) -> None:
    (tmp_path / "k.jsonl").write_bytes(_hostile_log(3000, then=True))
    store = FileStore(tmp_path)
    with pytest.raises(CorruptLogError, match=r"line 2 .*nested deeper"):
        store.load("k")


def test_nesting_ignores_brackets_inside_strings() -> None:
    assert nesting(b'{"a":"[[[{{{\\"[[","b":[[1]]}') == 3
    assert nesting(b'"\\\\"') == 0
    assert nesting(b"[]") == 1

"""The event-sourcing invariant: for any sequence of writes, the live state equals the state
reopened from disk.

Writes carry awkward values on purpose (bytes, sets, tuples, NaN, int keys, datetimes, deep
nesting, lone surrogates, control and separator characters, huge ints): each write is either
refused with ``InvalidEventError`` and writes nothing, or is read back exactly.
"""

from __future__ import annotations

import contextlib
import math
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import (
    FileStore,
    InvalidEventError,
    MemoryStore,
    SessionState,
    SessionWriter,
    state_enc_hook,
)
from sessionledger.eventlog._values import MAX_DEPTH


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


awkward_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.text(alphabet=st.sampled_from(["\u2028", "\u2029", "\x7f", "\x85", "\x00", "\ud800"])),
    st.binary(max_size=4),
    st.sampled_from(
        [
            datetime(2026, 1, 1, tzinfo=UTC),
            Decimal("1.5"),
            UUID(int=7),
            (1, 2),
            frozenset({1}),
            math.nan,
            10**30,
        ]
    ),
    st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 300]).map(_deep),
)
awkward = st.recursive(
    awkward_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.dictionaries(st.integers(), inner, max_size=2),
        st.sets(st.integers(), max_size=2),
        st.tuples(inner),
    ),
    max_leaves=6,
)

write = st.one_of(
    st.tuples(st.just("message"), awkward),
    st.tuples(st.just("field"), awkward),
    st.tuples(st.just("metadata"), awkward),
    st.tuples(st.just("unset"), st.just(None)),
    st.tuples(st.just("compact"), awkward),
    st.tuples(st.just("consolidate"), st.integers(min_value=0, max_value=3)),
    st.tuples(st.just("retract"), st.integers(min_value=1, max_value=2)),
    st.tuples(st.just("trim"), st.integers(min_value=1, max_value=2)),
    st.tuples(st.just("clear"), st.just(None)),
    st.tuples(st.just("lifecycle"), st.sampled_from(["idle", "active", "archived"])),
)


def _apply(writer: SessionWriter, kind: str, value: Any) -> None:
    if kind == "message":
        writer.append_message("user", value)
    elif kind == "field":
        writer.append_message("assistant", "x", tool_calls=value, extra={"v": value})
    elif kind == "metadata":
        writer.update_metadata(set={"v": value, "title": "t"})
    elif kind == "unset":
        writer.update_metadata(unset=["v"])
    elif kind == "compact":
        writer.compact("summary", min(1, len(writer.state.messages)), stat=value)
    elif kind == "consolidate":
        writer.mark_consolidated(min(value, len(writer.state.messages)))
    elif kind == "retract":
        writer.retract(value)
    elif kind == "trim":
        writer.trim(value, "truncate")
    elif kind == "clear":
        writer.clear(reason="new")
    else:
        writer.set_lifecycle(value)


def _same(live: SessionState, reopened: SessionState) -> None:
    def encode(state: SessionState) -> bytes:
        return msgspec.json.encode(state, enc_hook=state_enc_hook)

    assert encode(reopened) == encode(live)
    assert reopened.message_dicts == live.message_dicts  # the caller's objects vs decoded
    assert reopened.metadata == live.metadata
    for event in live.messages:  # the objects the live state keeps are JSON-equal to the log
        assert msgspec.json.decode(msgspec.json.encode(event.message)) == event.message


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writes=st.lists(write, max_size=12), header=awkward)
def test_live_state_equals_the_state_reopened_from_disk(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[str, Any]], header: Any
) -> None:
    root: Path = tmp_path_factory.mktemp("live")
    store = FileStore(root, durability="none")
    try:
        writer = store.session("k", metadata={"h": header})
    except InvalidEventError:
        assert not store.exists("k")
        writer = store.session("k")
    for kind, value in writes:
        before = store.read_bytes("k")
        seq = writer.seq
        try:
            _apply(writer, kind, value)
        except InvalidEventError:
            assert store.read_bytes("k") == before and writer.seq == seq
    live = writer.state.copy()
    store.close()
    _same(live, FileStore(root).load("k", snapshot=False).state)
    _same(live, FileStore(root).session("k").state)


@settings(max_examples=60, deadline=None)
@given(writes=st.lists(write, max_size=10))
def test_the_memory_store_keeps_the_same_invariant(writes: list[tuple[str, Any]]) -> None:
    store = MemoryStore()
    writer = store.session("k")
    for kind, value in writes:
        with contextlib.suppress(InvalidEventError):
            _apply(writer, kind, value)
    live = writer.state.copy()
    _same(live, store.load("k", snapshot=False).state)

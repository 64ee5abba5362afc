"""The history read from an index snapshot equals the history of the same session folded in
memory: the indexed path (a window's records read in one go, only the records asked for,
message dicts decoded in one call) gives exactly what the event-by-event path gives.

Sessions are written through a real file store, with holes (a ``clear`` that keeps some
messages, a trim), compactions and a consolidation cursor, Agents SDK items, commands and
media; the indexed list is read in a random order first, so the history meets a cache that
holds some blocks whole, some in part and some not at all.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_history_props import eager, messages

from sessionledger import projections
from sessionledger.eventlog import AGENTS_ITEM_KEY, FileStore, MessageAppended
from sessionledger.eventlog._msgindex import BLOCK, CACHE_BLOCKS

KEY = "p:indexed"

sdk_items = st.sampled_from(
    [
        {"role": "function_call", AGENTS_ITEM_KEY: {"type": "function_call", "call_id": "c1"}},
        {
            "role": "function_call_output",
            AGENTS_ITEM_KEY: {"type": "function_call_output", "call_id": "c1", "output": "x"},
        },
        {"role": "reasoning", AGENTS_ITEM_KEY: {"type": "reasoning", "summary": []}},
    ]
)

ops = st.lists(
    st.one_of(
        messages().map(lambda m: ("append", m)),
        sdk_items.map(lambda m: ("append", m)),
        st.tuples(st.just("clear"), st.lists(st.integers(0, 300), max_size=80)),
        st.tuples(st.just("trim"), st.integers(1, 40)),
        st.tuples(st.just("compact"), st.integers(0, 300)),
        st.tuples(st.just("consolidate"), st.integers(0, 300)),
    ),
    min_size=1,
    max_size=60,
)

options = st.fixed_dictionaries(
    {
        "max_messages": st.integers(-1, 300),
        "max_tokens": st.sampled_from([0, 0, 0, 1, 50, 400, 5_000]),
        "include_timestamps": st.booleans(),
        "include_summary": st.booleans(),
        "extend_to_user": st.booleans(),
    }
)


def _write(root: Path, plan: list[tuple[str, Any]], bulk: int) -> FileStore:
    store = FileStore(root, durability="none")
    with store.session(KEY) as w:
        for i in range(bulk):  # enough messages for several blocks of records
            w.append_message_dict(
                {"role": "user" if i % 3 == 0 else "assistant", "content": f"m{i} é 東 " * (i % 5)}
            )
        for op, arg in plan:
            live = len(w.state.messages)
            if op == "append":
                w.append_message_dict(arg)
            elif op == "clear":
                w.clear(keep=[i for i in arg if i < live])
            elif op == "trim" and live:
                w.trim(min(arg, live), "retain_suffix")
            elif op == "compact" and live:
                w.compact("summary", min(arg, live))
            elif op == "consolidate":
                w.mark_consolidated(min(arg, live))
    store.write_snapshot(KEY)
    return store


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ops,
    st.integers(0, 3 * BLOCK + 5),
    st.lists(st.integers(-400, 400), max_size=12),
    st.lists(st.tuples(st.integers(-400, 400), st.integers(-400, 400)), max_size=3),
    options,
)
def test_history_from_the_index_equals_the_history_folded_in_memory(
    plan: list[tuple[str, Any]],
    bulk: int,
    touched: list[int],
    slices: list[tuple[int, int]],
    kw: dict[str, Any],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = _write(Path(tmp) / "s", plan, bulk)
        loaded = store.load(KEY)
        indexed = loaded.state
        memory = store.load(KEY, snapshot=False).state
        assert loaded.snapshot_seq == memory.seq and not indexed.messages.in_memory
        n = len(memory.messages)
        # Warm the cache in part, in a random order (single messages, then slices).
        for i in touched:
            if -n <= i < n:
                assert indexed.messages[i] == memory.messages[i]
        for lo, hi in slices:
            assert indexed.messages[lo:hi] == memory.messages[lo:hi]
        assert len(indexed.messages._cache) <= CACHE_BLOCKS
        for event in memory.messages:
            event.message  # noqa: B018  # the reference: each message decoded on its own
        got = projections.history_with_tokens(indexed, **kw)
        want = projections.history_with_tokens(memory, **kw)
        assert got == want
        if kw["max_tokens"] == 0 and not kw["include_summary"] and not kw["extend_to_user"]:
            # The rules in their plain order (rule 6 always applied again), SDK items included
            # (the reference's token slicing reads a role, which an SDK item's entry lacks).
            assert got == eager(
                memory, kw["max_messages"], kw["max_tokens"], kw["include_timestamps"]
            )
        # Every message the history read is the same event, with the same message dict.
        assert list(indexed.messages) == list(memory.messages)
        store.close()


def test_a_window_reads_only_its_own_records(tmp_path: Path) -> None:
    """A window reads the whole blocks it touches (one span digest checks each), not the rest
    of the session; a later, longer window reads only the blocks of the lines it lacks."""
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(1_000):
            w.append_message("user" if i % 2 == 0 else "assistant", f"message {i} " * 8)
    store.write_snapshot(KEY)
    messages = store.load(KEY).state.messages
    source = messages.source
    assert source is not None
    reads: list[tuple[int, int]] = []
    original = source.read

    def counting(offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return original(offset, length)

    source.read = counting  # type: ignore[method-assign]
    line = [len(m.body) for m in messages[990:]]  # reads 990..999
    assert len(reads) == 1 and len(line) == 10
    # Records 960..999 (the block of 990, from its start): forty lines of about 200 bytes.
    assert 40 * 100 < reads[0][1] < 40 * 400
    reads.clear()
    window = messages[900:]
    assert len(reads) == 1  # only the blocks of 900..989: the rest is cached
    assert reads[0][0] + reads[0][1] <= store.path_for(KEY).stat().st_size
    fresh = store.load(KEY, snapshot=False).state.messages
    assert window == fresh[900:]
    assert messages[950] is window[50]  # the cached event is kept, not read again
    store.close()


def test_the_batch_decode_gives_each_message_its_own_decode(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", durability="none")
    with store.session(KEY) as w:
        for i in range(300):
            w.append_message_dict(
                {"role": "tool", "content": f"{i} “q” \\ \n", "tool_call_id": str(i), "n": [i]}
            )
    store.write_snapshot(KEY)
    state = store.load(KEY).state
    projections.history(state, max_messages=200)
    events: list[MessageAppended] = state.messages[100:]
    assert all("message" in e.__dict__ for e in events)  # decoded by the batch
    memory = store.load(KEY, snapshot=False).state.messages
    for event in events:
        assert event.message == msgspec.json.decode(bytes(event.body))
        assert event.message == memory[event.seq - 1].message
    store.close()


def _folded(messages: list[dict[str, Any]]) -> Any:
    from datetime import UTC, datetime

    from sessionledger.eventlog import Header, fold

    ts = datetime(2026, 1, 1, tzinfo=UTC)
    events = [
        MessageAppended.of(seq=i + 1, ts=ts, id=f"m{i}", message=m, tokens=5)
        for i, m in enumerate(messages)
    ]
    return fold(Header(seq=0, ts=ts, id="s", key="p:1", created_at=ts), events)


@pytest.mark.parametrize(
    "declaring",
    [
        # A command declared the call: its entry is skipped, so its result is an orphan.
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}], "_command": True},
        # An Agents SDK call item declared it: its entry (the item) declares nothing.
        {"role": "function_call", AGENTS_ITEM_KEY: {"type": "function_call", "call_id": "c1"}},
    ],
)
def test_rule_6_applies_again_when_an_entry_differs_from_its_message(
    declaring: dict[str, Any],
) -> None:
    """Without a budget the second legal start is skipped only when every message became an
    entry that pairs as it does; these two cases must still drop the orphaned result."""
    state = _folded(
        [
            {"role": "user", "content": "u"},
            declaring,
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "user", "content": "next"},
        ]
    )
    assert projections.history(state) == [{"role": "user", "content": "next"}]

"""The store contract: one test class every backend subclasses (the eventsourcing pattern).

A backend's test file is a few lines::

    class TestFileStore(StoreContract):
        def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
            return FileStore(tmp_path / "sessions", **kwargs)

``make_store`` must return a store over the same sessions each time it is called with the same
``tmp_path`` (that is what "reopen" means). A backend without persistence sets
``persistent = False``: :meth:`StoreContract.reopen` then closes the store's writers and reuses
the same object. Only public store API is used, so any backend (PostgreSQL included) fits.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest
from threaded import run_threads

from sessionledger.eventlog import (
    BaseStore,
    Cleared,
    Compacted,
    ConflictError,
    Consolidated,
    EventLogError,
    InvalidEventError,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    Retracted,
    SessionNotFoundError,
    SessionWriter,
    StoreClosedError,
    Trimmed,
    decode_log,
    verify_chain,
)
from sessionledger.eventlog.codec import normalize_key

KEY = "telegram:42"


def write_conversation(s: SessionWriter) -> None:
    """A realistic session with every kind of event."""
    s.append_message("user", "Plan a trip to Kyoto", media=["/tmp/map.png"])
    s.append_message(
        "assistant",
        None,
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "web_search", "arguments": '{"q": "Kyoto"}'},
            }
        ],
        reasoning_content="Search first.",
    )
    s.append_message("tool", "Blossoms peak in early April.", tool_call_id="call_1", name="web")
    s.append_message("assistant", "Go in early April. \u6771\u4eac \U0001f338 \u2028 \x00")
    s.update_metadata(set={"title": "Kyoto trip", "_last_summary": "old"}, unset=["none"])
    s.append_message("user", "/status", _command=True)
    s.mark_consolidated(2)
    s.compact("The user plans Kyoto.", 3, tokens_before=900, tokens_after=120, model="m")
    s.append_message("assistant", "partial", _channel_delivery={"chat": 42})
    s.retract()
    s.trim(1, "retain_suffix")
    s.set_lifecycle("idle")
    s.append_message("user", "Thanks!")
    s.clear()
    s.append_message("user", "New topic")
    s.set_lifecycle("archived", "archive")


EVERY_KIND = (
    MessageAppended,
    MetadataChanged,
    Consolidated,
    Compacted,
    Trimmed,
    Cleared,
    Retracted,
    LifecycleChanged,
)


class StoreContract(abc.ABC):
    """What every store backend must do; subclass it and implement :meth:`make_store`."""

    #: False for a backend that keeps nothing once its store object is gone (memory).
    persistent: ClassVar[bool] = True

    @abc.abstractmethod
    def make_store(self, tmp_path: Path, **kwargs: Any) -> BaseStore:
        """A store over the sessions kept at ``tmp_path`` (the same ones on every call)."""

    def reopen(self, store: BaseStore, tmp_path: Path, **kwargs: Any) -> BaseStore:
        """Close ``store`` and return a fresh store object over the same sessions.

        Without persistence, close the writers only and return the same object, so the
        state is still re-read from the stored bytes.
        """
        if self.persistent:
            store.close()
            return self.make_store(tmp_path, **kwargs)
        for key in store.keys():
            store.session(key).close()
        return store

    def make_peer(self, store: BaseStore, tmp_path: Path, **kwargs: Any) -> BaseStore:
        """A second store object over the same sessions, as another process would open them."""
        return self.make_store(tmp_path, **kwargs)

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[BaseStore]:
        store = self.make_store(tmp_path)
        yield store
        store.close()

    # -- sessions ---------------------------------------------------------------------------

    def test_new_session_is_empty(self, store: BaseStore) -> None:
        assert store.keys() == []
        assert not store.exists(KEY)
        s = store.session(KEY, metadata={"channel": "telegram"})
        assert s.seq == 0 and s.state.messages == []
        assert s.state.key == KEY and s.state.metadata == {"channel": "telegram"}
        assert store.exists(KEY) and store.keys() == [KEY]
        assert store.session(KEY).state is s.state  # one log, many writers
        loaded = store.load(KEY)
        assert loaded.header.key == KEY and loaded.events == []
        assert loaded.state == s.state

    def test_metadata_only_seeds_a_new_session(self, store: BaseStore, tmp_path: Path) -> None:
        store.session(KEY, metadata={"a": 1}).append_message("user", "x")
        store = self.reopen(store, tmp_path)
        s = store.session(KEY, metadata={"a": 2})
        assert s.state.metadata == {"a": 1}

    def test_every_kind_survives_reopen(self, store: BaseStore, tmp_path: Path) -> None:
        s = store.session(KEY)
        write_conversation(s)
        state = s.state.copy()
        data = store.read_bytes(KEY)
        loaded = store.load(KEY)
        assert {type(e) for e in loaded.events} == set(EVERY_KIND)
        assert loaded.state == state
        assert [m.message["content"] for m in state.messages] == ["New topic"]
        assert (state.lifecycle, state.end_reason) == ("archived", "archive")
        assert state.metadata == {"title": "Kyoto trip"}
        store = self.reopen(store, tmp_path)
        assert store.read_bytes(KEY) == data
        assert store.load(KEY).state == state
        again = store.session(KEY)
        assert again.state == state
        assert again.append_message("user", "after reopen") == state.seq + 1
        check = verify_chain(store.read_bytes(KEY), key=store.hash_key)
        assert check.problems == [] and check.head == again.state.head

    def test_message_dicts_round_trip_exactly(self, store: BaseStore, tmp_path: Path) -> None:
        message = {
            "role": "assistant",
            "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {}}],
            "thinking_blocks": [{"type": "thinking", "thinking": "\u2029", "signature": "s"}],
            "timestamp": "2026-11-25T10:00:00",
            "nested": {"a": [1, 2.5, None, True, "\x7f\x85"], "big": 2**70},
        }
        store.session(KEY).append_message_dict(message)
        store = self.reopen(store, tmp_path)
        assert store.load(KEY).state.message_dicts == [message]

    def test_keys_are_distinct_and_sorted(self, store: BaseStore, tmp_path: Path) -> None:
        keys = ["a:b", "a_b", "A:b", "../x", "\u00e9", "e\u0301", "cli:direct", "z" * 300]
        for i, key in enumerate(keys):
            store.session(key).append_message("user", str(i))
        store = self.reopen(store, tmp_path)
        assert store.keys() == sorted(keys)
        for i, key in enumerate(keys):
            assert store.load(key).state.message_dicts[0]["content"] == str(i)

    def test_absent_session(self, store: BaseStore) -> None:
        assert not store.exists("nope")
        with pytest.raises(SessionNotFoundError):
            store.load("nope")
        with pytest.raises(SessionNotFoundError):
            store.read_bytes("nope")
        with pytest.raises(SessionNotFoundError):
            store.open("nope")
        assert store.delete("nope") is False
        assert store.keys() == []

    def test_load_is_read_only(self, store: BaseStore) -> None:
        s = store.session(KEY)
        s.append_message("user", "x")
        before = store.read_bytes(KEY)
        loaded = store.load(KEY)  # while the writer is open: no lock needed
        assert loaded.valid_length == len(before)
        assert loaded.torn is None and loaded.bad is None
        assert store.read_bytes(KEY) == before
        assert s.append_message("user", "y") == 2

    # -- appends ----------------------------------------------------------------------------

    def test_expected_seq_conflict_writes_nothing(self, store: BaseStore) -> None:
        s = store.session(KEY)
        s.append_message("user", "a", expected_seq=0)
        s.append_message("user", "b", expected_seq=1)
        before = store.read_bytes(KEY)
        with pytest.raises(ConflictError) as info:
            s.append_message("user", "c", expected_seq=1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        with pytest.raises(ConflictError):
            s.update_metadata(set={"a": 1}, expected_seq=3)
        assert store.read_bytes(KEY) == before and s.seq == 2

    def test_retried_id_returns_original_seq(self, store: BaseStore, tmp_path: Path) -> None:
        s = store.session(KEY)
        assert s.append_message("user", "a", id="turn-1") == 1
        s.append_message("user", "b")
        before = store.read_bytes(KEY)
        assert s.append_message("user", "a", id="turn-1") == 1
        assert store.read_bytes(KEY) == before
        store = self.reopen(store, tmp_path)
        s = store.session(KEY)
        assert s.append_message("user", "a", id="turn-1") == 1
        assert s.mark_consolidated(1, id="turn-1") == 1
        assert store.read_bytes(KEY) == before

    @pytest.mark.parametrize("durability", ["always", "batch", "none"])
    def test_durabilities(self, tmp_path: Path, durability: str) -> None:
        store = self.make_store(tmp_path, durability=durability)
        s = store.session(KEY)
        for i in range(20):
            s.append_message("user", str(i))
        s.flush()
        store = self.reopen(store, tmp_path, durability=durability)
        assert len(store.load(KEY).events) == 20
        store.close()

    def test_threads_append_to_one_session(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, durability="batch")
        s = store.session(KEY)

        def work(n: int) -> None:
            for i in range(50):
                s.append_message("user", f"{n}:{i}")

        run_threads(*(partial(work, n) for n in range(4)))
        events = store.load(KEY).events
        assert [e.seq for e in events] == list(range(1, 201))
        assert len({e.message["content"] for e in events if isinstance(e, MessageAppended)}) == 200
        store.close()

    # -- many writers, one log: the rule every backend follows -------------------------------
    #
    # Any number of store objects (in one process or many) write one session. Each append
    # first folds in what the others appended, then runs its checks on that state: the seq
    # follows theirs, ``expected_seq`` is checked against it, a retried id written by another
    # store is a no-op, and trims, clears and lifecycle changes by others are honoured.

    def test_two_stores_write_one_session_in_turn(self, store: BaseStore, tmp_path: Path) -> None:
        other = self.make_peer(store, tmp_path)
        try:
            a, b = store.session(KEY), other.session(KEY)
            assert a.append_message("user", "a1") == 1
            assert b.append_message("user", "b1") == 2
            assert a.append_message("assistant", "a2") == 3
            assert [m.message["content"] for m in a.state.messages] == ["a1", "b1", "a2"]
            with pytest.raises(ConflictError) as info:
                b.append_message("user", "late", expected_seq=2)
            assert (info.value.expected, info.value.actual) == (2, 3)
            assert b.append_message("user", "b2", expected_seq=3) == 4
            assert a.append_message("user", "once", id="turn-9") == 5
            assert b.append_message("user", "once", id="turn-9") == 5  # a retry, not a copy
            b.trim(2, "truncate")
            assert a.append_message("user", "a3") == 7
            assert [m.message["content"] for m in a.state.messages] == ["a2", "b2", "once", "a3"]
            with pytest.raises(InvalidEventError):
                b.retract(5)  # checked against the state with a3 in it: 4 live messages
            b.set_lifecycle("idle")
            a.clear(reason="new")
            assert b.append_message("user", "fresh") == 10
            for s in (store, other):
                state = s.state(KEY)  # reading sees every writer's events, without writing
                assert state.seq == 10 and state.lifecycle == "idle"
                assert [m.message["content"] for m in state.messages] == ["fresh"]
            data = store.read_bytes(KEY)
            assert verify_chain(data, key=normalize_key(None)).problems == []
            assert other.read_bytes(KEY) == data
            assert store.load(KEY).state == other.load(KEY).state == a.state == b.state
        finally:
            other.close()

    def test_two_stores_threads_interleave(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, durability="batch")
        other = self.make_peer(store, tmp_path, durability="batch")

        def work(target: BaseStore, n: int) -> None:
            for i in range(25):
                with target.session(KEY) as w:  # a writer per turn, as a server would
                    w.append_message("user", f"{n}:{i}", id=f"e-{n}-{i}")
                    w.append_message("user", f"{n}:{i}", id=f"e-{n}-{i}")  # retried

        try:
            run_threads(*(partial(work, s, n) for n, s in enumerate([store, other, store, other])))
            data = store.read_bytes(KEY)
            assert verify_chain(data).problems == []
            events = decode_log(data).events
            assert [e.seq for e in events] == list(range(1, 101))
            got = sorted(e.message["content"] for e in events if isinstance(e, MessageAppended))
            assert got == sorted(f"{n}:{i}" for n in range(4) for i in range(25))
        finally:
            store.close()
            other.close()

    def test_hash_key(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path, hash_key="secret")
        store.session(KEY).append_message("user", "x")
        data = store.read_bytes(KEY)
        assert verify_chain(data, key=normalize_key("secret")).problems == []
        assert verify_chain(data).problems
        decoded = decode_log(data, key=normalize_key("secret"))
        assert decoded.bad is None and decoded.torn is None and len(decoded.events) == 1
        store = self.reopen(store, tmp_path, hash_key="secret")
        assert store.session(KEY).append_message("user", "y") == 2
        store.close()

    # -- delete -----------------------------------------------------------------------------

    def test_delete_is_for_good(self, store: BaseStore, tmp_path: Path) -> None:
        s = store.session(KEY)
        s.append_message("user", "secret", id="turn-1")
        old_id = s.state.id
        store.session("other").append_message("user", "kept")
        assert store.delete(KEY) is True
        assert not store.exists(KEY)
        assert store.keys() == ["other"]
        with pytest.raises(SessionNotFoundError):
            store.load(KEY)
        with pytest.raises(StoreClosedError):
            s.append_message("user", "resurrect?")
        assert store.delete(KEY) is False
        store = self.reopen(store, tmp_path)
        assert store.keys() == ["other"]
        fresh = store.session(KEY)
        assert fresh.seq == 0 and fresh.state.messages == [] and fresh.state.id != old_id
        assert fresh.append_message("user", "new", id="turn-1") == 1  # the old id is gone too
        assert store.load(KEY).state.message_dicts[0]["content"] == "new"
        assert store.load("other").state.message_dicts[0]["content"] == "kept"

    # -- bad input --------------------------------------------------------------------------

    def test_bad_keys(self, store: BaseStore) -> None:
        for bad in ("", None, 42):
            with pytest.raises(InvalidEventError):
                store.session(bad)  # type: ignore[arg-type]
        assert store.keys() == []

    def test_bad_header_metadata_creates_nothing(self, store: BaseStore) -> None:
        with pytest.raises(InvalidEventError, match="'blob'"):
            store.session(KEY, metadata={"ok": 1, "blob": object()})
        assert not store.exists(KEY) and store.keys() == []
        assert store.session(KEY, metadata={"ok": 1}).state.metadata == {"ok": 1}

    def test_bad_input_writes_nothing(self, store: BaseStore) -> None:
        s = store.session(KEY)
        s.append_message("user", "x")
        s.append_message("assistant", "y")
        before = store.read_bytes(KEY)
        bad_calls: list[tuple[Callable[[], object], str]] = [
            (lambda: s.append_message("user", object()), "'content'"),
            (lambda: s.append_message("user", "ok", media=[1j]), "'media'"),
            (lambda: s.append_message_dict({"content": "no role"}), "role"),
            (lambda: s.append_message("", "empty role"), "role"),
            (lambda: s.update_metadata(set={"t": object()}), "'t'"),
            (lambda: s.trim(1, "because"), "reason"),  # type: ignore[arg-type]
            (lambda: s.trim(5, "file_cap"), "drop"),
            (lambda: s.set_lifecycle("sleeping"), "lifecycle"),  # type: ignore[arg-type]
            (lambda: s.set_lifecycle("idle", "bored"), "reason"),  # type: ignore[arg-type]
            (lambda: s.mark_consolidated(3), "upto"),
            (lambda: s.compact("s", 3), "upto"),
            (lambda: s.retract(3), "retract"),
        ]
        for call, word in bad_calls:
            with pytest.raises(InvalidEventError, match=word):
                call()
            assert store.read_bytes(KEY) == before, word
        assert s.seq == 2 and len(s.state.messages) == 2

    # -- closing ----------------------------------------------------------------------------

    def test_closed_store_raises(self, tmp_path: Path) -> None:
        with self.make_store(tmp_path) as store:
            s = store.session(KEY)
            s.append_message("user", "x")
        assert s.closed
        with pytest.raises(StoreClosedError):
            s.append_message("user", "y")
        with pytest.raises(StoreClosedError):
            store.session(KEY)
        with pytest.raises(StoreClosedError):
            store.session("new")
        store.close()  # idempotent
        if self.persistent:
            reopened = self.make_store(tmp_path)
            assert len(reopened.load(KEY).events) == 1
            reopened.close()

    def test_errors_share_one_root(self) -> None:
        for error in (InvalidEventError, ConflictError, SessionNotFoundError, StoreClosedError):
            assert issubclass(error, EventLogError)

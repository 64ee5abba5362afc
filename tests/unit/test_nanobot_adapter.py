"""The nanobot drop-in: ``tools.nanobot.Session`` and ``SessionManager`` behave as nanobot's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import projections
from eventlog import (
    Consolidated,
    Event,
    InvalidEventError,
    MetadataChanged,
    Retracted,
    Trimmed,
)
from tools._nanobot_diff import MessageDiff, diff_messages
from tools.nanobot import Session, SessionManager

Msg = dict[str, Any]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def manager(workspace: Path) -> Iterator[SessionManager]:
    with SessionManager(workspace) as m:
        yield m


def events_of(manager: SessionManager, key: str) -> list[Event]:
    return list(manager.store.events(key))


def kinds(events: list[Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def convo(n: int, start: int = 0) -> list[Msg]:
    """``n`` messages alternating user / assistant."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
        for i in range(start, start + n)
    ]


# -- the diff (pure) --------------------------------------------------------------------------


def apply_diff(saved: list[Msg], current: list[Msg], diff: MessageDiff) -> list[Msg]:
    """Carry ``diff`` out on ``saved`` the way the log's events do."""
    kept = [] if diff.clear else saved[diff.trim : len(saved) - diff.retract]
    assert kept == current[: diff.keep]
    return kept + current[diff.keep :]


def test_diff_of_appends_is_a_keep_of_everything_saved() -> None:
    saved = convo(5)
    current = [*saved, *convo(2, 5)]
    assert diff_messages(saved, current) == MessageDiff(keep=5)


def test_diff_finds_a_dropped_prefix_a_withdrawn_tail_and_a_rewrite() -> None:
    saved = convo(6)
    assert diff_messages(saved, saved[2:]) == MessageDiff(trim=2, keep=4)
    assert diff_messages(saved, saved[:4]) == MessageDiff(retract=2, keep=4)
    assert diff_messages(saved, saved[1:4]) == MessageDiff(trim=1, retract=2, keep=3)
    middle = [*saved[:2], {"role": "user", "content": "new"}, *saved[3:]]
    assert diff_messages(saved, middle) == MessageDiff(retract=4, keep=2)
    assert diff_messages(saved, []) == MessageDiff(clear=True)
    assert diff_messages(saved, convo(2, 10)) == MessageDiff(clear=True)


def test_diff_sees_an_in_place_edit_of_a_recent_message() -> None:
    saved = convo(4)
    tail = [dict(m) for m in saved]
    current = list(saved)
    current[-1]["content"] = "edited"
    assert diff_messages(saved, current, tail) == MessageDiff(retract=1, keep=3)


messages_st = st.lists(
    st.builds(
        lambda r, c: {"role": r, "content": c},
        st.sampled_from(["user", "assistant", "tool"]),
        st.sampled_from(["a", "b", "c"]),  # few values: duplicates are common
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(saved=messages_st, data=st.data())
def test_applying_the_diff_always_gives_the_current_list(
    saved: list[Msg], data: st.DataObject
) -> None:
    current = list(saved)
    tail = [dict(m) for m in saved[-8:]]
    for _ in range(data.draw(st.integers(0, 4))):
        op = data.draw(st.sampled_from(["append", "del", "replace", "edit", "clear", "insert"]))
        if op == "append" or not current:
            current.append(data.draw(messages_st.map(lambda ms: ms[0] if ms else {"role": "user"})))
        elif op == "del":
            i = data.draw(st.integers(0, len(current) - 1))
            j = data.draw(st.integers(i, len(current)))
            del current[i:j]
        elif op == "replace":
            i = data.draw(st.integers(0, len(current) - 1))
            current[i] = {"role": "user", "content": data.draw(st.sampled_from(["a", "z"]))}
        elif op == "edit":
            current[-1]["content"] = "edited in place"
        elif op == "insert":
            current.insert(
                data.draw(st.integers(0, len(current))), {"role": "user", "content": "i"}
            )
        else:
            current.clear()
    diff = diff_messages(saved, current, tail)
    # ``saved`` may share dicts edited in place: compare against the values as saved.
    assert apply_diff(tail_restored(saved, tail), current, diff) == current


def tail_restored(saved: list[Msg], tail: list[Msg]) -> list[Msg]:
    return saved[: len(saved) - len(tail)] + tail


# -- Session ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 5, "2", 1.0, True, None])
def test_a_bad_last_consolidated_is_reset_to_zero(bad: Any) -> None:
    assert Session("k", messages=convo(3), last_consolidated=bad).last_consolidated == 0


def test_a_good_last_consolidated_is_kept() -> None:
    assert Session("k", messages=convo(3), last_consolidated=3).last_consolidated == 3


def test_add_message_stamps_a_local_timestamp() -> None:
    session = Session("k")
    session.add_message("user", "hi", media=["/tmp/a.png"])
    message = session.messages[0]
    assert message["role"] == "user" and message["media"] == ["/tmp/a.png"]
    assert "T" in message["timestamp"] and "+" not in message["timestamp"]


def test_get_history_is_the_projection_of_the_session_state() -> None:
    session = Session("k", messages=convo(10), last_consolidated=3)
    session.messages.append({"role": "user", "content": "x", "_command": True})
    expected = [{"role": m["role"], "content": m["content"]} for m in convo(10)[3:]]
    expected = expected[1:]  # aligned to the first user turn after the cursor
    assert session.get_history() == expected
    assert session.get_history() == projections.history(session.log_state())


def test_get_history_is_the_same_before_and_after_save(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(30))
    session.messages.append({"role": "tool", "content": "orphan", "tool_call_id": "x"})
    session.last_consolidated = 4
    before = session.get_history(max_messages=10, max_tokens=40, include_timestamps=True)
    manager.save(session)
    assert session.get_history(max_messages=10, max_tokens=40, include_timestamps=True) == before


def test_clear_resets_messages_cursor_and_last_summary() -> None:
    session = Session("k", messages=convo(4), metadata={"_last_summary": "s", "t": 1})
    session.last_consolidated = 2
    session.clear()
    assert session.messages == [] and session.last_consolidated == 0
    assert session.metadata == {"t": 1}


def with_tools() -> list[Msg]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "user", "content": "u0"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
        {"role": "assistant", "content": "a0"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
    ]


def test_retain_recent_legal_suffix_starts_on_a_user_turn() -> None:
    session = Session("k", messages=with_tools(), last_consolidated=3)
    session.retain_recent_legal_suffix(4)
    # The last 4 start on a tool result; nanobot aligns to the first user turn in them.
    assert session.messages == with_tools()[4:]
    assert session.last_consolidated == 0


def test_retain_recent_legal_suffix_zero_clears() -> None:
    session = Session("k", messages=convo(3))
    session.retain_recent_legal_suffix(0)
    assert session.messages == []


def test_retain_within_the_cap_changes_nothing() -> None:
    session = Session("k", messages=convo(3), last_consolidated=2)
    stamp = session.updated_at
    session.retain_recent_legal_suffix(3)
    assert session.messages == convo(3) and session.updated_at == stamp


def test_enforce_file_cap_archives_only_unconsolidated_drops() -> None:
    session = Session("k", messages=convo(10), last_consolidated=2)
    archived: list[Msg] = []
    session.enforce_file_cap(on_archive=archived.extend, limit=4)
    assert session.messages == convo(10)[6:]
    assert archived == convo(10)[2:6]
    assert session.last_consolidated == 0


def test_enforce_file_cap_archives_every_dropped_message_exactly_once(
    manager: SessionManager,
) -> None:
    """An agent loop: consolidate now and then, cap the file, save; nothing lost or doubled."""
    session = manager.get_or_create("loop")
    consolidated: list[str] = []
    archived: list[str] = []
    everything: list[str] = []
    for i in range(300):
        session.add_message("user" if i % 3 == 0 else "assistant", f"n{i}")
        everything.append(f"n{i}")
        if i % 37 == 0:  # the consolidator takes what is unconsolidated so far
            consolidated += [m["content"] for m in session.messages[session.last_consolidated :]]
            session.last_consolidated = len(session.messages)
        session.enforce_file_cap(
            on_archive=lambda chunk: archived.extend(m["content"] for m in chunk), limit=25
        )
        if i % 5 == 0:
            manager.save(session)
    manager.save(session)
    live = [m["content"] for m in session.messages]
    assert len(live) <= 25
    handled = consolidated + archived
    assert len(handled) == len(set(handled))  # nothing archived twice
    dropped = everything[: len(everything) - len(live)]
    assert set(dropped) <= set(handled)  # nothing dropped without being archived
    manager.invalidate("loop")
    assert [m["content"] for m in manager.get_or_create("loop").messages] == live


# -- save: appends only what changed ---------------------------------------------------------


def saved_bytes(manager: SessionManager, key: str) -> bytes:
    return manager.store.read_bytes(key)


def test_save_appends_new_messages_and_never_rewrites(manager: SessionManager) -> None:
    session = manager.get_or_create("telegram:42")
    before = b""
    for i in range(5):
        session.add_message("user", f"q{i}")
        session.messages.append({"role": "assistant", "content": f"a{i}"})
        manager.save(session)
        now = saved_bytes(manager, "telegram:42")
        assert now.startswith(before) and len(now) > len(before)
        before = now
    assert kinds(events_of(manager, "telegram:42")) == ["MessageAppended"] * 10
    manager.save(session)  # nothing changed: nothing written
    assert saved_bytes(manager, "telegram:42") == before


def test_each_kind_of_change_becomes_its_event(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(8))
    session.metadata.update(title="Kyoto", tags=["a"])
    manager.save(session)
    mark = len(events_of(manager, "k"))

    session.metadata["tags"].append("b")  # nested in-place edit
    del session.metadata["title"]
    session.last_consolidated = 3
    manager.save(session)
    new = events_of(manager, "k")[mark:]
    assert kinds(new) == ["Consolidated", "MetadataChanged"]
    assert isinstance(new[0], Consolidated) and new[0].upto == 3
    assert isinstance(new[1], MetadataChanged)
    assert new[1].set == {"tags": ["a", "b"]} and new[1].unset == ["title"]
    mark += 2

    del session.messages[:2]  # a dropped prefix (the cursor moves with it, as in nanobot)
    session.last_consolidated = 1
    manager.save(session)
    new = events_of(manager, "k")[mark:]
    assert kinds(new) == ["Trimmed"]
    assert isinstance(new[0], Trimmed) and new[0].count == 2 and new[0].reason == "truncate"
    mark += 1

    session.messages[2] = {"role": "user", "content": "rewritten"}  # a rewritten middle
    manager.save(session)
    new = events_of(manager, "k")[mark:]
    assert kinds(new) == ["Retracted"] + ["MessageAppended"] * 4
    assert isinstance(new[0], Retracted) and new[0].count == 4
    mark += 5

    session.messages[-1]["content"] = "edited in place"  # an in-place edit of the newest
    manager.save(session)
    new = events_of(manager, "k")[mark:]
    assert kinds(new) == ["Retracted", "MessageAppended"]
    mark += 2

    session.clear()
    manager.save(session)
    assert kinds(events_of(manager, "k")[mark:]) == ["Cleared"]
    assert manager.store.state("k").message_dicts == []


def test_the_log_matches_the_session_after_any_mutation(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(20))
    manager.save(session)
    session.messages[5:9] = convo(3, 100)
    session.messages.insert(0, {"role": "system", "content": "sys"})
    session.messages.pop()
    session.metadata["x"] = {"deep": [1, 2]}
    manager.save(session)
    state = manager.store.state("k")
    assert state.message_dicts == session.messages
    assert state.metadata == session.metadata


def test_the_trim_reason_follows_the_method_that_trimmed(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(10))
    manager.save(session)
    session.retain_recent_legal_suffix(6)
    manager.save(session)
    session.enforce_file_cap(limit=2)
    manager.save(session)
    trims = [e for e in events_of(manager, "k") if isinstance(e, Trimmed)]
    assert [(t.count, t.reason) for t in trims] == [(4, "retain_suffix"), (4, "file_cap")]


def test_bad_input_raises_and_writes_nothing(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(2))
    manager.save(session)
    before = saved_bytes(manager, "k")
    session.messages.append({"role": "user", "content": object()})
    with pytest.raises(InvalidEventError):
        manager.save(session)
    session.messages[-1] = {"content": "no role"}
    with pytest.raises(InvalidEventError):
        manager.save(session)
    session.messages[-1] = {"role": "user", "content": "ok"}
    session.metadata["bad"] = object()
    with pytest.raises(InvalidEventError):
        manager.save(session)
    assert saved_bytes(manager, "k") == before
    del session.metadata["bad"]
    manager.save(session)
    assert manager.store.state("k").message_dicts == session.messages


def test_save_with_fsync_syncs(manager: SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
    import eventlog._filestore as filestore

    calls: list[int] = []
    real = filestore._fsync
    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(filestore, "_fsync", counting)
    session = manager.get_or_create("k")
    session.add_message("user", "hi")
    manager.save(session)
    assert calls == []
    session.add_message("user", "again")
    manager.save(session, fsync=True)
    assert len(calls) == 1

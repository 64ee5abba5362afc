"""The nanobot drop-in: ``tools.nanobot.Session`` and ``SessionManager`` behave as nanobot's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import projections
from sessionledger.eventlog import (
    Consolidated,
    Event,
    InvalidEventError,
    MetadataChanged,
    Retracted,
    Trimmed,
)
from sessionledger.tools.nanobot import Session, SessionManager, _manager
from sessionledger.tools.nanobot._diff import MessageDiff, diff_messages
from sessionledger.tools.nanobot._keeper import UPDATED_AT_KEY, caller_updated_at
from sessionledger.tools.nanobot._manager import UPDATED_AT_SLACK

Msg = dict[str, Any]


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
    import sessionledger.eventlog._fileio as filestore

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


# -- the manager ------------------------------------------------------------------------------


def test_reload_in_a_fresh_manager_gives_the_same_session(workspace: Path) -> None:
    with SessionManager(workspace) as first:
        session = first.get_or_create("telegram:42")
        session.messages.extend(convo(6))
        session.metadata["title"] = "Kyoto"
        session.last_consolidated = 2
        first.save(session)
    with SessionManager(workspace) as second:
        again = second.get_or_create("telegram:42")
        assert again.messages == convo(6)
        assert again.metadata == {"title": "Kyoto"}
        assert again.last_consolidated == 2
        assert again.created_at.tzinfo is None and again.updated_at >= again.created_at
        again.add_message("user", "more")
        second.save(again)  # a loaded session saves only the new message
        assert kinds(events_of(second, "telegram:42"))[-1] == "MessageAppended"


def test_get_or_create_caches_and_does_not_store_until_saved(manager: SessionManager) -> None:
    session = manager.get_or_create("new")
    assert manager.get_or_create("new") is session
    assert manager.read_session_file("new") is None
    assert manager.list_sessions() == []
    manager.save(session)
    assert manager.read_session_file("new") is not None


def test_keys_that_collide_under_nanobots_naming_stay_separate(manager: SessionManager) -> None:
    # safe_key is nanobot's stem (its web UI names files by it); the logs do not share it.
    assert manager.safe_key("a:b") == manager.safe_key("a_b") == "a_b"
    for key in ("a:b", "a_b"):
        session = manager.get_or_create(key)
        session.add_message("user", f"I am {key}")
        manager.save(session)
    manager.invalidate("a:b")
    manager.invalidate("a_b")
    assert manager.get_or_create("a:b").messages[0]["content"] == "I am a:b"
    assert manager.get_or_create("a_b").messages[0]["content"] == "I am a_b"
    assert sorted(row["key"] for row in manager.list_sessions()) == ["a:b", "a_b"]


def test_list_sessions_rows_newest_first(manager: SessionManager) -> None:
    for key, title in (("cli:one", "First"), ("cli:two", None)):
        session = manager.get_or_create(key)
        session.messages.append({"role": "assistant", "content": "  hello\n  there "})
        session.messages.append({"role": "user", "content": f"question from {key}"})
        if title:
            session.metadata["title"] = title
        manager.save(session)
    rows = manager.list_sessions()
    assert [r["key"] for r in rows] == ["cli:two", "cli:one"]
    assert set(rows[0]) == {"key", "created_at", "updated_at", "title", "preview", "path"}
    assert rows[1]["title"] == "First" and rows[0]["title"] == ""
    assert rows[0]["preview"] == "question from cli:two"
    assert Path(rows[0]["path"]) == manager._get_session_path("cli:two")  # the view
    assert rows[0]["updated_at"] >= rows[1]["updated_at"]


def test_read_session_file_reads_the_disk_without_caching(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(2))
    session.metadata["t"] = 1
    manager.save(session)
    session.add_message("user", "unsaved")
    data = manager.read_session_file("k")
    assert data is not None
    assert data["key"] == "k" and data["metadata"] == {"t": 1}
    assert data["messages"] == convo(2)
    assert isinstance(data["created_at"], str) and isinstance(data["updated_at"], str)


def test_invalidate_drops_unsaved_changes(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend(convo(2))
    manager.save(session)
    session.add_message("user", "unsaved")
    manager.invalidate("k")
    fresh = manager.get_or_create("k")
    assert fresh is not session and fresh.messages == convo(2)
    manager.save(session)  # the old object still saves (it rebinds to the log)
    assert manager.store.state("k").message_dicts[-1]["content"] == "unsaved"


def test_flush_all_saves_every_cached_session_with_fsync(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sessionledger.eventlog._fileio as filestore

    synced: list[int] = []
    real = filestore._fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(filestore, "_fsync", counting)
    for key in ("a", "b"):
        manager.get_or_create(key).add_message("user", key)
    assert manager.flush_all() == 2
    assert len(synced) == 2
    assert manager.store.keys() == ["a", "b"]


def test_delete_session_removes_it_for_good(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.add_message("user", "hi")
    manager.save(session)
    assert manager.delete_session("k") is True
    assert manager.delete_session("k") is False
    assert manager.read_session_file("k") is None
    assert manager.get_or_create("k").messages == []


# -- nanobot's own files in the workspace -----------------------------------------------------


def write_nanobot_file(workspace: Path, name: str, lines: list[str | dict[str, Any]]) -> Path:
    """A session file as nanobot writes it (the test writes the format itself)."""
    sessions = workspace / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    path = sessions / name
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def nanobot_meta(key: str | None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "_type": "metadata",
        "created_at": "2026-11-20T09:00:00",
        "updated_at": "2026-11-20T09:05:00",
        "metadata": {"title": "Old chat"},
        "last_consolidated": 1,
        **extra,
    }
    if key is not None:
        meta["key"] = key
    return meta


def test_nanobot_files_are_imported_once_with_corrupt_lines_quarantined(workspace: Path) -> None:
    write_nanobot_file(
        workspace,
        "telegram_42.jsonl",
        [
            nanobot_meta("telegram:42"),
            {"role": "user", "content": "hello", "timestamp": "2026-11-20T09:00:01"},
            '{"role": "assistant", "content": "torn',
            {"role": "assistant", "content": "hi!", "timestamp": "2026-11-20T09:00:02"},
        ],
    )
    with SessionManager(workspace) as manager:
        session = manager.get_or_create("telegram:42")
        assert [m["content"] for m in session.messages] == ["hello", "hi!"]
        assert session.metadata == {"title": "Old chat"} and session.last_consolidated == 1
        quarantine = manager.store.quarantine_path("telegram:42").read_text()
        assert "torn" in quarantine
        session.add_message("user", "new turn")
        manager.save(session)
    with SessionManager(workspace) as manager:  # not imported a second time
        assert [m["content"] for m in manager.get_or_create("telegram:42").messages] == [
            "hello",
            "hi!",
            "new turn",
        ]
        assert (workspace / "sessions" / "telegram_42.jsonl").exists()  # left untouched


def test_a_deleted_session_never_comes_back_from_its_nanobot_file(workspace: Path) -> None:
    write_nanobot_file(
        workspace, "cli_x.jsonl", [nanobot_meta("cli:x"), {"role": "user", "content": "a"}]
    )
    with SessionManager(workspace) as manager:
        assert manager.delete_session("cli:x") is True
    with SessionManager(workspace) as manager:
        assert manager.read_session_file("cli:x") is None
        assert manager.list_sessions() == []


def test_a_nanobot_file_without_a_key_takes_nanobots_file_name_fallback(workspace: Path) -> None:
    write_nanobot_file(
        workspace, "cli_direct.jsonl", [nanobot_meta(None), {"role": "user", "content": "a"}]
    )
    write_nanobot_file(workspace, "garbage.jsonl", ["not json at all", "{{{"])
    with SessionManager(workspace) as manager:
        assert [r["key"] for r in manager.list_sessions()] == ["cli:direct"]
        ledger = manager.ledger_path.read_text()
        assert "garbage.jsonl" in ledger  # recorded as skipped: not tried again


def test_colliding_nanobot_keys_import_from_the_metadata_line(workspace: Path) -> None:
    write_nanobot_file(
        workspace, "a_b.jsonl", [nanobot_meta("a_b"), {"role": "user", "content": "x"}]
    )
    with SessionManager(workspace) as manager:
        assert manager.get_or_create("a_b").messages[0]["content"] == "x"
        assert manager.get_or_create("a:b").messages == []


def test_read_session_metadata_has_no_messages(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.metadata["title"] = "T"
    session.add_message("user", "hi")
    manager.save(session)
    data = manager.read_session_metadata("k")
    assert data is not None and data["metadata"] == {"title": "T"} and "messages" not in data
    assert manager.read_session_metadata("missing") is None


def test_fork_session_before_user_index(manager: SessionManager) -> None:
    source = manager.get_or_create("src")
    source.messages.extend(convo(6))  # users at 0, 2, 4
    source.metadata.update(title="T", keep=1, _last_summary="s")
    source.last_consolidated = 5
    manager.save(source)
    fork = manager.fork_session_before_user_index("src", "dst", 2)
    assert fork is not None and fork.messages == convo(4)
    assert fork.metadata == {"keep": 1} and fork.last_consolidated == 0
    assert manager.read_session_file("dst") is not None
    full = manager.fork_session_before_user_index("src", "all", 3)
    assert full is not None and full.messages == convo(6) and full.last_consolidated == 5
    assert manager.fork_session_before_user_index("src", "x", 4) is None
    assert manager.fork_session_before_user_index("nope", "x", 0) is None
    assert manager.fork_session_before_user_index("src", "x", -1) is None


@pytest.mark.parametrize("slack", [UPDATED_AT_SLACK, timedelta(0)])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_after_any_edits_and_save_the_log_equals_the_session(
    data: st.DataObject, slack: timedelta
) -> None:
    import tempfile

    # A save whose updated_at lags the log's time by more than the slack (a slow machine; the
    # zero slack forces it) pins the caller's time under a hidden key: not the session's metadata.
    with (
        tempfile.TemporaryDirectory() as tmp,
        SessionManager(tmp) as manager,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(_manager, "UPDATED_AT_SLACK", slack)
        session = manager.get_or_create("k")
        before = b""
        for step in range(data.draw(st.integers(1, 6))):
            for _ in range(data.draw(st.integers(0, 4))):
                op = data.draw(
                    st.sampled_from(
                        ["append", "del", "replace", "edit", "clear", "insert", "cursor", "meta"]
                    )
                )
                msgs = session.messages
                if op == "append" or (not msgs and op in ("del", "replace", "edit")):
                    session.add_message(data.draw(st.sampled_from(["user", "assistant"])), "x")
                elif op == "del":
                    i = data.draw(st.integers(0, len(msgs) - 1))
                    del msgs[i : data.draw(st.integers(i, len(msgs)))]
                elif op == "replace":
                    msgs[data.draw(st.integers(0, len(msgs) - 1))] = {
                        "role": "user",
                        "content": "r",
                    }
                elif op == "edit":
                    msgs[-1]["content"] = f"edited {step}"
                elif op == "clear":
                    session.clear()
                elif op == "insert":
                    msgs.insert(
                        data.draw(st.integers(0, len(msgs))), {"role": "user", "content": "i"}
                    )
                elif op == "cursor":
                    session.last_consolidated = data.draw(st.integers(0, len(msgs)))
                else:
                    session.metadata[data.draw(st.sampled_from(["a", "b"]))] = step
                    if data.draw(st.booleans()):
                        session.metadata.pop("a", None)
            history = session.get_history(max_messages=5)
            manager.save(session)
            now = manager.store.read_bytes("k")
            assert now.startswith(before)
            before = now
            state = manager.store.state("k")
            assert state.message_dicts == session.messages
            metadata = dict(state.metadata)
            metadata.pop(UPDATED_AT_KEY, None)
            assert metadata == session.metadata
            reported = datetime.fromisoformat(caller_updated_at(state.metadata, state))
            assert abs(reported - session.updated_at) <= slack
            assert state.last_consolidated == session.last_consolidated
            assert session.get_history(max_messages=5) == history


def test_a_corrupt_line_in_our_log_is_repaired_into_quarantine(workspace: Path) -> None:
    with SessionManager(workspace) as manager:
        session = manager.get_or_create("k")
        session.messages.extend(convo(4))
        manager.save(session)
        path = manager.store.path_for("k")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b"m2", b"XX")  # the third message no longer matches its hash
    path.write_bytes(b"".join(lines))
    with SessionManager(workspace) as manager:
        assert manager.get_or_create("k").messages == convo(2)
        assert b"XX" in manager.store.quarantine_path("k").read_bytes()

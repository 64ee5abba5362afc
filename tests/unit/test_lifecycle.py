"""Lifecycle, retention, workspace sessions and usage accounting on the file and memory stores."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sessionledger.eventlog import (
    BaseStore,
    FileStore,
    InvalidEventError,
    SessionNotFoundError,
    SessionState,
    workspace_key,
    workspace_prefix,
)

Ended = list[tuple[str, str, int]]


@pytest.fixture
def ended(store: BaseStore) -> Ended:
    calls: Ended = []
    store.on_end(lambda state, reason: calls.append((state.key, reason, len(state.messages))))
    return calls


def _chat(store: BaseStore, key: str, n: int = 2) -> None:
    s = store.session(key)
    s.append_message("system", "be brief")
    for i in range(n):
        s.append_message("user", f"question {i}")
        s.append_message("assistant", f"answer {i}")


def test_archive_is_an_event_and_calls_hooks_once(store: BaseStore, ended: Ended) -> None:
    _chat(store, "a")
    assert store.archive("a") is True
    assert store.archive("a") is False  # already archived: no second ending
    state = store.state("a")
    assert (state.lifecycle, state.end_reason) == ("archived", "archive")
    assert ended == [("a", "archive", 5)]
    assert store.exists("a")  # archived sessions stay listed


def test_reset_keeps_system_prompt_and_marked_metadata(store: BaseStore, ended: Ended) -> None:
    _chat(store, "r")
    store.session("r").update_metadata(set={"title": "T", "scratch": 1, "lang": "en"})
    store.reset("r", keep_metadata=["lang"])
    state = store.state("r")
    assert [m.message["role"] for m in state.messages] == ["system"]
    assert state.metadata == {"lang": "en"}
    assert state.last_consolidated == 0
    assert [c.reason for c in state.ended] == ["reset"]
    assert ended == [("r", "reset", 1)]


def test_new_session_keeps_the_old_conversation_reachable(store: BaseStore, ended: Ended) -> None:
    _chat(store, "n", n=3)
    seq = store.new_session("n")
    state = store.state("n")
    assert state.messages == []
    assert len(state.ended) == 1
    old = state.ended[0]
    assert (old.reason, old.messages, old.end_seq) == ("new", 7, seq)
    # The ended conversation is still in the log: fold the prefix up to just before the clear.
    events = [e for e in store.events("n") if e.seq < old.end_seq]
    assert len([e for e in events if e.__struct_config__.tag == "message"]) == 7
    assert ended == [("n", "new", 7)]
    store.session("n").append_message("user", "fresh start")
    assert [m.message["content"] for m in store.state("n").messages] == ["fresh start"]


def test_mark_idle_only_touches_quiet_active_sessions(store: BaseStore) -> None:
    _chat(store, "quiet")
    _chat(store, "busy")
    store.archive("busy")
    later = datetime.now(UTC) + timedelta(hours=2)
    assert store.mark_idle(timedelta(hours=1), now=later) == ["quiet"]
    assert store.state("quiet").lifecycle == "idle"
    assert store.mark_idle(3600, now=datetime.now(UTC)) == []


def test_cleanup_moves_to_trash_restores_and_purges(store: BaseStore, ended: Ended) -> None:
    _chat(store, "old")
    _chat(store, "kept")
    store.archive("kept")
    before = store.read_bytes("old")
    later = datetime.now(UTC) + timedelta(days=40)
    report = store.cleanup(timedelta(days=30), state="active", now=later)
    assert report.trashed == ["old"]
    assert not store.exists("old")
    assert ("old", "timeout", 5) in ended
    [entry] = store.trash()
    assert entry.key == "old"
    assert store.restore(entry.id) == "old"
    assert store.read_bytes("old") == before
    assert store.trash() == []
    # Trash older than the ttl is purged for good by the next cleanup.
    store.cleanup(timedelta(days=30), state="active", now=later)
    much_later = later + store.trash_ttl + timedelta(seconds=1)
    purged = store.cleanup(timedelta(days=30), state="active", now=much_later)
    assert [e.key for e in purged.purged] == ["old"]
    assert store.trash() == []
    assert store.keys() == ["kept"]


def test_restore_refuses_to_overwrite(store: BaseStore) -> None:
    _chat(store, "x")
    store.cleanup(0, now=datetime.now(UTC) + timedelta(seconds=5))
    store.session("x").append_message("user", "new content")
    [entry] = store.trash()
    with pytest.raises(InvalidEventError, match="exists again"):
        store.restore(entry)


def test_cleanup_skips_sessions_being_written_by_another_process(tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    root = tmp_path / "s"
    with FileStore(root, durability="none") as store:
        _chat(store, "held")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import fcntl, os, sys, time
                from sessionledger.eventlog import FileStore
                store = FileStore({str(root)!r})
                w = store.session("held")
                # A write in progress: a writer holds the log's lock only while it writes.
                fd = os.open(store.path_for("held"), os.O_RDONLY)
                fcntl.flock(fd, fcntl.LOCK_EX)
                print("ready", flush=True)
                time.sleep(30)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        with FileStore(root, durability="none") as store:
            report = store.cleanup(0, now=datetime.now(UTC) + timedelta(seconds=5))
            assert report.skipped_locked == ["held"]
            assert store.exists("held")
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_failing_hook_is_logged_and_others_still_run(
    store: BaseStore, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def broken(state: SessionState, reason: str) -> None:
        raise RuntimeError("hook failed")

    store.on_end(broken)
    store.on_end(lambda state, reason: seen.append(reason))
    _chat(store, "h")
    with caplog.at_level(logging.ERROR, logger="sessionledger.eventlog.lifecycle"):
        assert store.archive("h")
    assert seen == ["archive"]
    assert "hook failed" in caplog.text
    assert store.state("h").lifecycle == "archived"  # the event is not undone


def test_delete_calls_hooks_with_the_final_state(store: BaseStore, ended: Ended) -> None:
    _chat(store, "d")
    assert store.delete("d")
    assert ended == [("d", "delete", 5)]
    assert not store.delete("d")
    assert ended == [("d", "delete", 5)]


def test_workspace_keys_and_latest_session(store: BaseStore, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    prefix = workspace_prefix(project)
    assert prefix == workspace_prefix(str(project) + "/.")  # resolved: stable per directory
    first = workspace_key(project, now=datetime(2026, 1, 1, tzinfo=UTC))
    second = workspace_key(project, now=datetime(2026, 1, 2, tzinfo=UTC))
    assert first.startswith(prefix + ":") and first != second
    store.session(second).append_message("user", "newer key, older activity")
    store.session(first).append_message("user", "resumed")
    assert store.latest_session(prefix) == first
    assert store.latest_session("ws:nothing") is None


def test_usage_accounting(store: BaseStore) -> None:
    s = store.session("u")
    s.record_usage(model="m1", prompt_tokens=100, completion_tokens=20, cached_tokens=50)
    s.record_usage(model="m2", prompt_tokens=10, completion_tokens=5, total_tokens=16)
    state = store.state("u")
    assert (state.usage.calls, state.usage.total_tokens, state.usage.cached_tokens) == (2, 136, 50)
    assert state.usage_by_model["m1"].prompt_tokens == 100
    assert store.load("u").state.usage == state.usage


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.record_usage(prompt_tokens=-1), "prompt_tokens must be an integer >= 0"),
        (lambda s: s.record_usage(completion_tokens="5"), "completion_tokens must be"),
        (lambda s: s.set_lifecycle("sleeping"), "lifecycle state must be one of"),
        (lambda s: s.set_lifecycle("idle", "bored"), "end reason must be one of"),
        (lambda s: s.clear(reason="because"), "end reason must be one of"),
        (lambda s: s.clear(keep=[5]), "keep index 5 is past"),
    ],
)
def test_bad_input_writes_nothing(store: BaseStore, call: object, message: str) -> None:
    s = store.session("b")
    s.append_message("user", "hi")
    before = store.read_bytes("b")
    with pytest.raises(InvalidEventError, match=message):
        call(s)  # type: ignore[operator]
    assert store.read_bytes("b") == before


@pytest.mark.parametrize("age", [-1, timedelta(seconds=-5), "1d", True])
def test_bad_ages_are_refused(store: BaseStore, age: object) -> None:
    with pytest.raises(InvalidEventError, match="older_than"):
        store.cleanup(age)  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="older_than"):
        store.mark_idle(age)  # type: ignore[arg-type]


def test_unknown_session_and_bad_state_filter(store: BaseStore) -> None:
    with pytest.raises(SessionNotFoundError):
        store.archive("missing")
    with pytest.raises(InvalidEventError, match="state must be one of"):
        store.cleanup(10, state="gone")
    with pytest.raises(InvalidEventError, match="must be callable"):
        store.on_end("not a function")  # type: ignore[arg-type]


def test_usage_over_the_store(store: BaseStore) -> None:
    from sessionledger import projections

    store.session("a").record_usage(model="m1", prompt_tokens=10, completion_tokens=2)
    store.session("b").record_usage(model="m1", prompt_tokens=5, completion_tokens=1)
    store.session("b").record_usage(model="m2", prompt_tokens=1, completion_tokens=1)
    store.session("quiet").append_message("user", "no LLM call yet")
    usage = projections.store_usage(store)
    assert (usage.total.calls, usage.total.total_tokens) == (3, 20)
    assert usage.by_model["m1"].prompt_tokens == 15
    assert sorted(usage.by_session) == ["a", "b"]

"""The nanobot drop-in where nanobot's own readers look: views, listing, times, legacy files."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nanobot.config.schema  # noqa: F401  # first: nanobot 0.2.2 needs this import order
import nanobot.session.manager as nb
import pytest

from sessionledger.eventlog import FileStore
from sessionledger.tools.nanobot import SessionManager


def save_turns(manager: SessionManager, key: str, turns: int, **metadata: Any) -> None:
    session = manager.get_or_create(key)
    for i in range(turns):
        session.add_message("user", f"q{i}")
        session.add_message("assistant", f"a{i}")
        session.metadata.update(metadata)
        manager.save(session)


def test_nanobots_own_manager_reads_our_views(manager: SessionManager, workspace: Path) -> None:
    save_turns(manager, "websocket:abc", 3, title="<think>hmm</think>Trip")
    theirs = nb.SessionManager(workspace)
    assert manager.safe_key("websocket:abc") == theirs.safe_key("websocket:abc") == "websocket_abc"
    loaded = theirs.get_or_create("websocket:abc")
    assert loaded.messages == manager.get_or_create("websocket:abc").messages
    assert [r["key"] for r in theirs.list_sessions()] == ["websocket:abc"]
    assert theirs.list_sessions()[0]["title"] == "Trip"
    assert manager.list_sessions()[0]["title"] == "Trip"
    assert {k: v for k, v in manager.list_sessions()[0].items()} == theirs.list_sessions()[0]


def test_appends_extend_the_view_in_place_and_other_changes_rewrite_it(
    manager: SessionManager,
) -> None:
    save_turns(manager, "k", 1)
    path = manager._get_session_path("k")
    inode = path.stat().st_ino
    save_turns(manager, "k", 2)
    assert path.stat().st_ino == inode  # appended, not replaced
    session = manager.get_or_create("k")
    session.retain_recent_legal_suffix(2)
    manager.save(session)
    assert path.stat().st_ino != inode  # a trim rewrites the view
    lines = path.read_text().splitlines()
    assert [json.loads(line)["content"] for line in lines[1:]] == ["q1", "a1"]


def test_a_stale_view_is_rebuilt_when_a_manager_starts(workspace: Path) -> None:
    with SessionManager(workspace) as manager:
        save_turns(manager, "k", 2)
        path = manager._get_session_path("k")
    # As if killed after the log's append and before the view's: the view shows an older seq.
    head = json.loads(path.read_text().splitlines()[0])
    head["_sessionledger"]["seq"] -= 2
    path.write_text(json.dumps(head) + "\n")
    with SessionManager(workspace) as manager:
        manager.list_sessions()
        assert len(path.read_text().splitlines()) == 5


def test_a_shared_stem_keeps_its_first_owner(manager: SessionManager) -> None:
    save_turns(manager, "a:b", 1)
    save_turns(manager, "a_b", 1)
    head = json.loads(manager._get_session_path("a_b").read_text().splitlines()[0])
    assert head["key"] == "a:b"
    assert sorted(r["key"] for r in manager.list_sessions()) == ["a:b", "a_b"]


def test_a_backdated_updated_at_is_saved_listed_and_reloaded(
    manager: SessionManager, workspace: Path
) -> None:
    save_turns(manager, "k", 1)
    session = manager.get_or_create("k")
    old = datetime.now() - timedelta(minutes=20)
    session.updated_at = old
    manager.save(session)
    assert manager.list_sessions()[0]["updated_at"] == old.isoformat()
    assert manager.read_session_metadata("k")["updated_at"] == old.isoformat()  # type: ignore[index]
    manager.invalidate("k")
    with SessionManager(workspace, views=False) as other:
        assert other.get_or_create("k").updated_at == old
        assert other.read_session_file("k")["updated_at"] == old.isoformat()  # type: ignore[index]
        assert "_nanobot_updated_at" not in other.get_or_create("k").metadata
    session = manager.get_or_create("k")
    assert session.updated_at == old
    session.add_message("user", "back again")
    manager.save(session)
    assert manager.list_sessions()[0]["updated_at"] != old.isoformat()


def test_the_preview_scan_stops_after_200_records(manager: SessionManager) -> None:
    session = manager.get_or_create("k")
    session.messages.extend({"role": "tool", "content": "x"} for _ in range(200))
    session.messages.append({"role": "user", "content": "late question"})
    manager.save(session)
    assert manager.list_sessions()[0]["preview"] == ""
    session.messages[:] = session.messages[1:]
    manager.save(session)
    assert manager.list_sessions()[0]["preview"] == "late question"


def test_a_user_edited_title_keeps_its_think_text(manager: SessionManager) -> None:
    save_turns(manager, "k", 1, title="<think>x</think>Mine", title_user_edited=True)
    assert manager.list_sessions()[0]["title"] == "<think>x</think>Mine"


def test_read_session_metadata_reads_no_history(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_turns(manager, "k", 50, title="T")

    def no_history(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("read the history")

    monkeypatch.setattr(FileStore, "load", no_history)
    meta = manager.read_session_metadata("k")
    assert meta is not None and meta["metadata"] == {"title": "T"} and meta["key"] == "k"


def write_nanobot_file(directory: Path, key: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{nb.SessionManager.safe_key(key)}.jsonl"
    head = {"_type": "metadata", "key": key, "created_at": "2026-01-01T00:00:00", "metadata": {}}
    body = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "reply"}]
    path.write_text("\n".join(json.dumps(x) for x in [head, *body]) + "\n")
    return path


def test_a_legacy_session_is_migrated_on_first_access(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = tmp_path / "legacy"
    monkeypatch.setattr(nb, "get_legacy_sessions_dir", lambda: legacy)
    source = write_nanobot_file(legacy, "telegram:1")
    with SessionManager(workspace) as manager:
        session = manager.get_or_create("telegram:1")
        assert [m["content"] for m in session.messages] == ["old", "reply"]
        assert not source.exists()
        assert manager.store.exists("telegram:1")


def test_delete_removes_the_legacy_file_and_it_never_comes_back(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = tmp_path / "legacy"
    monkeypatch.setattr(nb, "get_legacy_sessions_dir", lambda: legacy)
    source = write_nanobot_file(legacy, "telegram:2")
    with SessionManager(workspace) as manager:
        assert manager.delete_session("telegram:2") is True
        assert not source.exists()
        assert manager.get_or_create("telegram:2").messages == []
    write_nanobot_file(legacy, "telegram:2")  # planted again: still deleted here
    with SessionManager(workspace) as manager:
        assert manager.get_or_create("telegram:2").messages == []


def test_views_off_keeps_only_the_logs(workspace: Path) -> None:
    with SessionManager(workspace, views=False) as manager:
        save_turns(manager, "k", 1, title="<think>a</think>T")
        assert not manager._get_session_path("k").exists()
        assert manager.list_sessions()[0]["title"] == "T"


def test_a_view_emptied_by_a_crash_is_rebuilt(workspace: Path) -> None:
    with SessionManager(workspace) as manager:
        save_turns(manager, "k", 2)
        path = manager._get_session_path("k")
    path.write_bytes(b"")
    with SessionManager(workspace) as manager:
        assert [r["preview"] for r in manager.list_sessions()] == ["q0"]
        assert len(path.read_text().splitlines()) == 5


def test_a_foreign_file_at_a_view_path_is_left_alone(workspace: Path) -> None:
    with SessionManager(workspace) as manager:
        manager.list_sessions()  # the import has run: this file comes later
        path = manager._get_session_path("k")
        path.write_text("not json\n")
        save_turns(manager, "k", 1)
        assert path.read_text() == "not json\n"
        assert [r["key"] for r in manager.list_sessions()] == ["k"]  # from the catalog
    with SessionManager(workspace) as manager:  # imported? no: skipped, so still not ours
        manager.list_sessions()
        assert path.read_text() == "not json\n"


def test_an_empty_nanobot_file_loads_as_an_empty_session(workspace: Path) -> None:
    (workspace / "sessions").mkdir(parents=True)
    (workspace / "sessions" / "test_empty.jsonl").write_text("")
    with SessionManager(workspace) as manager:
        session = manager._load("test:empty")
        assert session is not None and session.messages == []

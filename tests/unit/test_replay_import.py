"""Import (nanobot's two formats, a plain JSON message list, our own logs) and export, round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from replay_sample import KEY, build_sample

from sessionledger import replay
from sessionledger.eventlog import FileStore, MemoryStore, SessionState


def nanobot_file(
    path: Path,
    key: str | None,
    messages: list[dict[str, Any]],
    *,
    last_consolidated: Any = 0,
    metadata: dict[str, Any] | None = None,
    extra_lines: list[tuple[int, bytes]] = (),  # type: ignore[assignment]
    early: bool = False,
) -> Path:
    """Write a session the way nanobot's ``save`` does (json.dumps, ensure_ascii=False)."""
    meta: dict[str, Any] = {
        "_type": "metadata",
        "created_at": "2026-03-01T10:00:00.123456",
        "updated_at": "2026-03-01T10:05:00",
        "metadata": metadata or {},
        "last_consolidated": last_consolidated,
    }
    if key is not None:
        meta = {"_type": "metadata", "key": key, **{k: v for k, v in meta.items() if k != "_type"}}
    lines = [json.dumps(meta, ensure_ascii=False).encode()]
    lines += [json.dumps(m, ensure_ascii=False).encode() for m in messages]
    for index, raw in extra_lines:
        lines.insert(index, raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def chat(n: int, *, later: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        msg: dict[str, Any] = {
            "role": role,
            "content": f"message {i} \u00e9\u2028",
            "timestamp": f"2026-03-01T10:{i // 60:02d}:{i % 60:02d}.5",
        }
        if later and role == "user":
            msg["media"] = ["/tmp/a.png"]
        if later and role == "assistant":
            msg["reasoning_content"] = "thinking"
        out.append(msg)
    return out


def state_view(state: SessionState) -> dict[str, Any]:
    return {
        "key": state.key,
        "messages": state.message_dicts,
        "metadata": state.metadata,
        "last_consolidated": state.last_consolidated,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
    }


def test_both_nanobot_formats_import_with_keys_from_the_metadata_line(tmp_path: Path) -> None:
    src = tmp_path / "sessions"
    nanobot_file(src / "telegram_42.jsonl", "telegram:42", chat(6), last_consolidated=2, early=True)
    nanobot_file(
        src / "cli_direct.jsonl", "cli:direct", chat(5, later=True), metadata={"title": "T"}
    )
    store = FileStore(tmp_path / "store", durability="none")
    report = replay.import_nanobot(store, src)
    assert report.ok and [s.outcome for s in report.sessions] == ["created", "created"]
    assert store.keys() == ["cli:direct", "telegram:42"]
    state = store.load("telegram:42").state
    assert state.message_dicts == chat(6) and state.last_consolidated == 2
    assert store.load("cli:direct").state.metadata == {"title": "T"}
    assert replay.verify(store).ok
    # Importing again is a no-op, byte for byte.
    names = store.keys()
    before = {k: store.read_bytes(k) for k in names}
    again = replay.import_nanobot(store, src)
    assert [s.outcome for s in again.sessions] == ["unchanged", "unchanged"]
    assert {k: store.read_bytes(k) for k in names} == before


def test_keys_that_collide_under_nanobot_naming_stay_apart(tmp_path: Path) -> None:
    # nanobot names both "a:b" and "a_b" a_b.jsonl: two workspaces each hold one of them.
    one = nanobot_file(tmp_path / "w1" / "a_b.jsonl", "a:b", chat(2))
    two = nanobot_file(tmp_path / "w2" / "a_b.jsonl", "a_b", chat(3))
    store = FileStore(tmp_path / "store", durability="none")
    replay.import_nanobot(store, one)
    replay.import_nanobot(store, two.parent)
    assert store.keys() == ["a:b", "a_b"]
    assert len(store.load("a:b").state.messages) == 2
    assert len(store.load("a_b").state.messages) == 3
    assert store.path_for("a:b") != store.path_for("a_b")


def test_corrupt_lines_are_salvaged_into_quarantine_and_counted(tmp_path: Path) -> None:
    path = nanobot_file(
        tmp_path / "s" / "x.jsonl",
        "x:1",
        chat(4),
        extra_lines=[
            (2, b'{"role": "user", "content": "cut sho'),
            (4, b"\xff\xfe"),
            (5, b"[1, 2]"),
        ],
    )
    with path.open("ab") as f:
        f.write(b'{"content": "no role"}\n')
    store = FileStore(tmp_path / "store", durability="none")
    report = replay.import_nanobot(store, path)
    (one,) = report.sessions
    assert one.outcome == "created" and one.messages == 4 and one.bad_lines == 4
    assert not report.ok and report.bad_lines == 4
    assert store.load("x:1").state.message_dicts == chat(4)
    records = [json.loads(line) for line in store.quarantine_path("x:1").read_text().splitlines()]
    assert [r["line"] for r in records] == [3, 5, 6, 9]
    assert records[0]["text"] == '{"role": "user", "content": "cut sho'
    assert "base64" in records[1] and "no role" in records[3]["reason"]
    # A second import changes nothing and quarantines nothing more.
    replay.import_nanobot(store, path)
    assert len(store.quarantine_path("x:1").read_text().splitlines()) == 4


def test_an_out_of_range_cursor_is_reset_and_noted(tmp_path: Path) -> None:
    path = nanobot_file(tmp_path / "c.jsonl", "c", chat(2), last_consolidated=9)
    store = MemoryStore()
    (one,) = replay.import_nanobot(store, path).sessions
    assert store.load("c").state.last_consolidated == 0
    assert any("last_consolidated 9" in n for n in one.notes)


def test_a_clash_is_reported_and_nothing_is_overwritten(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store", durability="none")
    with store.session("telegram:42") as s:
        s.append_message("user", "already here")
    before = store.read_bytes("telegram:42")
    path = nanobot_file(tmp_path / "t.jsonl", "telegram:42", chat(2))
    report = replay.import_nanobot(store, path)
    assert [s.outcome for s in report.clashes] == ["clash"] and not report.ok
    assert store.read_bytes("telegram:42") == before


def test_a_grown_source_extends_the_import(tmp_path: Path) -> None:
    store = MemoryStore()
    path = nanobot_file(tmp_path / "g.jsonl", "g", chat(3), last_consolidated=1)
    replay.import_nanobot(store, path)
    nanobot_file(path, "g", chat(6), last_consolidated=1)
    (one,) = replay.import_nanobot(store, path).sessions
    assert one.outcome == "extended"
    assert store.load("g").state.message_dicts == chat(6)


def test_foreign_files_that_cannot_be_parsed_are_refused_by_name(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store", durability="none")
    good = nanobot_file(tmp_path / "d" / "good.jsonl", "good", chat(2))
    bad = tmp_path / "d" / "bad.jsonl"
    bad.write_bytes(b"\x00\x01 not json at all\n")
    with pytest.raises(replay.ForeignFormatError, match=r"bad\.jsonl"):
        replay.import_nanobot(store, good.parent)
    assert store.keys() == []  # nothing imported, not even the good file
    nokey = nanobot_file(tmp_path / "nokey.jsonl", None, chat(2))
    with pytest.raises(replay.ForeignFormatError, match="names no key"):
        replay.import_nanobot(store, nokey)
    assert replay.import_nanobot(store, nokey, key="given").sessions[0].outcome == "created"
    with pytest.raises(replay.ForeignFormatError, match="no such file"):
        replay.import_path(store, tmp_path / "missing")


def session_json(path: Path, session_id: str, messages: list[Any]) -> Path:
    doc = {
        "version": 1,
        "session_id": session_id,
        "created_at": "2026-02-01T09:00:00+00:00",
        "updated_at": "2026-02-01T09:30:00+00:00",
        "model": "gpt-x",
        "workspace_root": "/work/project",
        "messages": messages,
        "token_usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_seed_001_session_json_imports(tmp_path: Path) -> None:
    msgs: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "ls"},
        {"content": "no role"},
    ]
    path = session_json(
        tmp_path / "j" / "abc123_20260201_090000.json", "abc123_20260201_090000", msgs
    )
    store = FileStore(tmp_path / "store", durability="none")
    report = replay.import_path(store, path.parent)
    (one,) = report.sessions
    assert one.outcome == "created" and one.messages == 3 and one.bad_lines == 1
    state = store.load("abc123_20260201_090000").state
    assert state.message_dicts == msgs[:3]
    assert (
        state.metadata["model"] == "gpt-x" and state.metadata["token_usage"]["total_tokens"] == 15
    )
    assert state.updated_at.isoformat() == "2026-02-01T09:30:00+00:00"
    assert replay.import_session_json(store, path).sessions[0].outcome == "unchanged"
    broken = tmp_path / "broken.json"
    broken.write_text('{"session_id": "x"}')
    with pytest.raises(replay.ForeignFormatError, match=r"broken\.json"):
        replay.import_session_json(store, broken)


def test_our_jsonl_round_trips_byte_for_byte(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "a", durability="none")
    build_sample(store)
    build_sample(store, "a:b")
    build_sample(store, "a_b")
    report = replay.export_store(store, tmp_path / "out")
    assert report.ok and len(report.files) == 3
    assert replay.export_jsonl(store, KEY) == store.read_bytes(KEY)
    other = FileStore(tmp_path / "b", durability="none")
    imported = replay.import_path(other, tmp_path / "out")
    assert [s.outcome for s in imported.sessions] == ["created"] * 3
    keys = store.keys()
    for key in keys:
        assert other.read_bytes(key) == store.read_bytes(key)
        assert other.load(key).state.head == store.load(key).state.head
    assert all(
        s.outcome == "unchanged" for s in replay.import_log(other, tmp_path / "out").sessions
    )
    # Exporting again finds the same files there; a different file is never overwritten.
    assert {f.outcome for f in replay.export_store(store, tmp_path / "out").files} == {"unchanged"}
    with store.session(KEY) as s:
        s.append_message("user", "more")
    again = replay.export_store(store, tmp_path / "out", keys=[KEY])
    assert [f.outcome for f in again.files] == ["clash"]


def test_nanobot_export_round_trips_states_and_hashes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    nanobot_file(src / "telegram_42.jsonl", "telegram:42", chat(7, later=True), last_consolidated=3)
    nanobot_file(src / "a_b.jsonl", "a_b", chat(2))
    nanobot_file(src / "a_b_2.jsonl", "a:b", chat(3))
    first = MemoryStore()
    replay.import_nanobot(first, src)
    report = replay.export_store(first, tmp_path / "nb", format="nanobot")
    assert report.ok
    names = sorted(Path(f.path).name for f in report.files)
    assert "telegram_42.jsonl" in names and "a_b.jsonl" in names and len(set(names)) == 3
    renamed = [f for f in report.files if f.note]
    assert len(renamed) == 1 and "used a distinct name" in renamed[0].note
    second = MemoryStore()
    replay.import_nanobot(second, tmp_path / "nb")
    assert second.keys() == first.keys()
    keys = first.keys()
    for key in keys:
        assert state_view(second.load(key).state) == state_view(first.load(key).state)
        assert second.read_bytes(key) == first.read_bytes(key)  # same events, same hashes
    # A nanobot file we wrote reads back the way nanobot reads it.
    lines = (tmp_path / "nb" / "telegram_42.jsonl").read_text().split("\n")[:-1]
    meta = json.loads(lines[0])
    assert meta["_type"] == "metadata" and meta["key"] == "telegram:42"
    assert meta["last_consolidated"] == 3 and meta["created_at"] == "2026-03-01T10:00:00.123456"
    assert [json.loads(line) for line in lines[1:]] == chat(7, later=True)


def test_exporting_a_live_session_to_nanobot_keeps_what_nanobot_can_hold() -> None:
    store = MemoryStore()
    build_sample(store)
    data = replay.export_nanobot(store, KEY)
    state = store.load(KEY).state
    lines = data.decode().split("\n")[:-1]
    assert json.loads(lines[0])["metadata"] == state.metadata
    assert [json.loads(line) for line in lines[1:]] == state.message_dicts
    back = replay.parse_nanobot(data, "export")
    assert back.key == KEY and back.last_consolidated == state.last_consolidated
    assert [m for m, _ in back.messages] == state.message_dicts

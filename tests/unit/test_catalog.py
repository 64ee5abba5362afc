"""The session catalog: rows equal a fold of every log, incremental refresh, filters."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import BaseStore, FileStore, MemoryStore, SessionWriter
from sessionledger.eventlog import _changes as changes
from sessionledger.eventlog.backend import LogStat, catalog_source
from sessionledger.projections import (
    CatalogFilter,
    SessionID,
    SessionInfo,
    catalog_heads,
    list_sessions,
    rebuild_catalog,
    select,
    session_preview,
)

STORES = ("file", "memory")


def make(kind: str, tmp_path: Path) -> BaseStore:
    return FileStore(tmp_path / "s", durability="none") if kind == "file" else MemoryStore()


def expected(store: BaseStore) -> list[SessionInfo]:
    """The rows a fold of every log gives (the catalog's contract)."""
    rows = []
    for key in sorted(store.keys()):
        st = store.load(key, snapshot=False).state
        md = st.metadata
        comp = st.compaction.summary if st.compaction is not None else None
        meta_summary: str = md["summary"] if isinstance(md.get("summary"), str) else ""
        tags = md.get("tags")
        rows.append(
            SessionInfo(
                key=st.key,
                title=md["title"] if isinstance(md.get("title"), str) else "",
                preview=session_preview(m.message for m in st.messages),
                created_at=st.created_at,
                updated_at=st.updated_at,
                messages=len(st.messages),
                tokens=st.live_tokens,
                state=st.lifecycle,
                tags=tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else (),
                summary=comp if comp is not None else meta_summary,
                seq=st.seq,
                head=st.head,
            )
        )
    rows.sort(key=lambda r: r.key)
    rows.sort(key=lambda r: r.updated_at, reverse=True)
    return rows


def random_ops(writer: SessionWriter, rng: random.Random, n: int) -> None:
    for _ in range(n):
        live = len(writer.state.messages)
        op = rng.random()
        if op < 0.55:
            role = rng.choice(["user", "assistant", "tool", "system"])
            content = rng.choice(["", "  ", "hello   world", "x" * 200, "[image: /a.png]", None])
            writer.append_message(role, content)
        elif op < 0.62:
            choices: list[dict[str, object]] = [
                {"title": "T"},
                {"tags": ["a", 1, "b"]},
                {"summary": "S"},
                {"title": 5, "summary": ["not text"]},  # read as no title, no summary
                {"tags": "not a list", "title": "U"},
            ]
            writer.update_metadata(
                set=rng.choice(choices),
                unset=rng.choice([[], ["title"], ["summary", "tags"], ["title", "tags"]]),
            )
        elif op < 0.67 and live:
            writer.compact(f"sum {rng.random()}", rng.randint(0, live))
        elif op < 0.72:
            writer.set_lifecycle(rng.choice(["active", "idle", "archived"]))
        elif op < 0.76 and live:
            writer.trim(rng.randint(1, live), "file_cap")
        elif op < 0.79 and live:
            writer.retract(1)
        elif op < 0.81:
            writer.clear()
        elif op < 0.83 and live:
            writer.mark_consolidated(rng.randint(0, live))


@pytest.mark.parametrize("kind", STORES)
def test_rows_match_a_fold_of_every_log_through_incremental_refreshes(
    kind: str, tmp_path: Path
) -> None:
    store = make(kind, tmp_path)
    rng = random.Random(7)
    keys = [f"bot:chan{i % 3}:{i}" for i in range(8)]
    for round_ in range(6):
        for key in rng.sample(keys, 4):
            with store.session(key, metadata={"title": key} if round_ == 0 else None) as w:
                random_ops(w, rng, rng.randint(1, 25))
        assert list_sessions(store) == expected(store)


@pytest.mark.parametrize("kind", STORES)
def test_deleting_the_catalog_gives_the_same_rows(kind: str, tmp_path: Path) -> None:
    store = make(kind, tmp_path)
    rng = random.Random(3)
    for i in range(5):
        with store.session(f"a:b:{i}") as w:
            random_ops(w, rng, 30)
    first = list_sessions(store)
    if isinstance(store, FileStore):
        os.unlink(store.root / ".catalog")
    else:
        catalog_source(store).put_catalog(b"")
    assert list_sessions(store) == first
    assert rebuild_catalog(store) == 5
    assert list_sessions(store) == first == expected(store)


def test_a_damaged_catalog_is_rebuilt(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("a:b:c") as w:
        w.append_message("user", "hi")
    first = list_sessions(store)
    (tmp_path / ".catalog").write_bytes(b"\x00garbage")
    assert list_sessions(store) == first


def test_catalog_file_is_private_hidden_and_never_a_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("x") as w:
        w.append_message("user", "hi")
    list_sessions(store)
    path = tmp_path / ".catalog"
    assert path.stat().st_mode & 0o777 == 0o600
    assert store.keys() == ["x"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_only_the_appended_tail_is_read(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    for i in range(3):
        with store.session(f"k{i}") as w:
            for j in range(20):
                w.append_message("user", f"m{j}")
    list_sessions(store)
    reads: list[tuple[str, int]] = []
    source = catalog_source(store)
    original = source.read_log

    def spy(name: str, offset: int = 0) -> tuple[int, bytes] | None:
        reads.append((name, offset))
        return original(name, offset)

    source.read_log = spy  # type: ignore[method-assign]
    assert list_sessions(store) == expected(store)
    assert reads == []  # nothing changed: no log is read
    size = store.path_for("k1").stat().st_size
    with store.session("k1") as w:
        w.append_message("user", "new")
    rows = list_sessions(store)
    assert reads == [(store.path_for("k1").name, size)]
    assert rows[0].key == "k1" and rows[0].messages == 21 and rows == expected(store)


def test_a_replaced_log_is_read_whole(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        for j in range(5):
            w.append_message("user", f"m{j}")
    list_sessions(store)
    store.delete("k")
    with store.session("k") as w:
        for j in range(7):
            w.append_message("assistant", f"other {j}")
    assert list_sessions(store) == expected(store)
    assert list_sessions(store)[0].preview == "other 0"


def test_a_log_cut_back_is_read_whole(tmp_path: Path) -> None:
    store = MemoryStore()
    with store.session("k") as w:
        for j in range(5):
            w.append_message("user", f"m{j}")
    list_sessions(store)
    data = store.read_bytes("k")
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    store.put_bytes("k", data[:cut])
    assert list_sessions(store) == expected(store)
    assert list_sessions(store)[0].messages == 4


def test_a_second_process_appending_is_seen(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("shared:chan:1") as w:
        w.append_message("user", "first")
    assert list_sessions(store)[0].messages == 1
    code = (
        "import sys\n"
        "from eventlog import FileStore\n"
        "s = FileStore(sys.argv[1], durability='none')\n"
        "with s.session('shared:chan:1') as w:\n"
        "    w.append_message('assistant', 'from another process')\n"
        "    w.update_metadata(set={'title': 'set elsewhere'})\n"
        "with s.session('shared:chan:2') as w:\n"
        "    w.append_message('user', 'new session')\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=root)
    rows = {r.key: r for r in list_sessions(store)}
    assert rows["shared:chan:1"].messages == 2
    assert rows["shared:chan:1"].title == "set elsewhere"
    assert rows["shared:chan:2"].preview == "new session"
    assert list_sessions(store) == expected(store)


def test_files_that_are_not_logs_are_skipped(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("good") as w:
        w.append_message("user", "hi")
    (tmp_path / "junk.jsonl").write_bytes(b"not a log\n")
    copy = tmp_path / "other.jsonl"
    copy.write_bytes(store.read_bytes("good"))  # a log under a name that is not its key's
    assert [r.key for r in list_sessions(store)] == ["good"]
    assert [r.key for r in list_sessions(store)] == ["good"]


def test_torn_and_corrupt_logs_list_their_readable_prefix(tmp_path: Path) -> None:
    store = MemoryStore()
    with store.session("t") as w:
        w.append_message("user", "one")
        w.append_message("user", "two")
    data = store.read_bytes("t")
    store.put_bytes("t", data + b'{"type":"message","seq":3')
    assert list_sessions(store)[0].messages == 2
    lines = data.split(b"\n")
    lines[1] = b"{not json"  # a bad line in the middle: only the header is readable
    store.put_bytes("t", b"\n".join(lines))
    row = list_sessions(store)[0]
    assert row.messages == 0 and row.seq == 0


@pytest.fixture
def listed() -> MemoryStore:
    store = MemoryStore()
    specs = [
        ("bot:telegram:1", "active"),
        ("bot:telegram:2", "archived"),
        ("bot:slack:1:thread", "idle"),
        ("other:telegram:1", "active"),
        ("telegram:99", "active"),
        ("plain", "active"),
    ]
    for key, state in specs:
        with store.session(key) as w:
            w.append_message("user", key)
            if state != "active":
                w.set_lifecycle(state)  # type: ignore[arg-type]
    return store


def keys(rows: list[SessionInfo]) -> list[str]:
    return [r.key for r in rows]


def test_newest_updated_first(listed: MemoryStore) -> None:
    assert keys(list_sessions(listed)) == [
        "plain",
        "telegram:99",
        "other:telegram:1",
        "bot:slack:1:thread",
        "bot:telegram:2",
        "bot:telegram:1",
    ]


def test_filters(listed: MemoryStore) -> None:
    assert keys(list_sessions(listed, prefix="bot:tele")) == ["bot:telegram:2", "bot:telegram:1"]
    assert keys(list_sessions(listed, agent="bot", channel="telegram", peer="1")) == [
        "bot:telegram:1"
    ]
    assert keys(list_sessions(listed, channel="telegram")) == [
        "telegram:99",
        "other:telegram:1",
        "bot:telegram:2",
        "bot:telegram:1",
    ]
    assert keys(list_sessions(listed, state="archived")) == ["bot:telegram:2"]
    assert keys(list_sessions(listed, state="idle")) == ["bot:slack:1:thread"]
    rows = list_sessions(listed)
    middle = rows[2].created_at
    assert keys(list_sessions(listed, created_after=middle)) == keys(rows[:2])
    assert keys(list_sessions(listed, created_before=middle)) == keys(rows[3:])
    later = middle + timedelta(days=1)
    assert list_sessions(listed, created_after=later) == []


def test_order_limit_offset(listed: MemoryStore) -> None:
    everything = list_sessions(listed)
    assert list_sessions(listed, limit=2) == everything[:2]
    assert list_sessions(listed, limit=2, offset=3) == everything[3:5]
    assert list_sessions(listed, offset=10) == []
    assert list_sessions(listed, limit=0) == []
    assert keys(list_sessions(listed, order="key")) == sorted(keys(everything))
    by_created = sorted(everything, key=lambda r: r.created_at, reverse=True)
    assert list_sessions(listed, order="created") == by_created


@pytest.mark.parametrize(
    "kwargs", [{"order": "size"}, {"limit": -1}, {"offset": -2}, {"limit": True}]
)
def test_bad_arguments_are_refused(listed: MemoryStore, kwargs: dict[str, object]) -> None:
    with pytest.raises(Exception, match="must be"):
        list_sessions(listed, **kwargs)  # type: ignore[arg-type]


def reference_select(rows: list[SessionInfo], q: CatalogFilter) -> list[SessionInfo]:
    """The filter, order and slice spelled out plainly (what select must agree with)."""
    out = []
    for r in rows:
        sid = SessionID.from_key(r.key)
        if q.prefix and not r.key.startswith(q.prefix):
            continue
        if q.state is not None and r.state != q.state:
            continue
        if q.created_after is not None and not r.created_at > q.created_after:
            continue
        if q.created_before is not None and not r.created_at < q.created_before:
            continue
        if q.agent is not None or q.channel is not None or q.peer is not None:
            if sid is None:
                continue
            if q.agent is not None and sid.agent != q.agent:
                continue
            if q.channel is not None and sid.channel != q.channel:
                continue
            if q.peer is not None and sid.peer != q.peer:
                continue
        out.append(r)
    if q.order == "key":
        out.sort(key=lambda r: r.key)
    elif q.order == "created":
        out.sort(key=lambda r: (-r.created_at.timestamp(), r.key))
    end = None if q.limit is None else q.offset + q.limit
    return out[q.offset : end]


_part = st.sampled_from(["", "a", "b", "a:b"])
_keys = st.builds(lambda *p: ":".join(p), _part, _part, _part).filter(bool)
_when = st.integers(0, 5).map(lambda d: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=d))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.builds(
            lambda key, c, u, s: SessionInfo(key=key, created_at=c, updated_at=u, state=s),
            _keys,
            _when,
            _when,
            st.sampled_from(["active", "idle"]),
        ),
        max_size=12,
        unique_by=lambda r: r.key,
    ),
    query=st.builds(
        CatalogFilter,
        prefix=st.sampled_from([None, "", "a", "a:"]),
        agent=st.sampled_from([None, "", "a"]),
        channel=st.sampled_from([None, "a", "b"]),
        peer=st.sampled_from([None, "b", "a:b"]),
        state=st.sampled_from([None, "idle"]),
        created_after=st.none() | _when,
        created_before=st.none() | _when,
        order=st.sampled_from(["updated", "created", "key"]),
        limit=st.none() | st.integers(0, 4),
        offset=st.integers(0, 3),
    ),
)
def test_select_agrees_with_the_plain_reading(
    rows: list[SessionInfo], query: CatalogFilter
) -> None:
    rows.sort(key=lambda r: r.key)
    rows.sort(key=lambda r: r.updated_at, reverse=True)
    got = select(rows, query)
    assert got == reference_select(rows, query)
    assert got is not rows


def test_catalog_heads_are_the_stored_rows(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    assert catalog_heads(store) == {}
    with store.session("a:b:c") as w:
        w.append_message("user", "hi")
    rows = list_sessions(store)
    assert catalog_heads(store) == {"a:b:c": (rows[0].seq, rows[0].head)}


@pytest.mark.parametrize("cut", [1, 10, 100, -1])
def test_a_truncated_catalog_file_is_rebuilt(tmp_path: Path, cut: int) -> None:
    store = FileStore(tmp_path, durability="none")
    for i in range(3):
        with store.session(f"k{i}") as w:
            w.append_message("user", f"m{i}")
    first = list_sessions(store)
    path = tmp_path / ".catalog"
    path.write_bytes(path.read_bytes()[:cut])
    assert list_sessions(FileStore(tmp_path)) == first == expected(store)


def test_rebuild_on_a_store_object_that_listed_before(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        w.append_message("user", "one")
    first = list_sessions(store)
    assert rebuild_catalog(store) == 1
    assert list_sessions(store) == first == expected(store)


def test_rows_match_a_fold_through_the_change_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changes, "SETTLE_NS", 0)  # trust the table at once
    reader = FileStore(tmp_path, durability="none")
    writer = FileStore(tmp_path, durability="none")  # another object: its own mapping
    rng = random.Random(11)
    keys = [f"bot:chan{i % 3}:{i}" for i in range(10)]
    scans: list[int] = []
    source = catalog_source(reader)
    scan = source.scan_logs

    def counted() -> list[LogStat]:
        scans.append(1)
        return scan()

    source.scan_logs = counted  # type: ignore[method-assign]
    list_sessions(reader)  # makes the table...
    assert (
        catalog_source(writer).read_changes() is not None
    )  # ...and the writer maps it (else: settle time)
    for round_ in range(8):
        for key in rng.sample(keys, 3):
            with writer.session(key, metadata={"title": key} if round_ == 0 else None) as w:
                random_ops(w, rng, rng.randint(1, 25))
        if round_ == 5:
            writer.delete(keys[0])
        assert list_sessions(reader) == expected(reader)
    assert len(scans) <= 3  # the first listings, until the table was trusted


def test_a_cut_log_is_never_left_longer_in_the_stored_catalog(tmp_path: Path) -> None:
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        for j in range(5):
            w.append_message("user", f"m{j}")
    list_sessions(store)
    assert catalog_heads(store)["k"][0] == 5
    data = store.read_bytes("k")
    store.cut("k", data.rfind(b"\n", 0, len(data) - 1) + 1, reason="test")
    assert list_sessions(store)[0].seq == 4
    assert catalog_heads(store)["k"][0] == 4  # written at once, not deferred (verify reads it)


def test_a_log_deleted_and_made_again_at_the_same_length_is_read_whole(tmp_path: Path) -> None:
    """Another file at the row's offset with no line past it is not the row's log: a store
    object that listed the first session lists the second one."""
    store = FileStore(tmp_path, durability="none")
    with store.session("k") as w:
        w.append_message("user", "hello")
    first = list_sessions(store)[0]
    size = store.path_for("k").stat().st_size
    other = FileStore(tmp_path, durability="none")
    other.delete("k")
    with other.session("k") as w:
        w.append_message("user", "hello")
    assert store.path_for("k").stat().st_size == size  # the row's offset, and no line past it
    got = list_sessions(store)
    assert got == expected(store) and got[0].head != first.head

"""Conversations as rows: listing, resuming and forking across /new, reset and archive.

Every test runs on the file, memory and PostgreSQL stores; the file store's catalog is also
checked against a fresh process's (a new store object reading the stored catalog).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionledger import history, replay
from sessionledger.eventlog import (
    BaseStore,
    ConversationResumed,
    FileStore,
    Header,
    InvalidEventError,
    KnownEvent,
    MessageAppended,
    SessionNotFoundError,
    SessionState,
    UnknownEvent,
    decode_log,
)
from sessionledger.eventlog.codec import encode_lines
from sessionledger.projections import ConversationInfo, list_conversations, list_sessions

KEY = "agent:telegram:42"


def _three_conversations(store: BaseStore) -> None:
    """Kyoto (ended by /new), Osaka (ended by reset), then an empty current one."""
    s = store.session(KEY)
    s.append_message("system", "You plan trips.")
    s.append_message("user", "Plan a trip to Kyoto")
    s.append_message("assistant", "Early April.")
    s.update_metadata(set={"title": "Kyoto trip"})
    store.new_session(KEY)
    s.append_message("user", "And Osaka?")
    s.update_metadata(set={"title": "Osaka"})
    store.reset(KEY)


def _summary(rows: list[ConversationInfo]) -> list[tuple[object, ...]]:
    return [(c.start_seq, c.end_seq, c.current, c.title, c.preview, c.messages) for c in rows]


def test_new_and_reset_end_conversations_with_their_own_titles(store: BaseStore) -> None:
    _three_conversations(store)
    rows = list_conversations(store, KEY)
    assert _summary(rows) == [
        (8, None, True, "", "", 0),
        (5, 8, False, "Osaka", "And Osaka?", 1),
        (0, 5, False, "Kyoto trip", "Plan a trip to Kyoto", 3),
    ]
    assert [c.end_reason for c in rows] == [None, "reset", "new"]
    assert [c.state for c in rows] == ["active", "ended", "ended"]
    # Time ranges chain: each starts when the one before it ended.
    assert rows[2].started_at == store.state(KEY).created_at
    assert rows[1].started_at == rows[2].updated_at and rows[0].started_at == rows[1].updated_at
    assert rows[2].tokens > 0 and rows[0].tokens == store.state(KEY).live_tokens
    assert list_sessions(store)[0].title == ""  # /new did not carry the title over


def test_new_session_keeps_the_title_when_asked(store: BaseStore) -> None:
    s = store.session(KEY)
    s.append_message("user", "hi")
    s.update_metadata(set={"title": "Greeting"})
    store.new_session(KEY, keep_title=True)
    current, ended = list_conversations(store, KEY)
    assert (current.title, ended.title) == ("Greeting", "Greeting")


def test_listing_filters_orders_and_pages(store: BaseStore) -> None:
    _three_conversations(store)
    other = store.session("agent:slack:7")
    other.append_message("user", "Slack question")
    store.archive("agent:slack:7")
    everything = list_conversations(store)
    assert len(everything) == 4
    assert everything == sorted(everything, key=lambda c: c.updated_at, reverse=True)
    assert [c.key for c in list_conversations(store, channel="slack")] == ["agent:slack:7"]
    assert list_conversations(store, channel="slack")[0].end_reason == "archive"
    assert list_conversations(store, state="archived")[0].state == "archived"
    assert len(list_conversations(store, current=False)) == 2
    assert len(list_conversations(store, current=True)) == 2
    assert list_conversations(store, limit=2, offset=1) == everything[1:3]
    assert (
        list_conversations(store, prefix="agent:tele", current=False, limit=1)
        == [c for c in everything if not c.current][:1]
    )
    newest = everything[0].updated_at
    assert list_conversations(store, updated_after=newest) == []
    assert len(list_conversations(store, updated_before=newest)) == 3
    by_key = list_conversations(store, order="key")
    assert [(c.key, c.start_seq) for c in by_key] == sorted((c.key, c.start_seq) for c in by_key)
    assert list_conversations(store, "nobody") == []
    with pytest.raises(InvalidEventError, match="order"):
        list_conversations(store, order="size")  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="limit"):
        list_conversations(store, limit=-1)


def test_resume_makes_an_ended_conversation_current_again(store: BaseStore) -> None:
    _three_conversations(store)
    seq = store.resume(KEY, 0, by="user:7", id="resume-1")
    state = store.state(KEY)
    assert [m["content"] for m in history(state)] == ["Plan a trip to Kyoto", "Early April."]
    assert state.metadata["title"] == "Kyoto trip" and state.resumed_from == 0
    current = list_conversations(store, KEY, current=True)[0]
    assert (current.title, current.resumed_from, current.messages) == ("Kyoto trip", 0, 3)
    # The current conversation was empty: nothing to end.
    assert [c.start_seq for c in list_conversations(store, KEY, current=False)] == [5, 0]
    # The log says who resumed what.
    entry = next(e for e in replay.timeline(store, KEY) if e.seq == seq)
    assert entry.type == "resumed" and "user:7" in entry.summary
    # A retry with the same id writes nothing more.
    last = state.seq
    assert store.resume(KEY, 0, by="user:7", id="resume-1") == seq
    assert store.state(KEY).seq == last
    assert replay.verify(store).ok


def test_resume_after_archive_reactivates_and_refuses_unknown(store: BaseStore) -> None:
    _three_conversations(store)
    store.archive(KEY)
    store.resume(KEY, 5)
    state = store.state(KEY)
    assert state.lifecycle == "active" and state.metadata["title"] == "Osaka"
    assert [m["content"] for m in history(state)] == ["And Osaka?"]
    with pytest.raises(InvalidEventError, match="no ended conversation"):
        store.resume(KEY, 3)
    with pytest.raises(SessionNotFoundError):
        store.resume("nobody", 0)


def test_fork_from_an_ended_conversation_verifies(store: BaseStore) -> None:
    _three_conversations(store)
    kyoto = list_conversations(store, KEY)[-1]
    assert kyoto.end_seq is not None
    forked = replay.fork(store, KEY, kyoto.end_seq - 1, new_key="agent:telegram:42:fork")
    state = store.state(forked)
    assert [m["content"] for m in state.message_dicts] == [
        "You plan trips.",
        "Plan a trip to Kyoto",
        "Early April.",
    ]
    assert state.metadata["title"] == "Kyoto trip"
    header = store.load(forked).header
    source = replay.state_at(store, KEY, seq=kyoto.end_seq - 1)
    assert (header.fork_of, header.fork_seq, header.fork_h) == (KEY, source.seq, source.head)
    assert replay.verify(store).ok
    assert [c.title for c in list_conversations(store, forked)] == ["Kyoto trip"]
    with pytest.raises(InvalidEventError, match="exists"):
        replay.fork(store, KEY, 2, new_key=forked)
    # The fork lives on by itself.
    store.session(forked).append_message("user", "What about Nara?")
    assert replay.verify(store).ok


def test_fork_and_resume_carry_the_compaction_over_field_for_field(store: BaseStore) -> None:
    s = store.session(KEY)
    for text in ("Plan Kyoto", "Early April.", "And Osaka?", "Late March."):
        s.append_message("user", text)
    s.mark_consolidated(2)
    s.compact(
        "Kyoto in April",
        2,
        tokens_before=90,
        tokens_after=9,
        removed=2,
        kept=2,
        duration=1.5,
        model="m-1",
    )
    want = store.state(KEY).compaction
    assert want is not None

    def same(state: SessionState) -> None:
        assert state.compaction is not None
        assert state.last_consolidated == 2
        mine = msgspec.structs.replace(state.compaction, seq=0, ts=None)
        assert mine == msgspec.structs.replace(want, seq=0, ts=None)

    same(store.state(replay.fork(store, KEY, new_key="kyoto:fork")))
    store.new_session(KEY)
    store.resume(KEY, 0)
    same(store.state(KEY))
    assert replay.verify(store).ok


def test_tampering_with_the_source_is_detected_from_the_fork(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none") as store:
        _three_conversations(store)
        forked = replay.fork(store, KEY, 3, new_key="f")
        path = store.path_for(KEY)
    # Rewrite the source's second line and re-chain everything after it (no hash key: anyone
    # can), so the source alone still verifies.
    decoded = decode_log(path.read_bytes())
    assert decoded.header is not None
    events: list[Header | KnownEvent] = [
        e for e in decoded.events if not isinstance(e, UnknownEvent)
    ]
    message = events[1]
    assert isinstance(message, MessageAppended)
    events[1] = MessageAppended.of(
        seq=message.seq, ts=message.ts, id=message.id, message={"role": "user", "content": "x"}
    )
    data, _ = encode_lines([decoded.header, *events])
    path.write_bytes(data)
    with FileStore(tmp_path / "s", durability="none") as store:
        report = replay.verify(store)
        assert report.session(KEY).ok  # the source's own chain is consistent again
        problems = report.session(forked).problems
        assert len(problems) == 1 and "the source was rewritten" in problems[0].what
        # A source that is gone is not a problem of the fork.
        store.delete(KEY)
        assert replay.verify(store).ok


def test_catalog_of_a_fresh_process_agrees(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none") as store:
        _three_conversations(store)
        store.resume(KEY, 0)
        before = list_conversations(store)
    with FileStore(tmp_path / "s", durability="none") as store:
        assert list_conversations(store) == before
        replay.recover(store)  # rebuilds the catalog from the logs alone
        assert list_conversations(store) == before


def test_a_resume_cut_short_finishes_on_retry(
    store: BaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _three_conversations(store)
    writer = store.session(KEY)
    before = writer.state.seq
    real = type(writer).append_message_dict
    calls = {"n": 0}

    def failing(self: Any, message: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (injected)")
        return real(self, message, **kwargs)

    monkeypatch.setattr(type(writer), "append_message_dict", failing)
    with pytest.raises(OSError, match="injected"):
        store.resume(KEY, 0, id="r1")
    monkeypatch.undo()
    if hasattr(store, "batch"):  # one transaction: nothing of it was written
        assert store.state(KEY).seq == before
    seq = store.resume(KEY, 0, id="r1")
    state = store.state(KEY)
    assert [m.message["content"] for m in state.messages] == [
        "You plan trips.",
        "Plan a trip to Kyoto",
        "Early April.",
    ]
    assert sum(1 for e in store.events(KEY) if isinstance(e, ConversationResumed)) == 1
    assert store.resume(KEY, 0, id="r1") == seq
    assert replay.verify(store).ok


def test_a_page_from_a_fresh_process_equals_the_full_order(tmp_path: Path) -> None:
    import random

    rng = random.Random(5)
    root = tmp_path / "s"
    with FileStore(root, durability="none") as store:
        keys = [f"agent:telegram:{n}" for n in range(25)]
        for _ in range(120):  # interleaved activity: ended conversations of many ages
            key = rng.choice(keys)
            s = store.session(key)
            s.append_message("user", f"hello {key}")
            if rng.random() < 0.3:
                store.new_session(key)
        store.archive(keys[3])
    with FileStore(root, durability="none") as store:
        full = list_conversations(store)
    for offset, limit in ((0, 1), (0, 7), (3, 11), (40, 100), (0, 1000)):
        with FileStore(root, durability="none") as fresh:  # nothing kept: the lazy merge
            page = list_conversations(fresh, limit=limit, offset=offset)
        assert page == full[offset : offset + limit], (offset, limit)
    with FileStore(root, durability="none") as fresh:
        assert (
            list_conversations(fresh, limit=5, current=False)
            == [c for c in full if not c.current][:5]
        )


def _rebuilt(root: Path) -> list[ConversationInfo]:
    """Every conversation from a catalog built from the logs alone."""
    (root / ".catalog").unlink(missing_ok=True)
    with FileStore(root, durability="none") as fresh:
        return list_conversations(fresh)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_kept_listing_equals_a_rebuild_through_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The catalog's listing of every conversation is kept current by every process: by one
    that decoded it (changed in place), by one that never did (changes kept beside the stored
    chunks), and read page by page across chunk boundaries by a fresh one."""
    import random

    from sessionledger.projections import _catalog, _catalog_convs

    monkeypatch.setattr(_catalog_convs, "CHUNK", 4)
    monkeypatch.setattr(_catalog_convs, "PENDING_MAX", 40)
    monkeypatch.setattr(_catalog, "SAVE_AFTER", 1)  # every listing stores the catalog
    rng = random.Random(seed)
    root = tmp_path / "s"
    keys = [f"agent:telegram:{n}" for n in range(12)]
    with FileStore(root, durability="none") as writer:
        for key in keys[:6]:
            writer.session(key).append_message("user", f"hello {key}")
        list_conversations(writer)  # built and stored
        decoded = FileStore(root, durability="none")  # lists conversations: decodes them
        list_conversations(decoded)
        sessions_only = FileStore(root, durability="none")  # never decodes the listing
        for step in range(60):
            key = rng.choice(keys)
            roll = rng.random()
            if roll < 0.45:
                writer.session(key).append_message("user", f"step {step}")
            elif roll < 0.65 and writer.exists(key):
                writer.new_session(key)
            elif roll < 0.72 and writer.exists(key):
                ended = [c for c in list_conversations(writer, key) if not c.current]
                if ended:
                    writer.resume(key, rng.choice(ended).start_seq)
            elif roll < 0.78 and writer.exists(key):
                writer.archive(key)
            elif roll < 0.84 and writer.exists(key):
                writer.delete(key)
            elif roll < 0.9:
                writer.session(key).update_metadata(set={"title": f"t{step}"})
            if step % 3 == 0:
                list_sessions(sessions_only)
            if step % 5 == 0:
                list_conversations(decoded)
            if step % 7 == 0:
                expected = list_conversations(writer)
                with FileStore(root, durability="none") as fresh:
                    offset, limit = rng.randrange(len(expected) + 2), rng.randrange(1, 9)
                    page = list_conversations(fresh, limit=limit, offset=offset)
                    assert page == expected[offset : offset + limit], (step, offset, limit)
                with FileStore(root, durability="none") as fresh:
                    assert list_conversations(fresh) == expected, step
        list_sessions(sessions_only)
        expected = list_conversations(writer)
        assert list_conversations(decoded) == expected
        assert list_conversations(sessions_only) == expected
        decoded.close()
        sessions_only.close()
    assert _rebuilt(root) == expected


def test_a_damaged_section_of_the_catalog_is_rebuilt(tmp_path: Path) -> None:
    import msgspec

    from sessionledger.projections import _catalog_file

    root = tmp_path / "s"
    with FileStore(root, durability="none") as store:
        _three_conversations(store)
        before = list_conversations(store)
        rows = list_sessions(store)
    blob = (root / ".catalog").read_bytes()
    stored = msgspec.msgpack.decode(blob)
    for section in (7, 9):  # the rows, then the conversations' first chunk
        damaged = list(stored)
        if section == 7:
            damaged[7] = b"\xc1"  # never valid msgpack
        else:
            damaged[9] = [b"\x91\x01"]  # a list holding a number, not a row
        (root / ".catalog").write_bytes(msgspec.msgpack.encode(damaged))
        with FileStore(root, durability="none") as fresh:
            assert list_conversations(fresh) == before
        (root / ".catalog").write_bytes(msgspec.msgpack.encode(damaged))
        with FileStore(root, durability="none") as fresh:
            assert list_sessions(fresh) == rows
    assert stored[1] == _catalog_file.CATALOG_VERSION


def test_an_ended_entry_keeps_every_field_of_the_row_but_what_it_implies() -> None:
    """A field added to ``ConversationInfo`` must be added to the stored ``Ended`` (or be one
    the entry implies), or the catalog would lose it."""
    import msgspec

    from sessionledger.projections import _catalog_file

    row_fields = ConversationInfo.__struct_fields__
    kept = tuple(f for f in row_fields if f not in _catalog_file.ENDED_IMPLIED)
    assert _catalog_file.Ended.__struct_fields__ == kept
    row = ConversationInfo(
        key=KEY,
        start_seq=3,
        end_seq=9,
        title="Kyoto",
        preview="Plan a trip",
        messages=2,
        tokens=40,
        started_at=datetime(2026, 11, 1, tzinfo=UTC),
        updated_at=datetime(2026, 11, 2, tzinfo=UTC),
        end_reason="new",
        resumed_from=0,
    )
    stored = msgspec.msgpack.encode(_catalog_file.compact(row))
    back = msgspec.msgpack.decode(stored, type=_catalog_file.Ended)
    assert _catalog_file.expand(KEY, (back,)) == (row,)


def test_a_catalog_of_the_previous_format_is_rebuilt_once(tmp_path: Path) -> None:
    import msgspec

    from sessionledger.projections import _catalog_file

    root = tmp_path / "s"
    with FileStore(root, durability="none") as store:
        _three_conversations(store)
        before = list_conversations(store)
        rows = list_sessions(store)
    stored = msgspec.msgpack.decode((root / ".catalog").read_bytes())
    assert stored[1] == _catalog_file.CATALOG_VERSION == 7
    old = list(stored)
    old[1] = 6  # what the previous release wrote (its rows said nothing of sealing)
    (root / ".catalog").write_bytes(msgspec.msgpack.encode(old))
    with FileStore(root, durability="none") as fresh:
        assert list_conversations(fresh) == before
        assert list_sessions(fresh) == rows
    assert msgspec.msgpack.decode((root / ".catalog").read_bytes())[1] == 7

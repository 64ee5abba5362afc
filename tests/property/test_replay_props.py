"""Replay properties: time travel is the fold of a prefix; any cut recovers to whole lines;
any changed byte fails verify; nanobot imports salvage exactly the good lines and round-trip."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import replay
from sessionledger.eventlog import MemoryStore, SessionState, SessionWriter, fold, state_enc_hook

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("msg"), st.sampled_from(["user", "assistant", "tool"]), st.text(max_size=20)
        ),
        st.tuples(st.just("meta"), st.sampled_from(["title", "tags", "x"]), st.integers(0, 3)),
        st.tuples(st.just("unset"), st.sampled_from(["title", "tags", "x"]), st.just(0)),
        st.tuples(st.just("consolidate"), st.just(""), st.integers(0, 100)),
        st.tuples(st.just("compact"), st.just(""), st.integers(0, 100)),
        st.tuples(st.just("trim"), st.just(""), st.integers(1, 3)),
        st.tuples(st.just("retract"), st.just(""), st.integers(1, 2)),
        st.tuples(st.just("clear"), st.just(""), st.just(0)),
        st.tuples(st.just("idle"), st.just(""), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


def play(s: SessionWriter, steps: list[tuple[str, str, Any]]) -> None:
    for kind, name, value in steps:
        live = len(s.state.messages)
        if kind == "msg":
            s.append_message(name, value)
        elif kind == "meta":
            s.update_metadata(set={name: value})
        elif kind == "unset":
            s.update_metadata(unset=[name])
        elif kind == "consolidate":
            s.mark_consolidated(value % (live + 1))
        elif kind == "compact":
            s.compact("summary", upto=value % (live + 1), tokens_before=100, tokens_after=10)
        elif kind == "trim" and live >= value:
            s.trim(value, "file_cap")
        elif kind == "retract" and live >= value:
            s.retract(value)
        elif kind == "clear":
            s.clear()
        elif kind == "idle":
            s.set_lifecycle("idle")


@settings(max_examples=60, deadline=None)
@given(ops, st.data())
def test_state_at_and_diff_are_folds_of_prefixes(
    steps: list[tuple[str, str, Any]], data: st.DataObject
) -> None:
    store = MemoryStore()
    with store.session("k") as s:
        play(s, steps)
    loaded = store.load("k")
    last = loaded.state.seq
    a = data.draw(st.integers(0, last))
    b = data.draw(st.integers(0, last))
    fold_a = fold(loaded.header, [e for e in loaded.events if e.seq <= a])
    fold_b = fold(loaded.header, [e for e in loaded.events if e.seq <= b])

    def as_json(state: SessionState) -> bytes:
        return msgspec.json.encode(state, enc_hook=state_enc_hook)

    assert as_json(replay.state_at(store, "k", seq=a)) == as_json(fold_a)
    d = replay.diff(store, "k", a, b)
    live_a = {m.seq for m in fold_a.messages}
    live_b = {m.seq for m in fold_b.messages}
    assert {m.seq for m in d.added} == live_b - live_a
    assert {m.seq for m in d.withdrawn} == live_a - live_b
    # The timeline's running counts agree with the fold at every point.
    for entry in replay.timeline(store, "k"):
        at = fold(loaded.header, [e for e in loaded.events if e.seq <= entry.seq])
        assert (entry.live_messages, entry.live_tokens) == (len(at.messages), at.live_tokens)


@settings(max_examples=60, deadline=None)
@given(ops, st.data())
def test_any_cut_recovers_to_the_whole_lines_before_it(
    steps: list[tuple[str, str, Any]], data: st.DataObject
) -> None:
    store = MemoryStore()
    with store.session("k") as s:
        play(s, steps)
    whole = store.read_bytes("k")
    first_end = whole.index(b"\n") + 1
    cut = data.draw(st.integers(first_end, len(whole)))
    store.put_bytes("k", whole[:cut])
    report = replay.recover(store)
    keep = whole.rfind(b"\n", 0, cut) + 1
    assert report.ok
    assert store.read_bytes("k") == whole[:keep]
    assert report.tails_cut == ([("k", cut - keep)] if cut > keep else [])
    assert replay.verify(store).ok


@settings(max_examples=60, deadline=None)
@given(ops, st.data())
def test_any_changed_byte_fails_verify(
    steps: list[tuple[str, str, Any]], data: st.DataObject
) -> None:
    store = MemoryStore()
    with store.session("k") as s:
        play(s, steps)
    whole = store.read_bytes("k")
    i = data.draw(st.integers(0, len(whole) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != whole[i]))
    store.put_bytes("k", whole[:i] + bytes([new]) + whole[i + 1 :])
    assert not replay.verify(store).ok


messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=15)}
    ),
    max_size=8,
)
junk = st.sampled_from([b"{not json", b"\xff\xfe", b"[1]", b'{"content": "no role"}', b'"str"'])


@settings(max_examples=60, deadline=None)
@given(
    messages,
    st.lists(st.tuples(st.integers(0, 8), junk), max_size=4),
    st.text(min_size=1, max_size=10),
)
def test_nanobot_import_salvages_exactly_the_good_lines(
    msgs: list[dict[str, Any]], bad: list[tuple[int, bytes]], key: str
) -> None:
    meta = {"_type": "metadata", "key": key, "created_at": "2026-01-01T00:00:00", "metadata": {}}
    lines = [json.dumps(meta, ensure_ascii=False).encode()]
    lines += [json.dumps(m, ensure_ascii=False).encode() for m in msgs]
    for index, raw in sorted(bad, reverse=True):
        lines.insert(1 + min(index, len(msgs)), raw)
    data = b"\n".join(lines) + b"\n"
    parsed = replay.parse_nanobot(data, "fixture.jsonl")
    assert [m for m, _ in parsed.messages] == msgs
    assert len(parsed.rejected) == len(bad)
    store = MemoryStore()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.jsonl"
        path.write_bytes(data)
        assert replay.import_nanobot(store, path).sessions[0].outcome == "created"
        assert replay.import_nanobot(store, path).sessions[0].outcome == "unchanged"
        assert store.load(key).state.message_dicts == msgs
        assert len(store.quarantined.get(key, [])) == len(bad)
        # Export to nanobot's format and import again: the same log, byte for byte.
        path.write_bytes(replay.export_nanobot(store, key))
        again = MemoryStore()
        replay.import_nanobot(again, path)
        assert again.read_bytes(key) == store.read_bytes(key)


@settings(max_examples=80, deadline=None)
@given(ops, st.data(), st.sampled_from([b"", b"secret"]))
def test_the_fast_path_accepts_exactly_the_sound_logs(
    steps: list[tuple[str, str, Any]], data: st.DataObject, key: bytes
) -> None:
    from sessionledger.eventlog import decode_log
    from sessionledger.replay._fastscan import scan

    store = MemoryStore(hash_key=key or None)
    with store.session("k") as s:
        play(s, steps)
    whole = store.read_bytes("k")
    good = decode_log(whole, key=key)
    for light in (True, False):
        fast = scan(whole, key, light=light)
        assert fast is not None
        assert (fast.head, fast.last_seq, fast.lines) == (good.head, good.last_seq, good.lines)
    full = scan(whole, key)
    assert full is not None and [e.id for e in full.events] == [e.id for e in good.events]
    i = data.draw(st.integers(0, len(whole) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != whole[i]))
    mutated = whole[:i] + bytes([new]) + whole[i + 1 :]
    slow = decode_log(mutated, key=key)
    for light in (True, False):
        if scan(mutated, key, light=light) is not None:  # only if the slow path agrees it is sound
            assert slow.bad is None and slow.torn is None and slow.header is not None

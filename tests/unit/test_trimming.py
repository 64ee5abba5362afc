"""Trimming policies: retain_recent_legal_suffix, file_cap (exactly-once archive), truncation."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger import projections
from sessionledger.eventlog import ConflictError, InvalidEventError, MemoryStore, SessionWriter
from sessionledger.projections import (
    TrimPlan,
    apply_plan,
    file_cap,
    retain_recent_legal_suffix,
    truncate_to_budget,
)

Msg = dict[str, Any]


def u(text: str) -> Msg:
    return {"role": "user", "content": text}


def a(text: str, *ids: str) -> Msg:
    message: Msg = {"role": "assistant", "content": text}
    if ids:
        message["tool_calls"] = [{"id": i, "type": "function"} for i in ids]
    return message


def t(call_id: str | None, text: str = "r") -> Msg:
    message: Msg = {"role": "tool", "content": text}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def writer_with(messages: Sequence[Msg], consolidated: int = 0) -> SessionWriter:
    s = MemoryStore().session("trim:1")
    for message in messages:
        s.append_message_dict(message)
    if consolidated:
        s.mark_consolidated(consolidated)
    return s


def live(s: SessionWriter) -> list[Any]:
    return [m.message["content"] for m in s.state.messages]


def run(s: SessionWriter, plan: TrimPlan) -> list[Any]:
    """Apply the plan, check it left ``plan.kept`` messages, and return what is live."""
    apply_plan(s, plan)
    assert len(s.state.messages) == plan.kept
    return live(s)


# -- retain_recent_legal_suffix ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "messages", "max_messages", "kept"),
    [
        ("within the cap nothing changes", [u("u0"), a("a0")], 2, ["u0", "a0"]),
        (
            "the suffix starts at its first user turn",
            [u("u0"), a("a0"), u("u1"), a("a1"), u("u2"), a("a2")],
            3,
            ["u2", "a2"],
        ),
        (
            "the suffix starts at a legal tool boundary",
            [u("u0"), a("c", "x"), u("u1"), t("x"), a("end")],
            4,
            ["end"],
        ),
        (
            "an assistant-only tail anchors at the latest user turn, capped forward",
            [u("u0"), a("a1"), a("a2"), a("a3"), a("a4")],
            2,
            ["u0", "a1"],
        ),
        (
            "a tail with no user turn anywhere stays",
            [a("p"), a("q"), a("z")],
            2,
            ["q", "z"],
        ),
        (
            "a tail with no user turn anywhere is legally started",
            [a("c", "x"), t("x"), t("x", "r2"), a("z")],
            2,
            ["z"],
        ),
    ],
)
def test_retain_recent_legal_suffix(
    rule: str, messages: list[Msg], max_messages: int, kept: list[str]
) -> None:
    s = writer_with(messages)
    plan = retain_recent_legal_suffix(s.state, max_messages)
    assert run(s, plan) == kept
    assert len(kept) <= max_messages


def test_retain_with_no_room_clears() -> None:
    s = writer_with([u("u0"), a("a0")], consolidated=1)
    s.update_metadata(set={"_last_summary": "x"})
    plan = retain_recent_legal_suffix(s.state, 0)
    assert plan.clear
    run(s, plan)
    assert s.state.last_consolidated == 0 and "_last_summary" not in s.state.metadata
    # An empty session has nothing to clear: the plan is empty and writes nothing.
    again = retain_recent_legal_suffix(s.state, -1)
    assert again.empty and apply_plan(s, again) == []


def test_retain_shifts_the_cursor_by_what_was_dropped() -> None:
    messages = [u("u0"), a("a0"), u("u1"), a("a1"), u("u2"), a("a2")]
    for cursor, expected in [(1, 0), (5, 1), (6, 2)]:
        s = writer_with(messages, consolidated=cursor)
        plan = retain_recent_legal_suffix(s.state, 2)
        assert (plan.drop, plan.retract, plan.consolidated) == (4, 0, None)
        run(s, plan)
        assert s.state.last_consolidated == expected


def test_retain_keeps_consolidated_messages_consolidated_when_the_newest_are_withdrawn() -> None:
    # nanobot lowers the cursor by every dropped message here (to 0), which would hand
    # already-consolidated messages to consolidation again; the plan keeps them below it.
    s = writer_with([u("u0"), a("a1"), a("a2"), a("a3"), a("a4")], consolidated=2)
    plan = retain_recent_legal_suffix(s.state, 3)
    assert (plan.drop, plan.retract) == (0, 2)
    assert run(s, plan) == ["u0", "a1", "a2"]
    assert s.state.last_consolidated == 2


def test_a_stale_plan_raises_and_writes_nothing() -> None:
    s = writer_with([u("u0"), a("a0"), u("u1"), a("a1")])
    plan = retain_recent_legal_suffix(s.state, 2)
    s.append_message_dict(u("late"))
    seq = s.seq
    with pytest.raises(ConflictError):
        apply_plan(s, plan)
    assert s.seq == seq and live(s)[-1] == "late"


# -- file_cap ----------------------------------------------------------------------------------


def test_file_cap_within_the_limit_does_nothing() -> None:
    s = writer_with([u("u0"), a("a0")])
    assert file_cap(s.state, 2).empty
    assert file_cap(s.state, 0).empty
    assert projections.FILE_MAX_MESSAGES == 2000


def test_file_cap_archives_what_it_drops_above_the_cursor() -> None:
    s = writer_with([u("u0"), a("a0"), u("u1"), a("a1"), u("u2"), a("a2")], consolidated=1)
    plan = file_cap(s.state, 3)
    archived: list[Msg] = []
    seqs = apply_plan(s, plan, on_archive=archived.extend)
    assert [m["content"] for m in archived] == ["a0", "u1", "a1"]
    assert live(s) == ["u2", "a2"] and len(seqs) == 1
    assert s.state.last_consolidated == 0


def test_file_cap_archives_withdrawn_newest_messages_too() -> None:
    s = writer_with([u("u0"), a("a1"), a("a2"), a("a3"), a("a4")], consolidated=1)
    plan = file_cap(s.state, 2)
    assert [m["content"] for m in plan.archive] == ["a2", "a3", "a4"]
    assert run(s, plan) == ["u0", "a1"]


def test_a_failing_archiver_leaves_the_log_untouched() -> None:
    s = writer_with([u("u0"), a("a0"), u("u1"), a("a1")])
    seq = s.seq

    def fail(_: Sequence[Msg]) -> None:
        raise RuntimeError("archive down")

    with pytest.raises(RuntimeError):
        apply_plan(s, file_cap(s.state, 2), on_archive=fail)
    assert s.seq == seq


@pytest.mark.parametrize("seed", range(8))
def test_repeated_file_caps_archive_every_dropped_message_exactly_once(seed: int) -> None:
    rng = random.Random(seed)
    s = MemoryStore().session("cap:1")
    archived: list[int] = []
    consolidated: set[int] = set()
    appended = 0
    for _ in range(400):
        roll = rng.random()
        if roll < 0.75:
            role = rng.choice(["user", "assistant", "assistant", "tool"])
            message: Msg = {"role": role, "content": f"m{appended}", "n": appended}
            if role == "tool":
                message["tool_call_id"] = rng.choice(["x", "y"])
            elif role == "assistant" and rng.random() < 0.4:
                message["tool_calls"] = [{"id": rng.choice(["x", "y"])}]
            s.append_message_dict(message)
            appended += 1
        elif roll < 0.85 and s.state.messages:
            cursor = rng.randint(s.state.last_consolidated, len(s.state.messages))
            s.mark_consolidated(cursor)
            consolidated.update(m.message["n"] for m in s.state.messages[:cursor])
        else:
            plan = file_cap(s.state, rng.randint(1, 12))
            apply_plan(s, plan, on_archive=lambda ms: archived.extend(m["n"] for m in ms))
    live_ids = {m.message["n"] for m in s.state.messages}
    assert len(archived) == len(set(archived)), "a message was archived twice"
    assert not set(archived) & consolidated, "a consolidated message was archived"
    assert not set(archived) & live_ids, "a live message was archived"
    # Nothing is lost: every message is live, consolidated, or archived.
    assert live_ids | consolidated | set(archived) == set(range(appended))


# -- truncation to a budget ------------------------------------------------------------------


def tokens_of(s: SessionWriter) -> int:
    return s.state.live_tokens


def test_truncate_below_the_threshold_does_nothing() -> None:
    s = writer_with([u("u0"), a("a0"), u("u1"), a("a1")])
    plan = truncate_to_budget(s.state, budget=tokens_of(s) * 2, threshold=0.8, keep_recent=1)
    assert plan.empty and plan.kept == 4


def test_truncate_needs_more_than_keep_recent_plus_one_messages() -> None:
    s = writer_with([u("u0"), a("a0"), u("u1")])
    assert truncate_to_budget(s.state, budget=1, keep_recent=2).empty


def test_truncate_keeps_the_first_user_message_and_the_recent_tail() -> None:
    s = writer_with([u("first"), *[a(f"a{i}") for i in range(8)]])
    plan = truncate_to_budget(s.state, budget=10, keep_recent=3)
    assert plan.reason == "truncate"
    # Message 0 stays in place; the tail is withdrawn and appended again after it.
    assert (plan.drop, len(plan.reappend)) == (0, 3)
    assert run(s, plan) == ["first", "a5", "a6", "a7"]


def test_truncate_stops_dropping_once_under_the_headroom() -> None:
    s = writer_with([u("first"), *[a("x" * 400) for _ in range(6)]])
    per = s.state.messages[1].tokens
    budget = per * 6  # over 0.8 of it now; 0.75 of it is 4.5 messages' worth
    plan = truncate_to_budget(s.state, budget=budget, keep_recent=1)
    # Dropping two of the six leaves first + 4 (under 0.75 * budget).
    assert plan.kept == 5
    run(s, plan)


def test_truncate_without_a_leading_user_message_is_a_plain_trim() -> None:
    s = writer_with([a("sys-ish"), u("u0"), a("a0"), u("u1"), a("a1")])
    plan = truncate_to_budget(s.state, budget=1, keep_recent=2)
    assert (plan.drop, plan.retract, plan.reappend) == (3, 0, ())
    assert run(s, plan) == ["u1", "a1"]


def test_truncate_drops_orphaned_tool_messages_anywhere() -> None:
    messages = [
        u("first"),
        a("c", "x"),
        t("x"),
        a("mid"),
        t("x", "orphan"),
        t(None, "bare"),
        a("end"),
    ]
    s = writer_with(messages)
    plan = truncate_to_budget(s.state, budget=1, keep_recent=4)
    assert run(s, plan) == ["first", "mid", "end"]


def test_truncate_keeps_the_cursor_on_the_consolidated_messages() -> None:
    s = writer_with([u("first"), *[a(f"a{i}") for i in range(8)]], consolidated=7)
    plan = truncate_to_budget(s.state, budget=1, keep_recent=3)
    run(s, plan)
    # first (0) and a5 (6) were below the cursor; a6 and a7 were not.
    assert s.state.last_consolidated == 2


def test_truncate_rejects_a_bad_budget() -> None:
    s = writer_with([u("u0")])
    with pytest.raises(InvalidEventError, match="budget"):
        truncate_to_budget(s.state, budget=0)
    with pytest.raises(InvalidEventError, match="headroom"):
        truncate_to_budget(s.state, budget=10, headroom=0.9, threshold=0.8)


# -- against plain list versions of the rules --------------------------------------------------

messages_st = st.lists(
    st.one_of(
        st.builds(u, st.just("u")),
        st.builds(a, st.just("a")),
        st.builds(lambda i: a("c", i), st.sampled_from(["x", "y"])),
        st.builds(t, st.sampled_from(["x", "y", None])),
    ),
    max_size=25,
)


def nanobot_retain(messages: list[Msg], max_messages: int) -> list[Msg]:
    """retain_recent_legal_suffix over a plain list (max_messages > 0)."""
    if len(messages) <= max_messages:
        return messages
    kept = messages[-max_messages:]
    users = [i for i, m in enumerate(kept) if m["role"] == "user"]
    if users:
        kept = kept[users[0] :]
    else:
        latest = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if latest:
            kept = messages[latest[-1] : latest[-1] + max_messages]
    kept = kept[projections.legal_start(kept) :]
    return kept[-max_messages:]


def seed000_truncate(messages: list[Msg], keep_recent: int) -> list[Msg]:
    """Seed 000's rule with a budget so small that everything droppable goes."""
    if len(messages) <= keep_recent + 1:
        return messages
    first = messages[:1] if messages[0]["role"] == "user" else []
    begin = len(first)
    tail = messages[max(begin, len(messages) - keep_recent) :]
    if len(messages) - len(tail) - begin == 0:
        return messages
    kept = first + tail
    orphans = set(projections.orphaned_tool_indices(kept))
    return [m for i, m in enumerate(kept) if i not in orphans]


@settings(max_examples=150, deadline=None)
@given(messages_st, st.integers(1, 10))
def test_retain_plan_leaves_what_nanobot_keeps(messages: list[Msg], max_messages: int) -> None:
    s = writer_with(messages)
    run(s, retain_recent_legal_suffix(s.state, max_messages))
    assert [m.message for m in s.state.messages] == nanobot_retain(messages, max_messages)


@settings(max_examples=150, deadline=None)
@given(messages_st, st.integers(0, 6), st.integers(0, 25))
def test_truncate_plan_leaves_what_seed_000_keeps(
    messages: list[Msg], keep_recent: int, cursor: int
) -> None:
    s = writer_with(messages, consolidated=min(cursor, len(messages)))
    before = [m.message for m in s.state.messages]
    below = {id(m) for m in before[: s.state.last_consolidated]}
    run(s, truncate_to_budget(s.state, budget=1, keep_recent=keep_recent))
    expected = seed000_truncate(before, keep_recent)
    assert [m.message for m in s.state.messages] == expected
    # Exactly the kept messages that were below the cursor are below it now.
    assert s.state.last_consolidated == sum(1 for m in expected if id(m) in below)

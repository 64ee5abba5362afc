"""Differential tests: our nanobot ``Session`` answers as nanobot 0.2.2's own ``Session`` does.

nanobot-ai 0.2.2 is a test dependency: each property builds the same messages in both classes
and compares what ``get_history`` and ``retain_recent_legal_suffix`` return and leave.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import nanobot.config.schema  # noqa: F401  # first: nanobot 0.2.2 needs this import order
import nanobot.session.manager as nb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.tools.nanobot import Session

Msg = dict[str, Any]


@st.composite
def conversations(draw: st.DrawFn) -> list[Msg]:
    """Messages with users, assistants (some calling tools), tool results and the extras
    nanobot's history reads (channel deliveries, attachments, media, commands)."""
    out: list[Msg] = []
    calls: list[str] = []
    for i in range(draw(st.integers(0, 24))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "tool", "orphan"]))
        if kind == "user":
            msg: Msg = {"role": "user", "content": draw(st.sampled_from(["", f"u{i}"]))}
            extra = draw(st.sampled_from(["", "cli", "mcp", "media", "command", "both"]))
            if extra in ("cli", "both"):
                msg["cli_apps"] = [{"name": " Git ", "entry_point": "git"}, {"name": ""}, "x"]
            if extra in ("mcp", "both"):
                msg["mcp_presets"] = [{"name": "FS"}, {"name": "web", "transport": "sse"}]
            if extra == "media":
                msg["media"] = ["/tmp/a.png", ""]
            if extra == "command":
                msg["_command"] = True
        elif kind == "assistant":
            msg = {"role": "assistant", "content": draw(st.sampled_from(["", f"a{i}"]))}
            if draw(st.booleans()):
                msg["_channel_delivery"] = True
        elif kind == "call":
            calls.append(f"c{i}")
            msg = {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"c{i}", "type": "function"}],
            }
        elif kind == "tool" and calls:
            msg = {"role": "tool", "tool_call_id": calls[-1], "content": "r"}
        else:
            msg = {"role": "tool", "tool_call_id": f"gone{i}", "content": "r"}
        out.append(msg)
    return out


def pair(messages: list[Msg], cursor: int) -> tuple[nb.Session, Session]:
    theirs = nb.Session(key="k", messages=copy.deepcopy(messages), last_consolidated=cursor)
    ours = Session(key="k", messages=copy.deepcopy(messages), last_consolidated=cursor)
    return theirs, ours


@settings(max_examples=300, deadline=None)
@given(
    messages=conversations(),
    cursor=st.integers(0, 30),
    max_messages=st.integers(-1, 30),
    extend=st.booleans(),
    stamps=st.booleans(),
    max_tokens=st.sampled_from([0, 1, 5, 20, 60]),
)
def test_get_history_matches_nanobot(
    messages: list[Msg], cursor: int, max_messages: int, extend: bool, stamps: bool, max_tokens: int
) -> None:
    theirs, ours = pair(messages, cursor)
    kwargs: dict[str, Any] = {
        "include_timestamps": stamps,
        "extend_to_user": extend,
        "max_tokens": max_tokens,
    }
    # A cheap estimator in nanobot's place (both sides use it): the slicing is under test here.
    with mock.patch.object(nb, "estimate_message_tokens", lambda m: len(str(m)) // 8):
        expected = theirs.get_history(max_messages, **kwargs)
        assert ours.get_history(max_messages, **kwargs) == expected


@settings(max_examples=300, deadline=None)
@given(
    messages=conversations(),
    cursor=st.integers(0, 30),
    max_messages=st.integers(-1, 30),
    extend=st.booleans(),
)
def test_retain_recent_legal_suffix_matches_nanobot(
    messages: list[Msg], cursor: int, max_messages: int, extend: bool
) -> None:
    theirs, ours = pair(messages, cursor)
    expected = theirs.retain_recent_legal_suffix(max_messages, extend_to_user=extend)
    assert ours.retain_recent_legal_suffix(max_messages, extend_to_user=extend) == expected
    assert ours.messages == theirs.messages
    assert ours.last_consolidated == theirs.last_consolidated


def test_extend_to_user_reaches_back_past_the_window_to_the_turns_user() -> None:
    messages: list[Msg] = [
        {"role": "user", "content": "spawn a subagent"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    session = Session(key="k", messages=messages)
    assert session.get_history(2) == [{"role": "assistant", "content": "done"}]
    extended = session.get_history(2, extend_to_user=True)
    assert [m["role"] for m in extended] == ["user", "assistant", "tool", "assistant"]
    dropped, below = session.retain_recent_legal_suffix(2, extend_to_user=True)
    assert (dropped, below, len(session.messages)) == ([], 0, 4)


def test_attachment_hints_follow_the_user_text() -> None:
    session = Session(
        key="k",
        messages=[
            {
                "role": "user",
                "content": "look",
                "cli_apps": [{"name": "Git", "entry_point": " "}],
                "mcp_presets": [{"name": "fs"}],
            }
        ],
    )
    assert session.get_history()[0]["content"] == (
        "look\n[CLI App Attachment: @git; tool=run_cli_app; entry_point=unknown; "
        "skill=skills/cli-app-git/SKILL.md]\n"
        "[MCP Preset Attachment: @fs; tool_prefix=mcp_fs_; transport=mcp]"
    )


@pytest.mark.parametrize("extend", [False, True])
def test_a_saved_session_answers_as_an_unsaved_one(extend: bool, tmp_path: Any) -> None:
    from sessionledger.tools.nanobot import SessionManager

    messages = [
        {"role": "user", "content": "q"},
        *({"role": "assistant", "content": f"a{i}"} for i in range(5)),
    ]
    with SessionManager(tmp_path) as manager:
        session = manager.get_or_create("k")
        session.messages.extend(copy.deepcopy(messages))
        manager.save(session)
        theirs = nb.Session(key="k", messages=copy.deepcopy(messages))
        assert session.get_history(3, extend_to_user=extend) == theirs.get_history(
            3, extend_to_user=extend
        )


def test_the_token_budget_uses_nanobots_estimator_as_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nb, "estimate_message_tokens", lambda message: 50)
    session = Session(key="k", messages=[{"role": "user", "content": f"u{i}"} for i in range(6)])
    assert [m["content"] for m in session.get_history(max_tokens=120)] == ["u4", "u5"]

"""Assistant replay sanitising, image breadcrumbs and the session-list preview text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import MemoryStore
from sessionledger.eventlog.preview import (
    ASSISTANT_PREVIEW,
    ELLIPSIS,
    NO_PREVIEW,
    USER_PREVIEW,
    may_change,
    preview_candidates,
    preview_step,
)
from sessionledger.projections import (
    PREVIEW_MAX_CHARS,
    content_text,
    image_breadcrumb,
    list_sessions,
    preview_text,
    sanitize_assistant_text,
    session_preview,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("  padded \n", "padded"),
        ("[Message Time: 2026-11-25 10:00]\nhi", "hi"),
        ("[Message Time: 2026-11-25 10:00]hi", "hi"),
        ("[Message Time: a]\n[Message Time: b]\nhi", "[Message Time: b]\nhi"),
        ("hi [Message Time: a]\nthere", "hi [Message Time: a]\nthere"),
        ("a\n[image: /tmp/x.png]\nb", "a\nb"),
        ("a\n[image: ~/x.png]  \nb", "a\nb"),
        ("a\n[image: https://h/x.png]", "a\n[image: https://h/x.png]"),
        ("see [image: /tmp/x.png] here", "see [image: /tmp/x.png] here"),
        ("message(content='hi')\nok", "ok"),
        ("  generate_image(prompt='cat')  \nok", "ok"),
        ("message(a) and more", "message(a) and more"),
        ("send_message(x)\nok", "send_message(x)\nok"),
        ("a\r\nb\rc", "a\nb\nc"),
        ("message(x)", ""),
    ],
)
def test_sanitize_assistant_text(text: str, expected: str) -> None:
    assert sanitize_assistant_text(text) == expected


def test_image_breadcrumb() -> None:
    assert image_breadcrumb("/tmp/a b.png") == "[image: /tmp/a b.png]"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("s", "s"),
        (
            [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}],
            "a b",
        ),
        ([{"type": "text", "text": 3}, "loose"], ""),
        (None, None),
        ({"type": "text"}, None),
    ],
)
def test_content_text(content: Any, expected: str | None) -> None:
    assert content_text(content) == expected


def test_preview_folds_whitespace_and_sanitises() -> None:
    message = {
        "role": "user",
        "content": "[Message Time: x]\n  hello\n\n\tworld  \n[image: /a.png]",
    }
    assert preview_text(message) == "hello world"


def test_preview_is_cut_with_an_ellipsis() -> None:
    text = "word " * 100
    out = preview_text({"role": "user", "content": text})
    assert len(out) <= PREVIEW_MAX_CHARS
    assert out.endswith("\u2026")
    # Cut to 119 characters, right-stripped, then the ellipsis.
    assert out == text[: PREVIEW_MAX_CHARS - 1].rstrip() + "\u2026"
    exact = "x" * PREVIEW_MAX_CHARS
    assert preview_text({"content": exact}) == exact


def test_preview_of_non_text_content_is_empty() -> None:
    assert preview_text({"role": "assistant", "content": None}) == ""
    assert preview_text({"role": "assistant"}) == ""
    assert preview_text({"role": "user", "content": [{"type": "image_url"}]}) == ""


def test_session_preview_prefers_the_first_user_message() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "first reply"},
        {"role": "user", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "the question"}]},
        {"role": "user", "content": "later"},
    ]
    assert session_preview(messages) == "the question"


def test_session_preview_falls_back_to_the_first_assistant_text() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "tool", "content": "tool out"},
        {"role": "assistant", "content": "message(x)"},
        {"role": "assistant", "content": "proactive hello"},
        {"role": "assistant", "content": "second"},
    ]
    assert session_preview(messages) == "proactive hello"
    assert session_preview([]) == ""


PREVIEW_CASES: list[list[dict[str, Any]]] = [
    # a user message whose text is only a local image breadcrumb has no display text: the
    # preview comes from the next user message, also on a store that keeps only candidates
    [
        {"role": "user", "content": "[image: /tmp/cat.png]"},
        {"role": "assistant", "content": "a cat"},
        {"role": "user", "content": "what breed?"},
    ],
    [{"role": "user", "content": "message(hi)"}, {"role": "user", "content": "real"}],
    [{"role": "system", "content": "s"}, {"role": "assistant", "content": "hello"}],
    [{"role": "user", "content": [{"type": "image_url"}]}, {"role": "user", "content": "x"}],
    [{"role": "tool", "content": "t"}],
]


@pytest.mark.parametrize("messages", PREVIEW_CASES)
def test_the_candidates_give_the_same_preview_as_the_whole_log(
    messages: list[dict[str, Any]],
) -> None:
    """PostgreSQL's catalog keeps only the candidates; the preview from them is the same."""
    store = MemoryStore()
    writer = store.session("k")
    for message in messages:
        writer.append_message(message["role"], message["content"])
    live = [event.message for event in writer.state.messages]
    candidates = preview_candidates(writer.state.messages)
    assert session_preview(candidates) == session_preview(live)
    assert list_sessions(store)[0].preview == session_preview(live)


def test_the_step_keeps_a_user_preview() -> None:
    preview, role = preview_step({"role": "user", "content": "first"}, "", NO_PREVIEW)
    assert (preview, role) == ("first", USER_PREVIEW)
    assert preview_step({"role": "user", "content": "second"}, preview, role) == (preview, role)
    assert not may_change("user", USER_PREVIEW)
    assert may_change("user", ASSISTANT_PREVIEW) and not may_change("assistant", ASSISTANT_PREVIEW)


_PIECES = [
    *"ab [](\n\r\t\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000",
    "message(",
    "generate_image(",
    "[image: /x]",
    "[Message Time: t]\n",
    ")",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_preview_text_equals_the_full_rule_with_or_without_brackets(text: str) -> None:
    """The bracket-free fast path folds whitespace exactly as sanitising then folding does."""
    full = re.sub(r"\s+", " ", sanitize_assistant_text(text)).strip()
    if len(full) > PREVIEW_MAX_CHARS:
        full = full[: PREVIEW_MAX_CHARS - 1].rstrip() + ELLIPSIS
    assert preview_text({"role": "user", "content": text}) == full

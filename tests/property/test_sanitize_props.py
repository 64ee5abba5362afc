"""``sanitize_assistant_text`` tries each pattern only where its literal start is; it must give
exactly what applying every pattern to every line gives (the rule as nanobot states it)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog.preview import sanitize_assistant_text

_TIME_PREFIX = re.compile(r"\A\[Message Time: [^\]]+\]\n?")
_LOCAL_IMAGE_LINE = re.compile(r"\[image: [/~][^\]]+\]\s*")
_CALL_ECHO_LINE = re.compile(r"\s*(?:message|generate_image)\([^)]*\)\s*")


def reference(text: str) -> str:
    text = _TIME_PREFIX.sub("", text, count=1)
    kept = [
        line
        for line in text.splitlines()
        if not _LOCAL_IMAGE_LINE.fullmatch(line) and not _CALL_ECHO_LINE.fullmatch(line)
    ]
    return "\n".join(kept).strip()


pieces = st.sampled_from(
    [
        "[Message Time: 2026-11-25 10:00]",
        "[Message Time: ]",
        "[image: /tmp/a.png]",
        "[image: ~/b.jpg]",
        "[image: rel.png]",
        "[image:",
        "message(",
        "message(x)",
        "generate_image(p)",
        "age(",
        ")",
        "]",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\r",
        "\x0b",
        "\x0c",
        "\x1c",
        "\x1d",
        "\x1e",
        "\x85",
        "\u2028",
        "\u2029",
        "[",
        "(",
        "age",
        "\u3000",
        "word",
        "東京",
    ]
)


@settings(max_examples=2_000, deadline=None)
@given(st.lists(pieces, max_size=14).map("".join))
def test_sanitising_equals_every_pattern_on_every_line(text: str) -> None:
    assert sanitize_assistant_text(text) == reference(text)


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_sanitising_any_text_equals_the_reference(text: str) -> None:
    assert sanitize_assistant_text(text) == reference(text)

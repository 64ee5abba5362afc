"""A realistic agent conversation for the benchmarks (seeded: the same bytes on every run).

Invariants:
- :func:`conversation` is deterministic for a given ``(n, seed)``: a fixed word corpus sliced at
  seeded offsets, fixed timestamps; nothing depends on the clock or on hash randomisation.
- The default 10,000-message conversation is turns of user / assistant with ``tool_calls`` /
  ``tool`` results / assistant reply; the median message is about 300 characters, about one
  message in eight is a 5-20 KB tool output, and the whole is about 15 MB as log lines.
- Every tool result answers a call declared by the assistant message before it, so histories
  computed from any window are legal conversations.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from functools import cache
from typing import Any

_WORD_TEXT = (
    "the agent session tool call result user assistant message history token budget window "
    "summary compaction consolidate file search web page query answer kyoto trip temple train "
    "ticket hotel booking price yen schedule morning evening weather forecast rain umbrella "
    "python function error traceback line module import install package version release test "
    "passes fails retry timeout network request response header status json field value list "
    "café naïve résumé 東京 京都 ramen über straße déjà vu — “quoted” ’s 42 3.14 2026 100% ok"  # noqa: RUF001
)
_WORDS = _WORD_TEXT.split()

_TOOLS = ("web_search", "read_file", "exec", "web_fetch", "list_dir", "edit_file")


@cache
def _corpus(seed: int) -> str:
    """About 400 KB of seeded words, sliced for message text."""
    rng = random.Random(seed * 7919 + 1)
    words = rng.choices(_WORDS, k=70_000)
    # Sentences and paragraph breaks, so sanitising and previews see real line structure.
    out: list[str] = []
    for i, word in enumerate(words):
        out.append(word)
        if i % 17 == 16:
            out.append(".\n" if i % 85 == 84 else ".")
    return " ".join(out)


def _text(rng: random.Random, corpus: str, size: int) -> str:
    start = rng.randrange(0, len(corpus) - size - 1)
    return corpus[start : start + size].strip() or "ok"


def _short_size(rng: random.Random) -> int:
    # Log-normal around 300 characters: most messages short, a few long.
    return max(12, min(4000, int(rng.lognormvariate(5.78, 0.6))))


def conversation(n: int = 10_000, seed: int = 1, *, big_tools: bool = True) -> list[dict[str, Any]]:
    """Return ``n`` message dicts of a multi-turn agent conversation with tool calls.

    ``big_tools=False`` keeps every tool output short (the many-sessions workloads, where 10,000
    sessions of 15 MB conversations would not fit a benchmark run).
    """
    rng = random.Random(seed)
    corpus = _corpus(seed)
    t0 = datetime(2026, 11, 25, 9, 0, 0)
    out: list[dict[str, Any]] = []
    call_no = 0
    turn = 0
    while len(out) < n:
        turn += 1
        ts = t0 + timedelta(seconds=37 * len(out))
        user: dict[str, Any] = {
            "role": "user",
            "content": _text(rng, corpus, _short_size(rng)),
            "timestamp": ts.isoformat(),
        }
        if turn % 29 == 0:
            user["media"] = [f"/tmp/media/img_{turn}.png"]
        out.append(user)
        for _ in range(rng.choice((0, 1, 1, 1, 2, 2, 3))):
            if len(out) >= n:
                break
            call_no += 1
            call_id = f"call_{call_no:06d}"
            tool = rng.choice(_TOOLS)
            args = {"query": _text(rng, corpus, rng.randint(20, 120))}
            call: dict[str, Any] = {
                "role": "assistant",
                "content": None if rng.random() < 0.6 else _text(rng, corpus, rng.randint(40, 200)),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool, "arguments": _json_args(args)},
                    }
                ],
                "timestamp": (ts + timedelta(seconds=2)).isoformat(),
            }
            if rng.random() < 0.2:
                call["reasoning_content"] = _text(rng, corpus, rng.randint(100, 600))
            out.append(call)
            if len(out) >= n:
                break
            big = big_tools and rng.random() < 0.27
            size = rng.randint(5_000, 20_000) if big else _short_size(rng) * 2
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": tool,
                    "content": _text(rng, corpus, size),
                    "timestamp": (ts + timedelta(seconds=3)).isoformat(),
                }
            )
        if len(out) >= n:
            break
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": _text(rng, corpus, _short_size(rng)),
            "timestamp": (ts + timedelta(seconds=5)).isoformat(),
        }
        if turn % 41 == 0:
            reply["_channel_delivery"] = True
        out.append(reply)
    return out[:n]


def _json_args(args: dict[str, str]) -> str:
    import json

    return json.dumps(args, ensure_ascii=False)


def describe(messages: list[dict[str, Any]]) -> dict[str, float]:
    """Size figures of a conversation: count, median and total characters, big outputs."""
    import json
    import statistics

    sizes = [len(json.dumps(m, ensure_ascii=False)) for m in messages]
    contents = [len(m["content"]) if isinstance(m.get("content"), str) else 0 for m in messages]
    return {
        "messages": len(messages),
        "median_content_chars": statistics.median(contents),
        "median_json_chars": statistics.median(sizes),
        "total_mb": sum(sizes) / 1e6,
        "big_tool_outputs": sum(1 for c in contents if c >= 5_000),
    }

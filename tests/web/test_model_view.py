"""The model's view: each live message given to the model or not, and why (pure)."""

from __future__ import annotations

from sessionledger import projections, replay
from sessionledger.eventlog import MemoryStore


def test_rows_say_why_a_message_is_outside() -> None:
    store = MemoryStore()
    s = store.session("k")
    for i in range(6):
        s.append_message("user", f"question {i} " + "x" * 40)
        s.append_message("assistant", f"answer {i} " + "y" * 40)
    s.append_message("user", "/help", _command=True)
    s.append_message("user", "last question")
    s.mark_consolidated(2)
    state = s.state
    view = replay.model_view(state, max_messages=8, max_tokens=60)
    given = projections.history_with_tokens(state, 8, 60)
    assert view.entries == len(given) and view.used_tokens == sum(t for _, t in given)
    reasons = {row.seq: row.reason for row in view.rows}
    included = [row.seq for row in view.rows if row.included]
    assert [m["content"] for m, _ in given] == [
        r.entry["content"] for r in view.rows if r.included and r.entry
    ]
    assert reasons[1] == reasons[2] == "consolidated"
    assert "window" in reasons.values() and "budget" in reasons.values()
    assert reasons[13] == "skipped"  # the _command message
    assert included[-1] == 14


def test_context_limits_the_rows_listed() -> None:
    store = MemoryStore()
    s = store.session("k")
    for i in range(50):
        s.append_message("user", f"q{i}")
    view = replay.model_view(s.state, max_messages=5, context=3)
    assert view.hidden == 42 and len(view.rows) == 8
    assert [r.included for r in view.rows] == [False] * 3 + [True] * 5

"""The PostgreSQL writer's undo: events folded before a commit that fails leave no trace."""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger.eventlog import MemoryStore, SessionState
from sessionledger.eventlog._pg_io import Undo
from sessionledger.eventlog._pg_writer import _tag

pytest.importorskip("psycopg")


def _state_after(writes: list[tuple[str, Any]]) -> tuple[SessionState, list[Any]]:
    """A session with a little history, and the events ``writes`` add after it."""
    store = MemoryStore()
    w = store.session("u:1", metadata={"title": "t"})
    w.append_message("user", "one", id="a")
    w.append_message("assistant", "two")
    w.compact("summary", upto=1)
    before = store.state("u:1").copy()
    for name, args in writes:
        getattr(w, name)(*args)
    events = list(store.load("u:1", snapshot=False).events)[before.seq :]
    return before, events


@pytest.mark.parametrize(
    "writes",
    [
        [("append_message", ("user", "three"))],
        [("append_message", ("user", "three")), ("append_message", ("assistant", "four"))],
        [
            ("update_metadata", ({"title": "u", "n": [1]}, ["title"])),
            ("append_message", ("user", "x")),
        ],
        [
            ("append_message", ("user", "x")),
            ("trim", (2, "truncate")),
            ("set_lifecycle", ("idle",)),
        ],
        [("append_message", ("user", "x")), ("clear", ()), ("append_message", ("user", "y"))],
        [("mark_consolidated", (1,)), ("retract", (1,))],
    ],
)
def test_undo_puts_the_state_back_exactly(writes: list[tuple[str, Any]]) -> None:
    from sessionledger.eventlog import apply

    before, events = _state_after(writes)
    state = before.copy()
    undo = Undo(state)
    for event in events:
        undo.before(state, _tag(event), event.id)
        apply(state, event)
    assert state != before
    undo.undo(state)
    assert state == before

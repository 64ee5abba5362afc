"""A sample session with every kind of event, for the replay tests (not a test module)."""

from __future__ import annotations

from sessionledger.eventlog import BaseStore

KEY = "telegram:42"


def build_sample(store: BaseStore, key: str = KEY) -> None:
    """Write a session that uses every event type the writer offers, then close it."""
    with store.session(key, metadata={"agent": "demo"}) as s:
        s.append_message("user", "Plan a trip to Kyoto", media=["/tmp/map.png"])
        s.append_message(
            "assistant",
            None,
            tool_calls=[{"id": "call_1", "type": "function", "function": {"name": "web_search"}}],
        )
        s.append_message(
            "tool", "Kyoto: temples, gardens", tool_call_id="call_1", name="web_search"
        )
        s.append_message("assistant", "Here is a plan: day 1 temples, day 2 gardens.")
        s.update_metadata(set={"title": "Kyoto trip", "tags": ["travel"]})
        s.mark_consolidated(2)
        s.append_message("user", "Add a day in Nara")
        s.append_message("assistant", "Day 3: Nara deer park.")
        s.compact("User plans Kyoto; 3 days.", upto=4, tokens_before=900, tokens_after=120)
        s.update_metadata(set={"title": "Kyoto + Nara"}, unset=["tags"])
        s.append_message("user", "partial stream")
        s.retract(1)
        s.trim(2, "retain_suffix")
        s.set_lifecycle("idle")
        s.append_message("user", "Back again")
        s.set_lifecycle("archived", "archive")

"""One real value of every public result type (shared by the portable and FastAPI tests)."""

from __future__ import annotations

from typing import Any

from sessionledger import projections, replay
from sessionledger.eventlog import (
    CleanupReport,
    Compaction,
    CompactionResult,
    EndedConversation,
    MemoryStore,
    UsageTotals,
)


def results() -> list[tuple[type, Any]]:
    """One real value of every public result type, made by the library itself."""
    store = MemoryStore()
    s = store.session("agent:telegram:42")
    s.append_message("user", "Plan a trip to Kyoto")
    s.append_message("assistant", "Early April.")
    s.update_metadata(set={"title": "Kyoto", "tags": ["travel"]})
    s.record_usage(model="m1", prompt_tokens=10, completion_tokens=5)
    done = s.compact("A Kyoto plan.", upto=1, tokens_before=90, tokens_after=10)
    store.new_session("agent:telegram:42")
    state = store.state("agent:telegram:42")
    assert state.compaction is None
    compaction = replay.state_at(store, "agent:telegram:42", seq=done.seq).compaction
    assert compaction is not None
    entries = replay.timeline(store, "agent:telegram:42")
    change = next(e.compaction for e in entries if e.compaction is not None)
    verify = replay.verify(store)
    recover = replay.recover(store)
    out: list[tuple[type, Any]] = [
        (projections.SessionInfo, projections.list_sessions(store)[0]),
        (projections.StoreStats, projections.store_stats(store, budget=100)),
        (projections.StoreUsage, projections.store_usage(store)),
        (projections.SessionID, projections.SessionID.from_key("agent:telegram:42")),
        (replay.TimelineEntry, entries[0]),
        (replay.CompactionChange, change),
        (replay.VerifyReport, verify),
        (replay.SessionVerify, verify.sessions[0]),
        (replay.RecoverReport, recover),
        (replay.SessionRecover, recover.sessions[0]),
        (CompactionResult, done),
        (Compaction, compaction),
        (EndedConversation, state.ended[0]),
        (UsageTotals, state.usage),
        (CleanupReport, CleanupReport(trashed=["x"])),
        (projections.ConversationInfo, projections.list_conversations(store)[-1]),
        (projections.SearchHit, projections.search(store, "Kyoto")[0]),
    ]
    return out

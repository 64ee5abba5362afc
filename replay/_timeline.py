"""The audit views: a timeline of what each event changed, and a diff between two points.

Both replay the log with the writer's fold, so they can only describe what the fold does.
A timeline entry records the change against the state just before the event: messages added
or withdrawn (by the seq of their ``message`` event), metadata keys set (with the values they
replaced) and removed, consolidation cursor moves, compaction ranges and token savings, trims,
lifecycle changes. Events of other types (e.g. from a newer writer) appear with their fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from sessionledger.eventlog import (
    BaseStore,
    Compacted,
    Compaction,
    Consolidated,
    ConversationResumed,
    Event,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    SessionState,
    UnknownEvent,
    UsageRecorded,
    apply,
    fold,
    portable,
)
from sessionledger.projections import describe_item, sdk_item

from ._errors import PointNotFoundError
from ._timetravel import _aware
from ._views import where

_MISSING: Any = object()
_PREVIEW = 60


@portable()
class CompactionChange(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction: which message seqs its summary stands for, and the tokens it saved."""

    upto: int
    first_seq: int | None
    last_seq: int | None
    tokens_before: int
    tokens_after: int
    saved: int
    removed: int
    kept: int
    previous_upto: int | None


@portable()
class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One event and what it changed."""

    seq: int
    ts: datetime
    type: str
    id: str
    summary: str
    role: str | None = None
    added: list[int] = []
    withdrawn: list[int] = []
    metadata_set: dict[str, Any] = {}
    metadata_was: dict[str, Any] = {}
    metadata_unset: list[str] = []
    consolidated: tuple[int, int] | None = None
    compaction: CompactionChange | None = None
    lifecycle: tuple[str, str] | None = None
    reason: str | None = None
    #: Live messages and their tokens after the event.
    live_messages: int = 0
    live_tokens: int = 0


class StateDiff(msgspec.Struct, frozen=True, kw_only=True):
    """What changed between two points of one session (``a`` to ``b``)."""

    key: str
    seq_a: int
    seq_b: int
    head_a: str
    head_b: str
    added: list[MessageAppended] = []
    withdrawn: list[MessageAppended] = []
    metadata_set: dict[str, Any] = {}
    metadata_was: dict[str, Any] = {}
    metadata_unset: list[str] = []
    last_consolidated: tuple[int, int] = (0, 0)
    compaction: tuple[Compaction | None, Compaction | None] = (None, None)
    lifecycle: tuple[str, str] = ("active", "active")
    live_tokens: tuple[int, int] = (0, 0)

    @property
    def changed(self) -> bool:
        """True when the two states differ in anything the diff tracks."""
        return bool(
            self.added
            or self.withdrawn
            or self.metadata_set
            or self.metadata_unset
            or self.last_consolidated[0] != self.last_consolidated[1]
            or self.compaction[0] != self.compaction[1]
            or self.lifecycle[0] != self.lifecycle[1]
        )


def _preview(message: dict[str, Any]) -> str:
    item = sdk_item(message)
    if item is not None:
        return describe_item(item, _PREVIEW)
    content = message.get("content")
    text = content if isinstance(content, str) else "" if content is None else str(content)
    text = " ".join(text.split())
    if len(text) > _PREVIEW:
        text = text[: _PREVIEW - 1] + "\u2026"
    extra = " (tool calls)" if message.get("tool_calls") else ""
    return f"{text!r}{extra}"


def _tag(event: Event) -> str:
    if isinstance(event, UnknownEvent):
        return event.type
    tag: str = event.__struct_config__.tag  # type: ignore[assignment]
    return tag


def _fields(event: Event) -> dict[str, Any]:
    if isinstance(event, UnknownEvent):
        return {k: v for k, v in event.raw.items() if k not in ("type", "seq", "ts", "id")}
    out = msgspec.structs.asdict(event)
    for name in ("seq", "ts", "id", "h"):
        out.pop(name, None)
    return out


def describe_event(state: SessionState, event: Event) -> TimelineEntry:
    """Fold ``event`` into ``state`` (in place) and say what it changed."""
    extra: dict[str, Any] = {}
    summary = ""
    messages_before: list[int] | None = None
    match event:
        case MessageAppended():
            role = event.message.get("role")
            extra["role"] = role if isinstance(role, str) else None
            extra["added"] = [event.seq]
            summary = f"{role} message {_preview(event.message)} ({event.tokens} tokens)"
        case MetadataChanged():
            was = {k: state.metadata[k] for k in event.set if k in state.metadata}
            unset = [k for k in event.unset if k in state.metadata or k in event.set]
            extra.update(metadata_set=dict(event.set), metadata_was=was, metadata_unset=unset)
            parts = [f"set {', '.join(sorted(event.set))}"] if event.set else []
            if unset:
                parts.append(f"removed {', '.join(unset)}")
            summary = "metadata: " + ("; ".join(parts) or "no change")
        case Consolidated():
            before = state.last_consolidated
        case Compacted():
            prev = state.compaction.upto if state.compaction is not None else None
            upto = event.upto if 0 <= event.upto <= len(state.messages) else 0
            covered = state.messages[:upto]
            extra["compaction"] = CompactionChange(
                upto=upto,
                first_seq=covered[0].seq if covered else None,
                last_seq=covered[-1].seq if covered else None,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                saved=event.tokens_before - event.tokens_after,
                removed=event.removed,
                kept=event.kept,
                previous_upto=prev,
            )
            span = f"seq {covered[0].seq}..{covered[-1].seq}" if covered else "nothing"
            summary = (
                f"compacted: summary stands for {upto} message(s) ({span}); tokens "
                f"{event.tokens_before} -> {event.tokens_after} "
                f"(saved {event.tokens_before - event.tokens_after})"
            )
        case LifecycleChanged():
            before_state = state.lifecycle
        case UsageRecorded():
            total = event.total_tokens or event.prompt_tokens + event.completion_tokens
            summary = (
                f"usage: {event.model or 'model ?'} {event.prompt_tokens} prompt + "
                f"{event.completion_tokens} completion = {total} tokens"
                + (f" ({event.cached_tokens} cached)" if event.cached_tokens else "")
            )
        case ConversationResumed():
            by = f" by {event.by}" if event.by else ""
            summary = (
                f"resumed: the conversation of seq {event.start_seq}..{event.end_seq}{by} "
                f"({event.messages} messages follow)"
            )
        case _:
            pass
    if not isinstance(event, MessageAppended | MetadataChanged | Compacted):
        messages_before = [m.seq for m in state.messages]
    apply(state, event)
    match event:
        case Consolidated():
            extra["consolidated"] = (before, state.last_consolidated)
            summary = f"consolidated: cursor {before} -> {state.last_consolidated}"
        case LifecycleChanged():
            extra["lifecycle"] = (before_state, state.lifecycle)
            extra["reason"] = event.reason
            why = f" ({event.reason})" if event.reason else ""
            summary = f"lifecycle: {before_state} -> {state.lifecycle}{why}"
        case _:
            pass
    if messages_before is not None:
        live = {m.seq for m in state.messages}
        withdrawn = [s for s in messages_before if s not in live]
        if withdrawn:
            extra["withdrawn"] = withdrawn
        if not summary:
            fields = _fields(event)
            reason = fields.get("reason")
            if isinstance(reason, str):
                extra["reason"] = reason
            detail = ", ".join(f"{k}={v!r}" for k, v in fields.items() if v not in ({}, [], None))
            summary = f"{_tag(event)}" + (f": {detail}" if detail else "")
            if withdrawn:
                summary += (
                    f"; withdrew {len(withdrawn)} message(s) (seq {withdrawn[0]}..{withdrawn[-1]})"
                )
    return TimelineEntry(
        seq=event.seq,
        ts=event.ts,
        type=_tag(event),
        id=event.id,
        summary=summary,
        live_messages=len(state.messages),
        live_tokens=state.live_tokens,
        **extra,
    )


def _in_range(event: Event, since: int | datetime | None, until: int | datetime | None) -> int:
    """-1 before the range, 0 inside, 1 after."""
    if since is not None:
        if isinstance(since, datetime):
            if event.ts < _aware(since):
                return -1
        elif event.seq < since:
            return -1
    if until is not None:
        if isinstance(until, datetime):
            if event.ts > _aware(until):
                return 1
        elif event.seq > until:
            return 1
    return 0


def timeline(
    store: BaseStore,
    key: str,
    since: int | datetime | None = None,
    until: int | datetime | None = None,
) -> list[TimelineEntry]:
    """Every event of ``key`` (seq or time within ``since``..``until``, inclusive) and its change.

    Raises:
        SessionNotFoundError: no session ``key``.
        CorruptLogError: a line in the middle of the log is bad (run verify or repair).
    """
    loaded = store.load(key)
    state = fold(loaded.header, ())
    out: list[TimelineEntry] = []
    for event in loaded.events:
        where_ = _in_range(event, since, until)
        if where_ > 0:
            break
        if where_ < 0:
            apply(state, event)
            continue
        out.append(describe_event(state, event))
    return out


def diff_states(a: SessionState, b: SessionState) -> StateDiff:
    """What changed from state ``a`` to state ``b`` of the same session (pure)."""
    in_a = {m.seq for m in a.messages}
    in_b = {m.seq for m in b.messages}
    changed = {k: v for k, v in b.metadata.items() if a.metadata.get(k, _MISSING) != v}
    return StateDiff(
        key=b.key,
        seq_a=a.seq,
        seq_b=b.seq,
        head_a=a.head,
        head_b=b.head,
        added=[m for m in b.messages if m.seq not in in_a],
        withdrawn=[m for m in a.messages if m.seq not in in_b],
        metadata_set=changed,
        metadata_was={k: a.metadata[k] for k in changed if k in a.metadata},
        metadata_unset=[k for k in a.metadata if k not in b.metadata],
        last_consolidated=(a.last_consolidated, b.last_consolidated),
        compaction=(a.compaction, b.compaction),
        lifecycle=(a.lifecycle, b.lifecycle),
        live_tokens=(a.live_tokens, b.live_tokens),
    )


def diff(store: BaseStore, key: str, seq_a: int, seq_b: int) -> StateDiff:
    """What changed in session ``key`` between seq ``seq_a`` and seq ``seq_b``.

    Raises:
        PointNotFoundError: a seq is outside the log.
    """
    loaded = store.load(key)
    last = loaded.state.seq
    base = loaded.header.seq
    for s in (seq_a, seq_b):
        if isinstance(s, bool) or not isinstance(s, int) or not base <= s <= last:
            raise PointNotFoundError(
                where(store, key), f"seq {s!r} is outside the log (seq {base}..{last})"
            )
    lo, hi = sorted((seq_a, seq_b))
    state = fold(loaded.header, ())
    events = loaded.events
    i = 0
    while i < len(events) and events[i].seq <= lo:
        apply(state, events[i])
        i += 1
    first = state.copy()
    while i < len(events) and events[i].seq <= hi:
        apply(state, events[i])
        i += 1
    a, b = (first, state) if seq_a <= seq_b else (state, first)
    return diff_states(a, b)

"""The fold: ``apply(state, event) -> state``, the one place state transitions live.

Rules (the seeds' semantics):
- ``message`` appends a live message and adds its stored token count.
- ``metadata`` sets keys, then removes keys.
- ``consolidated`` moves ``last_consolidated``; an offset outside ``0..len(messages)`` is clamped
  to 0, so a bad cursor never hides history.
- ``compacted`` records the latest summary, standing for the first ``upto`` live messages.
- ``trimmed`` drops the oldest N live messages and shifts ``last_consolidated`` and the
  compaction boundary down by N (never below 0).
- ``cleared`` drops every live message (but those it keeps), resets ``last_consolidated`` to 0,
  forgets the compaction and removes ``_last_summary`` from metadata; with a reason (``new``,
  ``reset``) it first records the conversation that ended in ``state.ended`` (its title, live
  messages and tokens, and its preview candidates), then removes the metadata keys it unsets.
- ``retracted`` withdraws the newest N live messages; cursors are clamped to what is left.
- ``lifecycle`` sets the lifecycle state and end reason.
- ``resumed`` marks that the current conversation resumes an ended one (``resumed_from``); the
  resumed messages follow as their own ``message`` events.
- ``usage`` adds a provider's reported token usage to the session's totals (and per model).
- ``erased`` leaves every live message as a placeholder (its envelope, no content), empties
  metadata, the compaction summary and the titles and previews of ended conversations: the
  keys of everything before it were destroyed.
- ``redacted`` leaves the live message at its ``target`` seq as a placeholder, and drops the
  preview of an ended conversation when the message was one of its preview's messages (or, for
  one recorded without their seqs, when the conversation held it).
- Unknown event types from a newer writer only advance seq, time and head.
Every event advances ``seq``, ``updated_at``, ``head`` and records its id.

``apply`` updates ``state`` in place and returns it (folding 10,000 events must not copy 10,000
lists); use :meth:`SessionState.copy` to keep an earlier state. It does no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from datetime import datetime
from typing import Any, assert_never

import msgspec

from ._codec import ZERO_HASH, Decoded
from ._events import (
    Cleared,
    Compacted,
    Consolidated,
    ConversationResumed,
    Erased,
    Event,
    Header,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    Redacted,
    Retracted,
    Trimmed,
    UnknownEvent,
    UsageRecorded,
)
from ._idindex import IdIndex
from ._msgindex import MessageList
from ._portable import portable
from ._preview import preview_candidates_with_seqs


@portable("tokens_saved")
class Compaction(msgspec.Struct, kw_only=True):
    """The latest compaction: ``summary`` stands for the first ``upto`` live messages."""

    seq: int
    summary: str
    upto: int
    tokens_before: int = 0
    tokens_after: int = 0
    removed: int = 0
    kept: int = 0
    ts: datetime | None = None
    duration: float = 0.0
    model: str | None = None

    @property
    def tokens_saved(self) -> int:
        """Tokens the summary saved (before minus after)."""
        return self.tokens_before - self.tokens_after

    def recorded(self, *, seq: int, ts: datetime, id: str) -> Compacted:
        """A ``Compacted`` event at ``seq`` that records this compaction again (a fork, a
        resumed conversation): folded after the same messages, it gives an equal compaction."""
        return Compacted(
            seq=seq,
            ts=ts,
            id=id,
            summary=self.summary,
            upto=self.upto,
            tokens_before=self.tokens_before,
            tokens_after=self.tokens_after,
            removed=self.removed,
            kept=self.kept,
            duration=self.duration,
            model=self.model,
        )


@portable()
class UsageTotals(msgspec.Struct, kw_only=True):
    """Provider-reported token usage added up over LLM calls."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0

    def add(self, event: UsageRecorded) -> None:
        """Add one call's usage."""
        self.calls += 1
        self.prompt_tokens += event.prompt_tokens
        self.completion_tokens += event.completion_tokens
        self.cached_tokens += event.cached_tokens
        self.total_tokens += event.total_tokens or event.prompt_tokens + event.completion_tokens


@portable()
class EndedConversation(msgspec.Struct, kw_only=True):
    """A conversation that ended inside the log (``/new`` or a reset); ``end_seq`` is its clear.

    ``start_seq`` is the seq of the clear that began it (0: the session's start).
    """

    start_seq: int
    end_seq: int
    reason: str
    messages: int
    ended_at: datetime
    #: Its metadata title when it ended, its live tokens, and the leading user/assistant
    #: messages the preview is chosen from (see ``preview_candidates``).
    title: str = ""
    tokens: int = 0
    preview: list[dict[str, Any]] = []
    #: The seq of each ``preview`` message, in the same order (empty when recorded by a
    #: version from before this field: then it is not known which messages they were).
    preview_seqs: list[int] = []
    #: The ``start_seq`` of the conversation it resumed, if it was a resumed one.
    resumed_from: int | None = None


class SessionState(msgspec.Struct, kw_only=True):
    """A session folded from its log: what every projection reads."""

    key: str
    id: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any] = {}
    #: Live messages, oldest first, as their events (message dict, tokens, seq, ts); a list
    #: opened from an index snapshot reads their bodies from the log when they are used.
    messages: MessageList = msgspec.field(default_factory=MessageList)
    last_consolidated: int = 0
    compaction: Compaction | None = None
    lifecycle: str = "active"
    end_reason: str | None = None
    #: The last event's seq and hash (the header's while there are no events).
    seq: int = 0
    head: str = ZERO_HASH
    #: Stored token counts of the live messages.
    live_tokens: int = 0
    #: Messages and tokens ever appended (trims and clears do not lower these).
    total_messages: int = 0
    total_tokens: int = 0
    unknown_events: int = 0
    #: Provider-reported usage, in total and per model name.
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    usage_by_model: dict[str, UsageTotals] = {}
    #: Conversations ended by ``/new`` or a reset, oldest first, and where the current began.
    ended: list[EndedConversation] = []
    conversation_start: int = 0
    #: The ``start_seq`` of the ended conversation the current one resumed (None: not resumed).
    resumed_from: int | None = None
    #: Whether the session's content is sealed in its log (an encrypted store wrote it).
    sealed: bool = False
    #: The seq of the last erasure (0: none) and the seqs of redacted messages, ascending.
    erased_upto: int = 0
    redacted: list[int] = []
    #: Event id -> seq, for idempotent retries (a snapshot's ids stay on disk until needed).
    ids: IdIndex = msgspec.field(default_factory=IdIndex)

    def __post_init__(self) -> None:
        # Plain containers given by a caller become the list and index the fold works on.
        if not isinstance(self.messages, MessageList):
            self.messages = MessageList(self.messages)
        if not isinstance(self.ids, IdIndex):
            self.ids = IdIndex(self.ids)

    def copy(self) -> SessionState:
        """Return an independent copy (events are immutable and shared)."""
        return msgspec.structs.replace(
            self,
            metadata=dict(self.metadata),
            messages=self.messages.copy(),
            usage=msgspec.structs.replace(self.usage),
            usage_by_model={k: msgspec.structs.replace(v) for k, v in self.usage_by_model.items()},
            ended=list(self.ended),
            redacted=list(self.redacted),
            ids=self.ids.copy(),
        )

    @property
    def message_dicts(self) -> list[dict[str, Any]]:
        """The live messages as the dicts they were appended as."""
        return [m.message for m in self.messages]


def state_enc_hook(obj: object) -> object:
    """An ``enc_hook`` for msgspec that encodes a state's messages as a list and its ids as a
    dict: ``msgspec.json.encode(state, enc_hook=state_enc_hook)``."""
    if isinstance(obj, MessageList):
        return list(obj)
    if isinstance(obj, IdIndex):
        return dict(obj.items())
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def initial_state(header: Header) -> SessionState:
    """The state of a session whose log holds only ``header``."""
    return SessionState(
        key=header.key,
        id=header.id,
        created_at=header.created_at,
        updated_at=header.created_at,
        metadata=dict(header.metadata),
        seq=header.seq,
        head=header.h or ZERO_HASH,
        sealed=bool(header.sealing),
    )


def _drop_front(state: SessionState, count: int) -> None:
    count = max(0, min(count, len(state.messages)))
    if not count:
        return
    state.live_tokens -= state.messages.drop_front(count)
    state.last_consolidated = max(0, state.last_consolidated - count)
    if state.compaction is not None:
        upto = max(0, state.compaction.upto - count)
        state.compaction = msgspec.structs.replace(state.compaction, upto=upto)


def _drop_back(state: SessionState, count: int) -> None:
    count = max(0, min(count, len(state.messages)))
    if not count:
        return
    state.live_tokens -= state.messages.drop_back(count)
    live = len(state.messages)
    state.last_consolidated = min(state.last_consolidated, live)
    if state.compaction is not None and state.compaction.upto > live:
        state.compaction = msgspec.structs.replace(state.compaction, upto=live)


def _withhold(state: SessionState, seq: int) -> None:
    messages = state.messages
    i = bisect.bisect_left(messages, seq, key=lambda m: m.seq)
    if i < len(messages) and messages[i].seq == seq:
        messages[i] = messages[i].withheld("redacted")
    if seq not in state.redacted:
        bisect.insort(state.redacted, seq)


def apply(state: SessionState, event: Event) -> SessionState:
    """Fold one event into ``state`` (in place) and return it."""
    match event:
        case MessageAppended():
            state.messages.append(event)
            state.live_tokens += event.tokens
            state.total_messages += 1
            state.total_tokens += event.tokens
        case MetadataChanged():
            state.metadata.update(event.set)
            for name in event.unset:
                state.metadata.pop(name, None)
        case Consolidated():
            upto = event.upto
            state.last_consolidated = upto if 0 <= upto <= len(state.messages) else 0
        case Compacted():
            upto = event.upto if 0 <= event.upto <= len(state.messages) else 0
            state.compaction = Compaction(
                seq=event.seq,
                summary=event.summary,
                upto=upto,
                tokens_before=event.tokens_before,
                tokens_after=event.tokens_after,
                removed=event.removed,
                kept=event.kept,
                ts=event.ts,
                duration=event.duration,
                model=event.model,
            )
        case Trimmed():
            _drop_front(state, event.count)
        case Cleared():
            if event.reason is not None:
                title = state.metadata.get("title")
                preview, preview_seqs = preview_candidates_with_seqs(state.messages)
                state.ended.append(
                    EndedConversation(
                        start_seq=state.conversation_start,
                        end_seq=event.seq,
                        reason=event.reason,
                        messages=len(state.messages),
                        ended_at=event.ts,
                        title=title if isinstance(title, str) else "",
                        tokens=state.live_tokens,
                        preview=preview,
                        preview_seqs=preview_seqs,
                        resumed_from=state.resumed_from,
                    )
                )
                state.conversation_start = event.seq
                state.resumed_from = None
            for name in event.unset:
                state.metadata.pop(name, None)
            state.live_tokens = state.messages.keep(event.keep)
            state.last_consolidated = 0
            state.compaction = None
            state.metadata.pop("_last_summary", None)
        case Retracted():
            _drop_back(state, event.count)
        case LifecycleChanged():
            state.lifecycle = event.state
            state.end_reason = event.reason
        case ConversationResumed():
            state.resumed_from = event.start_seq
        case UsageRecorded():
            state.usage.add(event)
            if event.model:
                state.usage_by_model.setdefault(event.model, UsageTotals()).add(event)
        case Erased():
            state.messages[:] = [m.withheld("erased") for m in state.messages]
            state.metadata.clear()
            if state.compaction is not None:
                state.compaction = msgspec.structs.replace(state.compaction, summary="")
            state.ended = [
                msgspec.structs.replace(e, title="", preview=[], preview_seqs=[])
                for e in state.ended
            ]
            state.erased_upto = event.seq
        case Redacted():
            _withhold(state, event.target)
            state.ended = [
                msgspec.structs.replace(e, preview=[], preview_seqs=[])
                if _previews(e, event.target)
                else e
                for e in state.ended
            ]
        case UnknownEvent():
            state.unknown_events += 1
        case _:
            assert_never(event)
    state.seq = event.seq
    state.updated_at = event.ts
    if event.h:
        state.head = event.h
    state.ids[event.id] = event.seq
    return state


def _previews(ended: EndedConversation, target: int) -> bool:
    """Whether redacting ``target`` takes away ``ended``'s preview: it is one of the preview's
    messages (not known for one recorded without their seqs: any message it held)."""
    if ended.preview_seqs:
        return target in ended.preview_seqs
    return bool(ended.preview) and ended.start_seq < target <= ended.end_seq


def fold(
    header: Header, events: Iterable[Event], state: SessionState | None = None
) -> SessionState:
    """Fold ``events`` onto ``state`` (or onto the initial state of ``header``)."""
    if state is None:
        state = initial_state(header)
    for event in events:
        apply(state, event)
    return state


def fold_decoded(
    header: Header, decoded: Decoded, state: SessionState | None = None
) -> SessionState:
    """Fold a decoded log's events onto ``state`` (or onto the initial state of ``header``).

    The state's head is the hash of the log's last line, not of its last event: a segment
    header is a link in the chain too, and the next line chains from it.
    """
    state = fold(header, decoded.events, state)
    state.head = decoded.head
    return state


def withheld(state: SessionState) -> bool:
    """Whether a session's state withholds content (erased, redacted): its snapshots keep
    the messages as the fold left them (format 2), not as offsets into the log lines, which
    still hold what the fold withheld. A sealed session with nothing withheld gets index
    snapshots: its lines open (or read back as withheld) when they are read. Such a state
    never settles, so its writer keeps no line with its events (see ``HELD_LINE``)."""
    return bool(state.erased_upto) or bool(state.redacted)

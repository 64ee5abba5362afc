"""One catalog row: built from a folded state, or advanced over appended log lines (pure).

Invariants:
- :func:`row_from_state` and :func:`advance` agree: advancing a row over lines gives the row of
  the state those lines fold to. Events that drop live messages other than all of them
  (``trimmed``, ``retracted``, ``cleared`` keeping some) cannot be followed without the
  messages, so :func:`advance` returns None and the caller folds the session instead.
- Lines are peeked, not fully decoded: one typed ``decode_lines`` call per chunk skips message
  contents; only the lines that can set the preview, and the rare non-message events, are
  decoded in full. Hashes are not recomputed here (``verify`` does that); the caller checks the
  first new line chains from the row's head, so a replaced log is never advanced.
- Summary: the latest compaction summary, else the metadata ``summary``. Title and tags come
  from metadata ``title`` (a str) and ``tags`` (a list; its str items).
- A ``cleared`` event with an end reason moves the current conversation (title, preview,
  counts) into ``ended`` as it was just before the clear, then applies the clear's ``unset``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import msgspec

from sessionledger.eventlog import (
    EVENT_TYPES,
    Cleared,
    Compacted,
    ConversationResumed,
    KnownEvent,
    LifecycleChanged,
    MetadataChanged,
    Retracted,
    SessionState,
    Trimmed,
    portable,
)
from sessionledger.eventlog.codec import chain_hash, split_hash
from sessionledger.eventlog.preview import (
    NO_PREVIEW,
    USER_PREVIEW,
    may_change,
    preview_step,
    preview_with_role,
)

from ._conversation_row import ConversationInfo, ended_rows


@portable()
class SessionInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One session as the catalog lists it."""

    key: str
    title: str = ""
    #: The first user message's text (else the first assistant's), at most 120 characters.
    preview: str = ""
    created_at: datetime
    updated_at: datetime
    #: Live messages and their stored token counts.
    messages: int = 0
    tokens: int = 0
    #: Lifecycle state: active, idle, compacting, suspended, archived.
    state: str = "active"
    tags: tuple[str, ...] = ()
    summary: str = ""
    #: The last event's seq and chain hash.
    seq: int = 0
    head: str = ""
    #: Where the current conversation began (0: the session's start; else its clear's seq),
    #: and the ``start_seq`` of the ended conversation it resumed, if any.
    conversation_start: int = 0
    resumed_from: int | None = None
    #: How many conversations ended in this session's log (``/new``, reset).
    ended: int = 0
    #: The session's content is sealed (an encrypted store): the stored catalog keeps no title,
    #: preview, summary or tags of it; a listing by a store with the keys opens them (see
    #: ``_sealed_rows``), one without lists them empty.
    sealed: bool = False


class Row(msgspec.Struct, array_like=True, gc=False):
    """A catalog row with what advancing it needs (stored; never shown to callers)."""

    info: SessionInfo
    #: Bytes of the log read so far (just past the last complete line).
    offset: int
    preview_role: int = NO_PREVIEW
    meta_summary: str | None = None
    compaction_summary: str | None = None
    #: The conversations that ended in the log, oldest first (kept beside the rows, so a
    #: listing of sessions never decodes them).
    ended: tuple[ConversationInfo, ...] = ()


class _MessagePeek(msgspec.Struct):
    role: Any = None


class _Peek(msgspec.Struct):
    type: str = ""
    seq: int = -1
    ts: datetime | None = None
    tokens: int = 0
    message: msgspec.Raw = msgspec.Raw()


_peek_lines = msgspec.json.Decoder(_Peek).decode_lines
_peek_role = msgspec.json.Decoder(_MessagePeek).decode
_decode_dict = msgspec.json.Decoder(dict[str, Any]).decode
_decode_event: msgspec.json.Decoder[KnownEvent] = msgspec.json.Decoder(KnownEvent)
_KNOWN_TAGS: Final = frozenset(t.__struct_config__.tag for t in EVENT_TYPES)


def last_hash(data: bytes) -> str | None:
    """The hash field of the last complete line of ``data`` (None: no complete line)."""
    end = data.rfind(b"\n")
    if end < 0:
        return None
    parts = split_hash(data[data.rfind(b"\n", 0, end) + 1 : end])
    return None if parts is None else parts[1]


def chains_from(data: bytes, prev_h: str, key: bytes) -> bool:
    """Whether the first complete line of ``data`` chains from ``prev_h`` (hash recomputed)."""
    end = data.find(b"\n")
    if end < 0:
        return True
    parts = split_hash(data[:end])
    return parts is not None and chain_hash(prev_h, parts[0], key) == parts[1]


def _tags(value: object) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(item for item in value if isinstance(item, str))
    return ()


#: What a row reads from metadata: the title, the tags and the metadata summary.
_Described = tuple[str, tuple[str, ...], str | None]
_UNDESCRIBED: Final[_Described] = ("", (), None)


def _described(
    meta: Mapping[str, Any], before: _Described = _UNDESCRIBED, unset: Iterable[str] = ()
) -> _Described:
    """Title, tags and summary as the catalog reads them from metadata (the one place).

    Keys ``meta`` has replace ``before``'s (``title`` and ``summary`` count only as a str,
    ``tags`` only its str items); then the ``unset`` keys are cleared, as the fold does.
    """
    title, tags, summary = before
    if "title" in meta:
        value = meta["title"]
        title = value if isinstance(value, str) else ""
    if "tags" in meta:
        tags = _tags(meta["tags"])
    if "summary" in meta:
        value = meta["summary"]
        summary = value if isinstance(value, str) else None
    for name in unset:
        if name == "title":
            title = ""
        elif name == "tags":
            tags = ()
        elif name == "summary":
            summary = None
    return title, tags, summary


def _summary(row_meta: str | None, compaction: str | None) -> str:
    if compaction is not None:
        return compaction
    return row_meta or ""


def _sealed_row(state: SessionState, offset: int) -> Row:
    """A sealed session's row as the catalog stores it: its envelope only (counts, times,
    lifecycle, conversations), no title, preview, summary or tags, opened or not."""
    info = SessionInfo(
        key=state.key,
        created_at=state.created_at,
        updated_at=state.updated_at,
        messages=len(state.messages),
        tokens=state.live_tokens,
        state=state.lifecycle,
        seq=state.seq,
        head=state.head,
        conversation_start=state.conversation_start,
        resumed_from=state.resumed_from,
        ended=len(state.ended),
        sealed=True,
    )
    ended = ended_rows(state.key, state.created_at, state.ended, sealed=True)
    return Row(info, offset, ended=ended)


def row_from_state(state: SessionState, offset: int, *, opened: bool = False) -> Row:
    """The row of a folded session whose log was read up to byte ``offset``.

    A sealed session's row keeps only its envelope, unless ``opened`` (its state was opened
    with the keys, and the row is for a listing in memory, never stored).
    """
    if state.sealed and not opened:
        return _sealed_row(state, offset)
    title, tags, meta_summary = _described(state.metadata)
    compaction = state.compaction.summary if state.compaction is not None else None
    preview, role = preview_with_role(event.message for event in state.messages)
    info = SessionInfo(
        key=state.key,
        title=title,
        preview=preview,
        created_at=state.created_at,
        updated_at=state.updated_at,
        messages=len(state.messages),
        tokens=state.live_tokens,
        state=state.lifecycle,
        tags=tags,
        summary=_summary(meta_summary, compaction),
        seq=state.seq,
        head=state.head,
        conversation_start=state.conversation_start,
        resumed_from=state.resumed_from,
        ended=len(state.ended),
        sealed=state.sealed,
    )
    ended = ended_rows(state.key, state.created_at, state.ended)
    return Row(info, offset, role, meta_summary, compaction, ended)


def advance(row: Row, data: bytes, offset: int, head: str) -> Row | None:
    """``row`` advanced over the complete lines of ``data`` (the log from byte ``offset``).

    ``head`` is the hash of the last complete line of ``data`` (the caller found it). Returns
    None when the lines cannot be followed (see the module rules) or do not decode.
    """
    end = data.rfind(b"\n") + 1
    if end == 0:
        return row
    try:
        peeks = _peek_lines(data[:end])
    except msgspec.DecodeError:
        return None
    info = row.info
    seq = info.seq
    messages, tokens = info.messages, info.tokens
    preview, role = info.preview, row.preview_role
    title, tags, state = info.title, info.tags, info.state
    meta_summary, compaction = row.meta_summary, row.compaction_summary
    updated = info.updated_at
    start, resumed, ended = info.conversation_start, info.resumed_from, row.ended
    lines: list[bytes] | None = None
    for index, peek in enumerate(peeks):
        if peek.type == "header" and peek.seq == seq:  # a later segment's header: not an event
            continue
        seq += 1
        if peek.seq != seq or peek.ts is None:
            return None
        updated = peek.ts
        if peek.type == "message":
            messages += 1
            tokens += peek.tokens
            # the role is peeked first: most messages cannot change the preview
            if (
                role != USER_PREVIEW
                and not info.sealed  # a sealed body has no text to preview
                and peek.message
                and may_change(_peek_role(peek.message).role, role)
            ):
                preview, role = preview_step(_decode_dict(peek.message), preview, role)
            continue
        if lines is None:
            lines = data[:end].split(b"\n")
        try:
            event = _decode_event.decode(lines[index])
        except msgspec.ValidationError:
            if peek.type in _KNOWN_TAGS:
                return None
            event = None  # an event type from a newer writer: it only advances seq and time
        except msgspec.DecodeError:
            return None
        match event:
            case MetadataChanged():
                described = (title, tags, meta_summary)
                title, tags, meta_summary = _described(event.set, described, event.unset)
            case Compacted():
                compaction = event.summary
            case LifecycleChanged():
                state = event.state
            case Cleared():
                if event.keep and messages:
                    return None
                if event.reason is not None:
                    began = ended[-1].updated_at if ended else info.created_at
                    ended = (
                        *ended,
                        ConversationInfo(
                            key=info.key,
                            start_seq=start,
                            end_seq=event.seq,
                            title=title,
                            preview=preview,
                            messages=messages,
                            tokens=tokens,
                            started_at=began,
                            updated_at=event.ts,
                            end_reason=event.reason,
                            resumed_from=resumed,
                            sealed=info.sealed,
                        ),
                    )
                    start, resumed = event.seq, None
                messages, tokens, preview, role, compaction = 0, 0, "", NO_PREVIEW, None
                described = (title, tags, meta_summary)
                title, tags, meta_summary = _described({}, described, event.unset)
            case ConversationResumed():
                resumed = event.start_seq
            case Trimmed() | Retracted():
                if messages:
                    return None
            case _:
                pass
    new_info = SessionInfo(
        key=info.key,
        title=title,
        preview=preview,
        created_at=info.created_at,
        updated_at=updated,
        messages=messages,
        tokens=tokens,
        state=state,
        tags=tags,
        summary=_summary(meta_summary, compaction),
        seq=seq,
        head=head,
        conversation_start=start,
        resumed_from=resumed,
        ended=len(ended),
        sealed=info.sealed,
    )
    return Row(new_info, offset + end, role, meta_summary, compaction, ended)

"""One conversation as a row: the current one of a session, or one that ended in its log (pure).

Rules:
- A session's conversations are told apart by ``start_seq``: 0 for its first, else the seq of
  the ``cleared`` event (``/new``, reset) that began it. An ended conversation's ``end_seq`` is
  the clear that ended it; the current one has none.
- An ended conversation's title, preview, message and token counts are what they were when it
  ended (recorded by the fold, see ``eventlog.EndedConversation``); it started when the one
  before it ended (or when the session was created).
- The current conversation's row is the session's row: its title, preview, counts, lifecycle
  state; an archived session's current conversation has end reason ``archive``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import msgspec

from sessionledger.eventlog import EndedConversation, portable
from sessionledger.eventlog.preview import session_preview

#: The ``state`` of a conversation that ended inside its session's log.
ENDED = "ended"


@portable()
class ConversationInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One conversation of a session, current or ended, as :func:`list_conversations` lists it."""

    key: str
    #: Where it began (0: the session's start; else the seq of the clear that began it).
    start_seq: int = 0
    #: The clear that ended it (None: the session's current conversation).
    end_seq: int | None = None
    current: bool = False
    title: str = ""
    #: The first user message's text (else the first assistant's), at most 120 characters.
    preview: str = ""
    #: Live messages and their stored token counts (when it ended, for an ended one).
    messages: int = 0
    tokens: int = 0
    started_at: datetime
    #: Its last activity: when it ended, or the session's last event for the current one.
    updated_at: datetime
    #: ``new`` or ``reset`` for an ended one; ``archive`` when the session is archived.
    end_reason: str | None = None
    #: ``ended``, or the session's lifecycle state for the current conversation.
    state: str = ENDED
    #: The ``start_seq`` of the conversation it resumed, if it was resumed.
    resumed_from: int | None = None
    #: Its session's content is sealed (an encrypted store): the stored catalog keeps no
    #: title or preview of it; a listing by a store with the keys opens them.
    sealed: bool = False


def ended_rows(
    key: str, created_at: datetime, ended: Iterable[EndedConversation], *, sealed: bool = False
) -> tuple[ConversationInfo, ...]:
    """The rows of a session's ended conversations, oldest first (``sealed``: without their
    titles and previews, for a stored catalog)."""
    out: list[ConversationInfo] = []
    started = created_at
    for e in ended:
        out.append(
            ConversationInfo(
                key=key,
                start_seq=e.start_seq,
                end_seq=e.end_seq,
                title="" if sealed else e.title,
                preview="" if sealed else session_preview(e.preview),
                messages=e.messages,
                tokens=e.tokens,
                started_at=started,
                updated_at=e.ended_at,
                end_reason=e.reason,
                resumed_from=e.resumed_from,
                sealed=sealed,
            )
        )
        started = e.ended_at
    return tuple(out)

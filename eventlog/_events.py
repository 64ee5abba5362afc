"""Event types of the session log (format version 1).

Invariants:
- Every type is a frozen msgspec ``Struct`` with an explicit tag in the ``type`` field. Tags are
  part of the on-disk contract: a renamed class keeps its tag, a released tag never changes.
- Every event carries ``seq`` (1, 2, 3 ... per session), ``ts`` (UTC) and a unique ``id``.
- ``h`` is the line's chained hash. It is filled in by the codec when a line is encoded or
  decoded, and is never written by the struct encoder itself (empty strings are omitted), so the
  codec can append it as the fixed-width last field of the line.
- Schema evolution: new fields get defaults; field types never change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, Literal, overload

import msgspec

from ._errors import InvalidEventError
from ._jsonbytes import encode_json

FORMAT_NAME: Final = "sessionlog"
#: The newest format version this library reads and writes (2: logs in segments).
FORMAT_VERSION: Final = 2
#: The version a header says when it omits the field: every first segment is written so.
BASE_VERSION: Final = 1

_decode_message = msgspec.json.Decoder(dict[str, Any]).decode

#: Key of a placeholder message whose content was destroyed: its value is ``"erased"`` or
#: ``"redacted"``. Readers (history, previews, exports) skip or mark such a message.
WITHHELD: Final = "_withheld"
#: Where a settling writer keeps, with a message event it wrote, that event's line (the bytes
#: it hashed; see ``_indexsnap.extend_from_state``). Never copied to another event.
HELD_LINE: Final = "_line"


class _RoleOnly(msgspec.Struct):
    role: Any = None


_decode_role = msgspec.json.Decoder(_RoleOnly).decode

TrimReason = Literal["file_cap", "retain_suffix", "truncate"]
LifecycleState = Literal["active", "idle", "compacting", "suspended", "archived"]
EndReason = Literal["archive", "reset", "delete", "timeout", "new"]

TRIM_REASONS: Final[tuple[str, ...]] = ("file_cap", "retain_suffix", "truncate")
LIFECYCLE_STATES: Final[tuple[str, ...]] = ("active", "idle", "compacting", "suspended", "archived")
END_REASONS: Final[tuple[str, ...]] = ("archive", "reset", "delete", "timeout", "new")


class _Base(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    omit_defaults=True,
):
    """Fields every event has."""

    seq: int
    ts: datetime
    id: str
    h: str = ""


class Header(_Base, tag="header", kw_only=True, frozen=True):
    """The first line of every log file: what the file is and which session it holds.

    ``seq`` of a header is the seq of the last event before this segment (0 for the first
    segment) and ``prev_h`` the previous segment's last hash, so a later segment chains onto
    the previous one (see :mod:`eventlog._segments`).
    """

    format: str = FORMAT_NAME
    #: 1 (omitted) for a log's first segment; 2 for every later segment (see _segments).
    version: int = BASE_VERSION
    key: str
    created_at: datetime
    metadata: dict[str, Any] = {}
    segment: int = 0
    prev_h: str = ""
    #: A later segment: the byte offset in the whole log (segments end to end) it starts at.
    offset: int = 0
    #: A fork: the session it was forked from, the seq it was forked at, and the hash of that
    #: seq's line in the source (``replay.verify`` checks it while the source exists).
    fork_of: str | None = None
    fork_seq: int = 0
    fork_h: str = ""
    #: How the session's content is sealed ("" for plaintext); see ``eventlog._crypto``.
    sealing: str = ""


class _Message:
    """``MessageAppended.message``: the message dict, decoded from ``body`` on first use and
    then kept in the event's ``__dict__`` (which later reads find first: this descriptor has no
    ``__set__``). ``functools.cached_property`` without its lock, which Python 3.11 takes on
    every first use (a history decodes hundreds at once); two threads racing on one event
    decode the same bytes into equal dicts, and one is kept.

    A sealed message (an encrypted store) is opened here, by the opener its store attached
    when it read the event; it raises :class:`KeyUnavailableError` when it cannot be.
    """

    @overload
    def __get__(self, event: None, owner: type) -> _Message: ...

    @overload
    def __get__(self, event: MessageAppended, owner: type) -> dict[str, Any]: ...

    def __get__(
        self, event: MessageAppended | None, owner: type | None = None
    ) -> dict[str, Any] | _Message:
        if event is None:
            return self
        cached = event.__dict__
        opener = cached.get("_open")
        if opener is not None:
            message: dict[str, Any] = opener(event)
        else:
            try:
                message = _decode_message(event.body)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
                # Lines are checked when read, so only a body built by hand gets here.
                raise InvalidEventError(
                    f"the message of event seq {event.seq} is not a JSON object: {exc}"
                ) from exc
        cached["message"] = message
        return message


class MessageAppended(_Base, tag="message", kw_only=True, frozen=True, dict=True):
    """One chat message, every key of the caller's dict kept, plus its token estimate.

    The message is kept as the JSON bytes of its line (``body``, written as the ``message``
    field) and decoded into a dict on first use of :attr:`message`: opening a long session
    decodes only the messages something reads. Build one with :meth:`of`.
    """

    body: msgspec.Raw = msgspec.field(name="message")
    tokens: int = 0

    @classmethod
    def of(
        cls,
        *,
        seq: int,
        ts: datetime,
        id: str,
        message: dict[str, Any],
        tokens: int = 0,
        h: str = "",
    ) -> MessageAppended:
        """The event for ``message`` (a dict with every key kept).

        Raises:
            msgspec.EncodeError: a value in the message is not JSON-serialisable.
        """
        event = cls(
            seq=seq, ts=ts, id=id, h=h, body=msgspec.Raw(encode_json(message)), tokens=tokens
        )
        event.__dict__["message"] = message
        return event

    #: The message dict (decoded from ``body`` on first use, then kept); see :class:`_Message`.
    message = _Message()

    def _carry(self, event: MessageAppended) -> MessageAppended:
        cached = self.__dict__
        for name in ("message", "_open", "_plain"):
            if name in cached:
                event.__dict__[name] = cached[name]
        return event

    def detached(self) -> MessageAppended:
        """A copy whose body owns its bytes (a body decoded from a buffer keeps it alive)."""
        return self._carry(msgspec.structs.replace(self, body=msgspec.Raw(bytes(self.body))))

    def with_hash(self, h: str) -> MessageAppended:
        """A copy with chain hash ``h`` that keeps the decoded message."""
        # ``_carry``, inlined: this runs once per append.
        event = msgspec.structs.replace(self, h=h)
        cached = self.__dict__
        if cached:
            into = event.__dict__
            if "message" in cached:
                into["message"] = cached["message"]
            if "_open" in cached:
                into["_open"] = cached["_open"]
                if "_plain" in cached:  # a sealed message's plaintext (see ``_crypto``)
                    into["_plain"] = cached["_plain"]
        return event

    @property
    def role(self) -> Any:
        """The message's role, read from the body without opening or decoding the rest."""
        return _decode_role(self.body).role

    def withheld(self, how: str) -> MessageAppended:
        """The placeholder left when this message's content was destroyed (``how``: erased or
        redacted): its envelope (seq, ts, id, hash, role, tokens) and no content."""
        body = encode_json({"role": self.role, "content": None, WITHHELD: how})
        return msgspec.structs.replace(self, body=msgspec.Raw(body))


def decode_messages(events: Sequence[MessageAppended]) -> None:
    """Decode the message dicts of ``events`` not decoded yet: what reading each event's
    :attr:`~MessageAppended.message` would do, in one loop (a history reads hundreds at
    once). Each body is decoded on its own, from the bytes it already is (joining them for
    one decode copied every body into a buffer as large as the window, whose fresh pages
    cost more than the calls it saved). A sealed event (one with an opener) is left to its
    first use, and so is a body that does not decode (not one JSON object): reading that
    message raises as before; the others are decoded all the same.
    """
    for event in events:
        cached = event.__dict__
        if "message" in cached or "_open" in cached:
            continue
        try:
            message = _decode_message(event.body)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            continue  # left to its first use, which raises
        cached.setdefault("message", message)


class MetadataChanged(_Base, tag="metadata", kw_only=True, frozen=True):
    """Metadata keys set (with their new values) and keys removed."""

    set: dict[str, Any] = {}
    unset: list[str] = []


class Consolidated(_Base, tag="consolidated", kw_only=True, frozen=True):
    """The consolidation cursor (nanobot's ``last_consolidated``) moved to ``upto``."""

    upto: int


class Compacted(_Base, tag="compacted", kw_only=True, frozen=True):
    """A summary now stands for the first ``upto`` live messages.

    ``removed`` and ``kept`` count messages replaced and preserved; the token figures are what
    the caller's summariser reported. ``extra`` holds any other statistics (duration, model).
    """

    summary: str
    upto: int
    tokens_before: int = 0
    tokens_after: int = 0
    removed: int = 0
    kept: int = 0
    extra: dict[str, Any] = {}
    #: Seconds the summariser took, and the model it used, when the caller says.
    duration: float = 0.0
    model: str | None = None


class Trimmed(_Base, tag="trimmed", kw_only=True, frozen=True):
    """The oldest ``count`` live messages were dropped, for ``reason``."""

    count: int
    #: One of TRIM_REASONS when this version writes it; any string is read back (a newer
    #: writer's reason must not make an older reader call the log corrupt).
    reason: str


class Cleared(_Base, tag="cleared", kw_only=True, frozen=True):
    """Every live message was dropped (but those at ``keep``) and the consolidation cursor reset.

    ``reason`` is set when a conversation ended with the clear: ``new`` (the key starts a fresh
    conversation; the ended one stays in the log for audit) or ``reset``. ``keep`` lists the
    live-message indexes that survive (e.g. the system prompt on a reset), oldest first.
    """

    #: One of END_REASONS when this version writes it; any string is read back.
    reason: str | None = None
    keep: list[int] = []
    #: Metadata keys removed with the clear, after the ended conversation was recorded (``/new``
    #: drops the title this way: the new conversation gets its own).
    unset: list[str] = []


class Retracted(_Base, tag="retracted", kw_only=True, frozen=True):
    """The newest ``count`` live messages were withdrawn (e.g. a partial stream)."""

    count: int = 1


class LifecycleChanged(_Base, tag="lifecycle", kw_only=True, frozen=True):
    """The session entered ``state``; ``reason`` says why a session ended, when it did."""

    #: One of LIFECYCLE_STATES / END_REASONS when this version writes them; any string is read.
    state: str
    reason: str | None = None


class ConversationResumed(_Base, tag="resumed", kw_only=True, frozen=True):
    """An ended conversation (``start_seq`` .. ``end_seq``) was made current again.

    The conversation's messages follow as ``message`` events (copied from the log), so history
    needs nothing else; ``messages`` says how many follow and ``by`` who resumed it, when known.
    """

    start_seq: int
    end_seq: int
    messages: int = 0
    by: str | None = None


class UsageRecorded(_Base, tag="usage", kw_only=True, frozen=True):
    """Token usage a provider reported for one LLM call (beside the estimated counts)."""

    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0
    #: The provider's request or response id, when known.
    call_id: str | None = None


class Erased(_Base, tag="erased", kw_only=True, frozen=True):
    """The session's content up to this event was erased: its keys were destroyed.

    Records who (``by``), when (``ts``) and why (``reason``); never any content.
    """

    by: str | None = None
    reason: str | None = None


class Redacted(_Base, tag="redacted", kw_only=True, frozen=True):
    """The message at seq ``target`` was redacted: its key was destroyed (who, when, why)."""

    target: int
    by: str | None = None
    reason: str | None = None


class UnknownEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event of a type this version does not know, kept verbatim and passed through.

    Not part of the tagged union: the codec builds it from a line whose tag it cannot decode.
    """

    type: str
    seq: int
    ts: datetime
    id: str
    h: str = ""
    raw: dict[str, Any] = {}


KnownEvent = (
    MessageAppended
    | MetadataChanged
    | Consolidated
    | Compacted
    | Trimmed
    | Cleared
    | Retracted
    | LifecycleChanged
    | UsageRecorded
    | ConversationResumed
    | Erased
    | Redacted
)
Event = KnownEvent | UnknownEvent

EVENT_TYPES: Final[tuple[type[KnownEvent], ...]] = (
    MessageAppended,
    MetadataChanged,
    Consolidated,
    Compacted,
    Trimmed,
    Cleared,
    Retracted,
    LifecycleChanged,
    UsageRecorded,
    ConversationResumed,
    Erased,
    Redacted,
)

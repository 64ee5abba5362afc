"""The write API, written once for the sync and the async writer.

Every public write method of :class:`WriteAPI` validates its arguments and turns them into a
:class:`Draft`; the writer's ``_submit`` then stages it (:func:`stage`), writes the line and
folds the event. ``SessionWriter._submit`` returns the seq; ``AsyncSessionWriter._submit`` is a
coroutine, so ``await writer.append_message(...)`` works with the very same method. Only I/O,
locking and waiting for durability differ between the two writers.

Invariants:
- Checks that need only the arguments run when the method is called; checks against the session
  (``upto`` past the live messages, ...) run in ``Draft.make``, under the writer's
  serialisation, after the idempotency and ``expected_seq`` checks, so they see the state the
  new event follows.
- :func:`stage` does no I/O and changes nothing: when it raises, nothing was written.
- A retried event id (already in ``state.ids``) stages to the seq it was written at.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from ._codec import encode_line
from ._errors import ConflictError, InvalidEventError, StoreClosedError
from ._events import (
    END_REASONS,
    LIFECYCLE_STATES,
    TRIM_REASONS,
    Cleared,
    Compacted,
    Consolidated,
    EndReason,
    KnownEvent,
    LifecycleChanged,
    LifecycleState,
    MessageAppended,
    MetadataChanged,
    Retracted,
    Trimmed,
    TrimReason,
    UsageRecorded,
)
from ._fold import SessionState
from ._portable import portable
from ._tokens import MAX_TOKENS, TokenCounter
from ._values import encode_checked

_encode = msgspec.json.Encoder().encode
_R = TypeVar("_R")
_RC = TypeVar("_RC", covariant=True)


@portable("tokens_saved")
class CompactionResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`WriteAPI.compact` recorded: the compaction event's seq and what it saved."""

    seq: int
    summary: str
    upto: int
    removed_messages: int
    preserved_messages: int
    tokens_before: int
    tokens_after: int
    duration: float = 0.0
    model: str | None = None

    @property
    def tokens_saved(self) -> int:
        """Tokens the summary saved (before minus after)."""
        return self.tokens_before - self.tokens_after


#: Builds the event that follows ``state`` at (seq, ts, id); may raise InvalidEventError.
MakeEvent = Callable[[SessionState, int, datetime, str], KnownEvent]


#: Event ids are drawn from ``os.urandom`` 256 at a time (one system call, not one per append),
#: so they stay unpredictable from earlier ids. A forked child drops the pool it inherited, so
#: parent and child never draw the same ids.
_ids: list[str] = []
os.register_at_fork(after_in_child=_ids.clear)


def new_event_id() -> str:
    """A fresh random event id (128 bits, hex)."""
    while True:
        try:
            return _ids.pop()
        except IndexError:  # empty (another thread may have taken the last one)
            pool = os.urandom(16 * 256).hex()
            _ids.extend(pool[i : i + 32] for i in range(0, len(pool), 32))


@dataclass(slots=True)
class Draft:
    """A validated write waiting for its seq: how to build the event, and how to explain a
    value that fails to encode."""

    make: MakeEvent
    describe: Callable[[], str] | None = None


@dataclass(slots=True)
class Staged:
    """An event ready to append: the event (with its hash) and its encoded line."""

    event: KnownEvent
    line: bytes


def stage(
    state: SessionState,
    draft: Draft,
    *,
    key: str,
    hash_key: bytes,
    expected_seq: int | None,
    event_id: str | None,
    seal: Callable[[KnownEvent], KnownEvent] | None = None,
) -> Staged | int:
    """Build and encode the event that follows ``state``, or return the seq of a retried id.

    Raises:
        ConflictError: ``expected_seq`` is not the session's last seq.
        InvalidEventError: the event is invalid for this state or cannot be encoded.
    """
    if event_id is not None:
        done = state.ids.get(event_id)
        if done is not None:
            return done
        if event_id == state.id:  # the header's id: every store refuses it the same way
            raise InvalidEventError(
                f"session {key!r}: event id {event_id!r} is the session header's id"
            )
    if expected_seq is not None and expected_seq != state.seq:
        raise ConflictError(key, expected_seq, state.seq)
    if not event_id:
        try:  # ``new_event_id``, inlined: this runs once per append
            event_id = _ids.pop()
        except IndexError:
            event_id = new_event_id()
    event = draft.make(state, state.seq + 1, datetime.now(UTC), event_id)
    written = event if seal is None else seal(event)  # an encrypted store's sealing layer
    if isinstance(written, MessageAppended):
        event = written  # a sealed message keeps its plaintext cached, and its opener
    try:
        line, h = encode_line(written, state.head, hash_key)
    except (TypeError, ValueError, msgspec.EncodeError, OverflowError) as exc:
        why = draft.describe() if draft.describe is not None else str(exc)
        raise InvalidEventError(f"session {key!r}: {why}") from exc
    if isinstance(event, MessageAppended):
        return Staged(event.with_hash(h), line)
    return Staged(msgspec.structs.replace(event, h=h), line)


def message_draft(msg: dict[str, Any], body: msgspec.Raw, tokens: int) -> Draft:
    """The draft of a message already checked and encoded (see ``append_message_dict``)."""

    def make(_s: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
        event = MessageAppended(seq=seq, ts=ts, id=eid, body=body, tokens=tokens)
        event.__dict__["message"] = msg
        return event

    return Draft(make, lambda: _unserialisable(msg))


def check_event_id(event_id: object) -> str | None:
    """Return a valid event id (or None); raise InvalidEventError otherwise."""
    if event_id is not None and (
        not isinstance(event_id, str) or not event_id or len(event_id) > 200
    ):
        raise InvalidEventError(
            f"event id must be a non-empty str of at most 200 chars, not {event_id!r}"
        )
    return event_id


def check_expected_seq(expected_seq: object) -> int | None:
    """Return a valid ``expected_seq`` (or None); raise InvalidEventError otherwise."""
    if expected_seq is not None and (
        isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0
    ):
        raise InvalidEventError(f"expected_seq must be an integer >= 0, not {expected_seq!r}")
    return expected_seq


def _check_count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidEventError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _check_live(state: SessionState, what: str, count: int) -> None:
    live = len(state.messages)
    if count > live:
        raise InvalidEventError(f"{what} {count} is past the {live} live messages")


def _unserialisable(mapping: Mapping[str, Any]) -> str:
    for name, value in mapping.items():
        try:
            _encode(value)
        except (TypeError, ValueError, msgspec.EncodeError, OverflowError) as exc:
            return f"field {name!r} is not JSON-serialisable: {exc}"
    return "a value is not JSON-serialisable"


class _Named(Protocol):
    name: str


class WriteAPI(abc.ABC, Generic[_R, _RC]):
    """The write methods both writers share; ``_R`` is ``int`` or a coroutine of ``int``
    (``_RC`` likewise for :class:`CompactionResult`).

    Every write method accepts ``expected_seq=`` (raise :class:`ConflictError` unless the log's
    last seq equals it, writing nothing) and ``id=`` (an event id; appending an id already in the
    log is a no-op returning its seq). Each returns (or, async, resolves to) its event's seq.
    """

    key: str
    #: Seals an event for its line (set by an encrypted store; None: written as is).
    _seal: Callable[[KnownEvent], KnownEvent] | None = None
    _count_tokens: TokenCounter
    #: A writer's own path for a checked message with no ``expected_seq`` and no ``id``
    #: (message dict, encoded body, tokens; the hot path, without a draft): None, or it
    #: appends exactly as ``_write(message_draft(...), None, None)`` would.
    _append_message: Callable[[dict[str, Any], msgspec.Raw, int], _R] | None = None
    _state: SessionState
    _io: _Named
    _closed: bool

    # -- reading (the same for both writers) ---------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The folded state (live; copy it with ``state.copy()`` to keep a point in time)."""
        return self._state

    @property
    def seq(self) -> int:
        """The seq of the last event in the log."""
        return self._state.seq

    @property
    def path(self) -> str:
        """Where the log lives (a file path, or a description for other stores)."""
        return self._io.name

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    @abc.abstractmethod
    def _submit(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> _R:
        """Stage, write and fold ``draft`` under the writer's serialisation."""

    @abc.abstractmethod
    def _then(self, result: _R, make: Callable[[int], CompactionResult]) -> _RC:
        """``make(seq)`` once ``result`` (a seq, or a coroutine of one) is in."""

    def _write(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> _R:
        if expected_seq is not None:
            check_expected_seq(expected_seq)
        if event_id is not None:
            check_event_id(event_id)
        return self._submit(draft, expected_seq, event_id)

    def append_message(
        self,
        role: str,
        content: Any = None,
        *,
        expected_seq: int | None = None,
        id: str | None = None,
        **fields: Any,
    ) -> _R:
        """Append one message; every keyword is kept in the message dict as given.

        A ``timestamp`` (local ISO time, like nanobot's ``add_message``) is added when absent.
        """
        if not isinstance(role, str) or not role:
            raise InvalidEventError(f"message role must be a non-empty str, not {role!r}")
        message: dict[str, Any] = {"role": role, "content": content, **fields}
        if "timestamp" not in message:
            message["timestamp"] = datetime.now().isoformat()
        return self.append_message_dict(message, expected_seq=expected_seq, id=id)

    def append_message_dict(
        self,
        message: Mapping[str, Any],
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> _R:
        """Append a message dict exactly as given (it must have a non-empty str ``role``)."""
        if type(message) is not dict and not isinstance(message, Mapping):
            raise InvalidEventError(f"a message must be a dict, not {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidEventError(f"message role must be a non-empty str, not {role!r}")
        msg = dict(message)
        # Encoded once, here, outside the writer lock; refused unless it reads back as given.
        body = msgspec.Raw(encode_checked(msg, "message"))
        try:
            counted = self._count_tokens(msg)
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            raise InvalidEventError(f"message cannot be counted: {_unserialisable(msg)}") from exc
        try:
            tokens = int(counted)
        except (TypeError, ValueError, OverflowError):  # None, nan, inf, "many"
            tokens = -1
        if not 0 <= tokens <= MAX_TOKENS:
            raise InvalidEventError(
                f"token_counter returned {counted!r} for a {role!r} message; a count must be "
                f"from 0 to {MAX_TOKENS}"
            )

        fast = self._append_message
        if fast is not None and expected_seq is None and id is None:
            if self._closed:
                raise StoreClosedError(f"the writer for session {self.key!r} is closed")
            return fast(msg, body, tokens)
        return self._write(message_draft(msg, body, tokens), expected_seq, id)

    def update_metadata(
        self,
        set: Mapping[str, Any] | None = None,
        unset: Iterable[str] = (),
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> _R:
        """Set metadata keys and remove others, as one event."""
        if isinstance(unset, str):
            raise InvalidEventError("unset takes a list of keys, not one str")
        if set is not None and not isinstance(set, Mapping):
            raise InvalidEventError(f"set takes a mapping of keys to values, not {set!r:.60}")
        values = dict(set or {})
        removed = list(unset)
        encode_checked(values, "metadata")
        for name in removed:
            if not isinstance(name, str):
                raise InvalidEventError(f"metadata keys must be str, not {name!r}")
        draft = Draft(
            lambda _s, seq, ts, eid: MetadataChanged(
                seq=seq, ts=ts, id=eid, set=values, unset=removed
            ),
            lambda: _unserialisable(values),
        )
        return self._write(draft, expected_seq, id)

    def mark_consolidated(
        self, upto: int, *, expected_seq: int | None = None, id: str | None = None
    ) -> _R:
        """Move the consolidation cursor (nanobot's ``last_consolidated``) to ``upto``."""
        _check_count("upto", upto)

        def make(state: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
            _check_live(state, "upto", upto)
            return Consolidated(seq=seq, ts=ts, id=eid, upto=upto)

        return self._write(Draft(make), expected_seq, id)

    def compact(
        self,
        summary: str,
        upto: int,
        *,
        tokens_before: int = 0,
        tokens_after: int = 0,
        removed: int | None = None,
        kept: int | None = None,
        duration: float = 0.0,
        model: str | None = None,
        expected_seq: int | None = None,
        id: str | None = None,
        **extra: Any,
    ) -> _RC:
        """Record a compaction: ``summary`` now stands for the first ``upto`` live messages.

        The library never calls a model: pass what your summariser produced (``duration`` in
        seconds, the ``model`` it used). ``extra`` keeps any other statistics.
        """
        if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
            raise InvalidEventError(f"duration must be a number of seconds >= 0, not {duration!r}")
        if model is not None and not isinstance(model, str):
            raise InvalidEventError(f"model must be a str, not {model!r}")
        if not isinstance(summary, str):
            raise InvalidEventError(f"summary must be a str, not {type(summary).__name__}")
        _check_count("upto", upto)
        _check_count("tokens_before", tokens_before)
        _check_count("tokens_after", tokens_after)
        if removed is not None:
            _check_count("removed", removed)
        if kept is not None:
            _check_count("kept", kept)
        encode_checked(extra, "compaction")

        def make(state: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
            _check_live(state, "upto", upto)
            return Compacted(
                seq=seq,
                ts=ts,
                id=eid,
                summary=summary,
                upto=upto,
                tokens_before=tokens_before,
                tokens_after=tokens_after,
                removed=upto if removed is None else removed,
                kept=len(state.messages) - upto if kept is None else kept,
                extra=extra,
                duration=float(duration),
                model=model,
            )

        def result(seq: int) -> CompactionResult:
            done = self._state.compaction
            mine = done is not None and done.seq == seq
            return CompactionResult(
                seq=seq,
                summary=summary,
                upto=upto,
                removed_messages=done.removed if mine and done else (removed or upto),
                preserved_messages=done.kept if mine and done else (kept or 0),
                tokens_before=tokens_before,
                tokens_after=tokens_after,
                duration=float(duration),
                model=model,
            )

        return self._then(
            self._write(Draft(make, lambda: _unserialisable(extra)), expected_seq, id), result
        )

    def trim(
        self,
        drop: int,
        reason: TrimReason,
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> _R:
        """Drop the oldest ``drop`` live messages, for ``reason`` (file_cap, retain_suffix, truncate)."""
        _check_count("drop", drop, minimum=1)
        if reason not in TRIM_REASONS:
            raise InvalidEventError(
                f"trim reason must be one of {', '.join(TRIM_REASONS)}, not {reason!r}"
            )

        def make(state: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
            if drop > len(state.messages):
                raise InvalidEventError(f"cannot drop {drop} of {len(state.messages)} messages")
            return Trimmed(seq=seq, ts=ts, id=eid, count=drop, reason=reason)

        return self._write(Draft(make), expected_seq, id)

    def clear(
        self,
        *,
        keep: Iterable[int] = (),
        reason: EndReason | None = None,
        unset: Iterable[str] = (),
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> _R:
        """Drop every live message (but the indexes in ``keep``) and reset the cursor.

        ``reason`` (``new`` or ``reset``) records that a conversation ended here; it stays in the
        log for audit and in ``state.ended``. ``unset`` names metadata keys removed in the same
        event, after the ended conversation was recorded.
        """
        kept = sorted(set(keep))
        if isinstance(unset, str):
            raise InvalidEventError(f"unset takes a list of metadata keys, not the str {unset!r}")
        dropped = list(dict.fromkeys(unset))
        for name in dropped:
            if not isinstance(name, str):
                raise InvalidEventError(f"metadata keys to unset must be str, not {name!r}")
        for index in kept:
            _check_count("keep index", index)
        if reason is not None and reason not in END_REASONS:
            raise InvalidEventError(
                f"end reason must be one of {', '.join(END_REASONS)}, not {reason!r}"
            )

        def make(state: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
            live = len(state.messages)
            for index in kept:
                if index >= live:
                    raise InvalidEventError(f"keep index {index} is past the {live} live messages")
            return Cleared(seq=seq, ts=ts, id=eid, reason=reason, keep=kept, unset=dropped)

        return self._write(Draft(make), expected_seq, id)

    def record_usage(
        self,
        *,
        model: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int = 0,
        total_tokens: int | None = None,
        call_id: str | None = None,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> _R:
        """Record the token usage a provider reported for one LLM call."""
        _check_count("prompt_tokens", prompt_tokens)
        _check_count("completion_tokens", completion_tokens)
        _check_count("cached_tokens", cached_tokens)
        total = prompt_tokens + completion_tokens if total_tokens is None else total_tokens
        _check_count("total_tokens", total)
        if model is not None and not isinstance(model, str):
            raise InvalidEventError(f"model must be a str, not {model!r}")
        if call_id is not None and not isinstance(call_id, str):
            raise InvalidEventError(f"call_id must be a str, not {call_id!r}")
        draft = Draft(
            lambda _s, seq, ts, eid: UsageRecorded(
                seq=seq,
                ts=ts,
                id=eid,
                model=model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cached_tokens=cached_tokens,
                total_tokens=total,
                call_id=call_id,
            )
        )
        return self._write(draft, expected_seq, id)

    def retract(
        self, count: int = 1, *, expected_seq: int | None = None, id: str | None = None
    ) -> _R:
        """Withdraw the newest ``count`` live messages (e.g. a partial stream)."""
        _check_count("count", count, minimum=1)

        def make(state: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
            if count > len(state.messages):
                raise InvalidEventError(f"cannot retract {count} of {len(state.messages)} messages")
            return Retracted(seq=seq, ts=ts, id=eid, count=count)

        return self._write(Draft(make), expected_seq, id)

    def set_lifecycle(
        self,
        state: LifecycleState,
        reason: EndReason | None = None,
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> _R:
        """Move the session to a lifecycle state, with an end reason when it ends."""
        if state not in LIFECYCLE_STATES:
            raise InvalidEventError(
                f"lifecycle state must be one of {', '.join(LIFECYCLE_STATES)}, not {state!r}"
            )
        if reason is not None and reason not in END_REASONS:
            raise InvalidEventError(
                f"end reason must be one of {', '.join(END_REASONS)}, not {reason!r}"
            )
        draft = Draft(
            lambda _s, seq, ts, eid: LifecycleChanged(
                seq=seq, ts=ts, id=eid, state=state, reason=reason
            )
        )
        return self._write(draft, expected_seq, id)

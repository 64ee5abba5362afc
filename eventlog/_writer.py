"""The session writer: validates input, builds events, appends their lines, folds them.

Invariants:
- One line per event, written with one ``append`` call of whole bytes; an append that fails
  leaves the log exactly as it was (the I/O layer cuts back any partial write).
- Appends to one writer are serialised by a lock: threads never interleave lines.
- ``state`` only ever reflects lines that were written; with ``"always"`` durability, lines that
  were also synced. A retried event id is a no-op that returns the original seq.
- ``"batch"`` durability is group commit: an append returns once an fsync that started after its
  line was written has finished; appends arriving during an fsync share the next one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, cast

import msgspec

from ._codec import encode_line
from ._errors import InvalidEventError, StorageError, StoreClosedError
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
from ._errors import ConflictError
from ._fold import SessionState, apply
from ._tokens import TokenCounter

Durability = Literal["always", "batch", "none"]
DURABILITIES: tuple[str, ...] = ("always", "batch", "none")

_encode = msgspec.json.Encoder().encode


class SessionIO(Protocol):
    """What a store gives a writer: one session's bytes, held under its writer lock."""

    name: str

    def append(self, data: bytes) -> None:
        """Write all of ``data`` at the end, or raise StorageError leaving the log unchanged."""

    def sync(self) -> None:
        """Make everything appended so far durable, or raise StorageError."""

    def truncate(self, size: int) -> None:
        """Cut the log back to ``size`` bytes."""

    def size(self) -> int:
        """The log's length in bytes."""

    def close(self) -> None:
        """Release the session (and its writer lock)."""


def new_event_id() -> str:
    """A fresh random event id (128 bits, hex)."""
    return os.urandom(16).hex()


def check_durability(durability: str) -> Durability:
    """Return ``durability`` if it is one of ``always``, ``batch``, ``none``; else raise."""
    if durability not in DURABILITIES:
        raise InvalidEventError(
            f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}"
        )
    return durability  # type: ignore[return-value]


def _check_count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidEventError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _unserialisable(mapping: Mapping[str, Any]) -> str:
    for name, value in mapping.items():
        try:
            _encode(value)
        except (TypeError, msgspec.EncodeError, OverflowError) as exc:
            return f"field {name!r} is not JSON-serialisable: {exc}"
    return "a value is not JSON-serialisable"


class SessionWriter:
    """Appends events to one session; obtained from ``store.session(key)``.

    Every write method accepts ``expected_seq=`` (raise :class:`ConflictError` unless the log's
    last seq equals it, writing nothing) and ``id=`` (an event id; appending an id already in the
    log is a no-op). Each returns the seq of its event.
    """

    def __init__(
        self,
        *,
        key: str,
        io: SessionIO,
        state: SessionState,
        durability: Durability,
        hash_key: bytes,
        token_counter: TokenCounter,
        batch_window: float = 0.0,
        on_close: Callable[[SessionWriter], None] | None = None,
        on_append: Callable[[SessionWriter, KnownEvent], None] | None = None,
    ) -> None:
        self.key = key
        self._io = io
        self._state = state
        self._durability = durability
        self._hash_key = hash_key
        self._count_tokens = token_counter
        self._batch_window = batch_window
        self._on_close = on_close
        self._on_append = on_append
        self._lock = threading.RLock()
        self._closed = False
        # Group commit bookkeeping (lines written, lines known durable, an fsync in flight).
        self._sync_cond = threading.Condition()
        self._written = 0
        self._synced = 0
        self._syncing = False
        self._failed: tuple[int, StorageError] | None = None

    # -- reading -----------------------------------------------------------------------------

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
        """True once :meth:`close` ran."""
        return self._closed

    # -- the write API -----------------------------------------------------------------------

    def append_message(
        self,
        role: str,
        content: Any = None,
        *,
        expected_seq: int | None = None,
        id: str | None = None,
        **fields: Any,
    ) -> int:
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
    ) -> int:
        """Append a message dict exactly as given (it must have a non-empty str ``role``)."""
        if not isinstance(message, Mapping):
            raise InvalidEventError(f"a message must be a dict, not {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidEventError(f"message role must be a non-empty str, not {role!r}")
        for name in message:
            if not isinstance(name, str):
                raise InvalidEventError(f"message keys must be str, not {name!r}")
        msg = dict(message)
        try:
            tokens = int(self._count_tokens(msg))
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            raise InvalidEventError(f"message cannot be counted: {_unserialisable(msg)}") from exc
        return self._append(
            lambda seq, ts, eid: MessageAppended(
                seq=seq, ts=ts, id=eid, message=msg, tokens=tokens
            ),
            expected_seq,
            id,
            describe=lambda: _unserialisable(msg),
        )

    def update_metadata(
        self,
        set: Mapping[str, Any] | None = None,
        unset: Iterable[str] = (),
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> int:
        """Set metadata keys and remove others, as one event."""
        values = dict(set or {})
        removed = list(unset)
        for name in (*values, *removed):
            if not isinstance(name, str):
                raise InvalidEventError(f"metadata keys must be str, not {name!r}")
        if isinstance(unset, str):
            raise InvalidEventError("unset takes a list of keys, not one str")
        return self._append(
            lambda seq, ts, eid: MetadataChanged(seq=seq, ts=ts, id=eid, set=values, unset=removed),
            expected_seq,
            id,
            describe=lambda: _unserialisable(values),
        )

    def mark_consolidated(
        self, upto: int, *, expected_seq: int | None = None, id: str | None = None
    ) -> int:
        """Move the consolidation cursor (nanobot's ``last_consolidated``) to ``upto``."""
        _check_count("upto", upto)
        if upto > len(self._state.messages):
            raise InvalidEventError(
                f"upto {upto} is past the {len(self._state.messages)} live messages"
            )
        return self._append(
            lambda seq, ts, eid: Consolidated(seq=seq, ts=ts, id=eid, upto=upto), expected_seq, id
        )

    def compact(
        self,
        summary: str,
        upto: int,
        *,
        tokens_before: int = 0,
        tokens_after: int = 0,
        removed: int | None = None,
        kept: int | None = None,
        expected_seq: int | None = None,
        id: str | None = None,
        **extra: Any,
    ) -> int:
        """Record a compaction: ``summary`` now stands for the first ``upto`` live messages.

        The library never calls a model: pass what your summariser produced. ``extra`` keeps any
        other statistics (duration, model name).
        """
        if not isinstance(summary, str):
            raise InvalidEventError(f"summary must be a str, not {type(summary).__name__}")
        _check_count("upto", upto)
        _check_count("tokens_before", tokens_before)
        _check_count("tokens_after", tokens_after)
        live = len(self._state.messages)
        if upto > live:
            raise InvalidEventError(f"upto {upto} is past the {live} live messages")
        n_removed = upto if removed is None else _check_count("removed", removed)
        n_kept = live - upto if kept is None else _check_count("kept", kept)
        return self._append(
            lambda seq, ts, eid: Compacted(
                seq=seq,
                ts=ts,
                id=eid,
                summary=summary,
                upto=upto,
                tokens_before=tokens_before,
                tokens_after=tokens_after,
                removed=n_removed,
                kept=n_kept,
                extra=extra,
            ),
            expected_seq,
            id,
            describe=lambda: _unserialisable(extra),
        )

    def trim(
        self,
        drop: int,
        reason: TrimReason,
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> int:
        """Drop the oldest ``drop`` live messages, for ``reason`` (file_cap, retain_suffix, truncate)."""
        _check_count("drop", drop, minimum=1)
        if reason not in TRIM_REASONS:
            raise InvalidEventError(
                f"trim reason must be one of {', '.join(TRIM_REASONS)}, not {reason!r}"
            )
        if drop > len(self._state.messages):
            raise InvalidEventError(f"cannot drop {drop} of {len(self._state.messages)} messages")
        return self._append(
            lambda seq, ts, eid: Trimmed(seq=seq, ts=ts, id=eid, count=drop, reason=reason),
            expected_seq,
            id,
        )

    def clear(
        self,
        *,
        keep: Iterable[int] = (),
        reason: EndReason | None = None,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> int:
        """Drop every live message (but the indexes in ``keep``) and reset the cursor.

        ``reason`` (``new`` or ``reset``) records that a conversation ended here; it stays in the
        log for audit and in ``state.ended``.
        """
        kept = sorted(set(keep))
        live = len(self._state.messages)
        for index in kept:
            _check_count("keep index", index)
            if index >= live:
                raise InvalidEventError(f"keep index {index} is past the {live} live messages")
        if reason is not None and reason not in END_REASONS:
            raise InvalidEventError(
                f"end reason must be one of {', '.join(END_REASONS)}, not {reason!r}"
            )
        return self._append(
            lambda seq, ts, eid: Cleared(seq=seq, ts=ts, id=eid, reason=reason, keep=kept),
            expected_seq,
            id,
        )

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
    ) -> int:
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
        return self._append(
            lambda seq, ts, eid: UsageRecorded(
                seq=seq,
                ts=ts,
                id=eid,
                model=model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cached_tokens=cached_tokens,
                total_tokens=total,
                call_id=call_id,
            ),
            expected_seq,
            id,
        )

    def retract(
        self, count: int = 1, *, expected_seq: int | None = None, id: str | None = None
    ) -> int:
        """Withdraw the newest ``count`` live messages (e.g. a partial stream)."""
        _check_count("count", count, minimum=1)
        if count > len(self._state.messages):
            raise InvalidEventError(
                f"cannot retract {count} of {len(self._state.messages)} messages"
            )
        return self._append(
            lambda seq, ts, eid: Retracted(seq=seq, ts=ts, id=eid, count=count), expected_seq, id
        )

    def set_lifecycle(
        self,
        state: LifecycleState,
        reason: EndReason | None = None,
        *,
        expected_seq: int | None = None,
        id: str | None = None,
    ) -> int:
        """Move the session to a lifecycle state, with an end reason when it ends."""
        if state not in LIFECYCLE_STATES:
            raise InvalidEventError(
                f"lifecycle state must be one of {', '.join(LIFECYCLE_STATES)}, not {state!r}"
            )
        if reason is not None and reason not in END_REASONS:
            raise InvalidEventError(
                f"end reason must be one of {', '.join(END_REASONS)}, not {reason!r}"
            )
        return self._append(
            lambda seq, ts, eid: LifecycleChanged(seq=seq, ts=ts, id=eid, state=state, reason=reason),
            expected_seq,
            id,
        )

    def flush(self) -> None:
        """Make every line written so far durable (an fsync, whatever the durability mode)."""
        with self._lock:
            self._check_open()
            self._io.sync()
            with self._sync_cond:
                self._synced = self._written

    def close(self) -> None:
        """Sync what is pending, release the writer lock; later appends raise."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._durability != "none" and self._synced < self._written:
                    self._io.sync()
            finally:
                self._closed = True
                self._io.close()
                if self._on_close is not None:
                    self._on_close(self)

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"the writer for session {self.key!r} is closed")

    def _transaction(self) -> AbstractContextManager[object]:
        # A shared log (PostgreSQL) has other writers: its io's ``transaction(state)`` locks the
        # session and folds their new events into ``state`` before the checks; its ``sync``
        # commits. File and memory logs have one writer and need none of that.
        self._check_open()
        begin = getattr(self._io, "transaction", None)
        if begin is None:
            return nullcontext()
        return cast(AbstractContextManager[object], begin(self._state))

    def refresh(self) -> int:
        """Fold in events other writers appended (shared stores only); return the last seq."""
        with self._lock, self._transaction():
            return self._state.seq

    def _check_id(self, event_id: str | None) -> None:
        if event_id is not None and (not isinstance(event_id, str) or not event_id or len(event_id) > 200):
            raise InvalidEventError(f"event id must be a non-empty str of at most 200 chars, not {event_id!r}")

    def _append(
        self,
        make: Callable[[int, datetime, str], KnownEvent],
        expected_seq: int | None,
        event_id: str | None,
        *,
        describe: Callable[[], str] | None = None,
    ) -> int:
        self._check_id(event_id)
        with self._lock, self._transaction():
            state = self._state
            if event_id is not None:
                done = state.ids.get(event_id)
                if done is not None:
                    return done
            if expected_seq is not None and expected_seq != state.seq:
                raise ConflictError(self.key, expected_seq, state.seq)
            event = make(state.seq + 1, datetime.now(UTC), event_id or new_event_id())
            try:
                line, h = encode_line(event, state.head, self._hash_key)
            except (TypeError, msgspec.EncodeError, OverflowError) as exc:
                why = describe() if describe is not None else str(exc)
                raise InvalidEventError(f"session {self.key!r}: {why}") from exc
            before = self._io.size()
            self._io.append(line)
            if self._durability == "always":
                try:
                    self._io.sync()
                except StorageError:
                    self._io.truncate(before)
                    raise
            event = msgspec.structs.replace(event, h=h)
            apply(state, event)
            self._written += 1
            ticket = self._written
            if self._on_append is not None:
                self._on_append(self, event)
        if self._durability == "batch":
            self._wait_durable(ticket)
        elif self._durability == "always":
            self._synced = ticket
        return event.seq

    def _wait_durable(self, ticket: int) -> None:
        """Group commit: return once an fsync covering line ``ticket`` has finished."""
        cond = self._sync_cond
        with cond:
            while True:
                if self._synced >= ticket:
                    return
                if self._failed is not None and self._failed[0] >= ticket:
                    raise self._failed[1]
                if not self._syncing:
                    break
                cond.wait()
            self._syncing = True
        if self._batch_window > 0:
            time.sleep(self._batch_window)
        target = self._written
        error: StorageError | None = None
        try:
            self._io.sync()
        except StorageError as exc:
            error = StorageError(
                exc.path, exc.action, exc.cause, durable_unknown=True
            )
        with cond:
            self._syncing = False
            if error is None:
                self._synced = max(self._synced, target)
            else:
                self._failed = (target, error)
            cond.notify_all()
        if error is not None:
            raise error

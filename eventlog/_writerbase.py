"""What the sync and the async writer share: a session's write state, and the handle over it.

:class:`LogBase` is one session's write state in one store: its I/O, folded state, durability,
group-commit horizon and sealing layer, and the one place a draft is staged against that state.
``SessionLog`` (sync) and ``AsyncSessionLog`` add only their locking and their waiting for
durability. :class:`WriterBase` is a writer handle over such a log (``store.session(key)``
gives a new one each call); ``SessionWriter`` and ``AsyncSessionWriter`` add only how an append
reaches the log and how the handle closes.

Invariants:
- A log's ``state`` is the one object every handle over it shows; ``closed`` on the log closes
  every handle, ``close()`` on a handle closes only that handle.
- :meth:`LogBase.stage` runs under the writer's serialisation, after catching up: a log that
  was cut back and reloaded first counts its lines from the reloaded seq, and a log whose fsync
  failed refuses (``StorageError(durable_unknown=True)``) before anything is staged.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import (
    Generic,
    Literal,
    NotRequired,
    Protocol,
    Self,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
)

from ._commit import GroupCommit
from ._errors import InvalidEventError, StoreClosedError
from ._events import KnownEvent
from ._fold import SessionState
from ._tokens import TokenCounter
from ._writeapi import Draft, Staged, WriteAPI, stage

Durability = Literal["always", "batch", "none"]
DURABILITIES: tuple[str, ...] = ("always", "batch", "none")

_R = TypeVar("_R")
_RC = TypeVar("_RC")
_L = TypeVar("_L", bound="LogBase")


class SessionIO(Protocol):
    """What a store gives a writer: one session's bytes."""

    name: str

    def transaction(self, state: SessionState) -> AbstractContextManager[object]:
        """A context manager around one write: lock the log and first fold into ``state`` what
        other writers appended (a log no one else writes may return a null context)."""

    def append(self, data: bytes) -> None:
        """Write all of ``data`` at the end, or raise StorageError leaving the log unchanged."""

    def sync(self) -> None:
        """Make everything appended so far durable, or raise StorageError."""

    def truncate(self, size: int) -> None:
        """Cut the log back to ``size`` bytes."""

    def size(self) -> int:
        """The log's length in bytes."""

    def close(self) -> None:
        """Release the session (and anything held for it)."""


def check_durability(durability: str) -> Durability:
    """Return ``durability`` if it is one of ``always``, ``batch``, ``none``; else raise."""
    if durability not in DURABILITIES:
        raise InvalidEventError(
            f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}"
        )
    return durability  # type: ignore[return-value]


class LogArgs(TypedDict):
    """What a log is made of (the keyword arguments of every log and of ``standalone``)."""

    key: str
    io: SessionIO
    state: SessionState
    durability: Durability
    hash_key: bytes
    token_counter: TokenCounter
    batch_window: NotRequired[float]


class LogBase:
    """One session's write state in one store, shared by every writer handle over it."""

    def __init__(self, **args: Unpack[LogArgs]) -> None:
        self.key = args["key"]
        self.io = args["io"]
        self.state = state = args["state"]
        self.durability = args["durability"]
        self.hash_key = args["hash_key"]
        self.token_counter = args["token_counter"]
        #: Seconds a group-commit leader waits for more appends before its fsync.
        self.batch_window = args.get("batch_window", 0.0)
        self.closed = False
        #: Seals an event for its line (an encrypted store arms it; None: written as is).
        self.seal: Callable[[KnownEvent], KnownEvent] | None = None
        #: Called with the state after each write, outside the log's lock (a store that can
        #: index the writer's own events arms it, so they leave memory; None: nothing).
        self.settle: Callable[[SessionState], None] | None = None
        #: Which lines are written and which are durable (see ``_commit``).
        self.commit = GroupCommit(state.seq, durable=self.durability != "none")

    @property
    def seq(self) -> int:
        """The seq of the last event this log knows of."""
        return self.state.seq

    @property
    def poisoned(self) -> bool:
        """An fsync failed: the log takes no more appends; the store opens a fresh one."""
        return self.commit.failure is not None

    def check_open(self) -> None:
        """Raise :class:`StoreClosedError` once the log is closed."""
        if self.closed:
            raise StoreClosedError(f"the writer for session {self.key!r} is closed")

    def rebase(self) -> None:
        """The state was reloaded from the log: count lines from its seq on."""
        self.commit.rebase(self.state.seq)

    def rebase_if_reloaded(self) -> None:
        """After catching up: if the log was cut back and reloaded, count lines from there."""
        if self.state.seq < self.commit.written:
            self.commit.rebase(self.state.seq)

    def stage(self, draft: Draft, expected_seq: int | None, event_id: str | None) -> Staged | int:
        """Stage ``draft`` against the state (caught up, serialised): see :func:`stage`."""
        state, commit = self.state, self.commit
        if state.seq < commit.written:  # the log was cut back and reloaded
            commit.rebase(state.seq)
        if commit.failure is not None:
            commit.check()
        return stage(
            state,
            draft,
            key=self.key,
            hash_key=self.hash_key,
            expected_seq=expected_seq,
            event_id=event_id,
            seal=self.seal,
        )


class WriterBase(WriteAPI[_R, _RC], Generic[_R, _RC, _L]):
    """A writer handle over a shared log (``_L``); see the module docstring."""

    _io: SessionIO
    #: The kind of log a standalone writer makes.
    _log_type: Callable[..., LogBase]

    def __init__(self, log: _L, *, owns_log: bool = False) -> None:
        self.key = log.key
        self._log = log
        self._io = log.io
        self._state = log.state
        self._count_tokens = log.token_counter
        self._owns_log = owns_log
        self._closed = False

    @classmethod
    def standalone(cls, **args: Unpack[LogArgs]) -> Self:
        """A writer with a log of its own over ``io`` (closing it closes ``io``)."""
        return cls(cast(_L, cls._log_type(**args)), owns_log=True)

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called (or the store closed, or the session was deleted)."""
        return self._closed or self._log.closed

    @property
    def log(self) -> _L:
        """The shared log this writer appends to."""
        return self._log

    @property
    def _seal(self) -> Callable[[KnownEvent], KnownEvent] | None:
        return self._log.seal

    @_seal.setter
    def _seal(self, seal: Callable[[KnownEvent], KnownEvent] | None) -> None:
        self._log.seal = seal

    def _check_open(self) -> None:
        if self.closed:  # a subclass may know more ways to be closed
            raise StoreClosedError(f"the writer for session {self.key!r} is closed")

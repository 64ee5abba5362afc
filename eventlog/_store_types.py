"""The store's public value types: open and cut reports, a read-only load, the store protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._codec import Problem, TornTail
from ._events import Event, Header
from ._fold import SessionState
from ._writer import SessionIO, SessionWriter


@dataclass(frozen=True, slots=True)
class OpenReport:
    """What opening a session found: a torn tail cut into quarantine, if any."""

    key: str
    created: bool = False
    torn: TornTail | None = None
    quarantine: str | None = None


@dataclass(frozen=True, slots=True)
class CutReport:
    """Bytes moved from the end of a log into quarantine by :meth:`BaseStore.cut`."""

    key: str
    offset: int
    bytes: int
    line: int
    quarantine: str | None


@dataclass(slots=True)
class LoadedLog:
    """A session read without its writer lock: header, events, state, and what was wrong."""

    key: str
    path: str
    header: Header
    events: list[Event]
    state: SessionState
    #: Byte length of the valid prefix.
    valid_length: int
    torn: TornTail | None = None
    #: A bad line in the middle (only when the caller asked for the readable prefix).
    bad: Problem | None = None
    #: The seq of the snapshot the state was restored from (0: none); ``events`` holds only
    #: the events after it.
    snapshot_seq: int = 0


class RawSession(Protocol):
    """A session's bytes opened for writing, with the writer lock held."""

    @property
    def io(self) -> SessionIO:
        """The session's I/O, lock held."""

    @property
    def data(self) -> bytes:
        """The log's bytes when it was opened."""

    @property
    def created(self) -> bool:
        """Whether this open created the file."""


@runtime_checkable
class Store(Protocol):
    """The store protocol: every backend (file, memory, PostgreSQL) offers these."""

    def session(self, key: str, *, metadata: Mapping[str, Any] | None = None) -> SessionWriter:
        """Return this process's writer for ``key``, creating the session on first use."""
        ...

    def load(self, key: str, *, prefix: bool = False) -> LoadedLog:
        """Read a session without taking its writer lock."""
        ...

    def read_bytes(self, key: str) -> bytes:
        """Return a session's log bytes exactly as stored."""
        ...

    def keys(self) -> list[str]:
        """Every session key in the store, sorted."""
        ...

    def exists(self, key: str) -> bool:
        """Whether a session with ``key`` exists."""
        ...

    def delete(self, key: str) -> bool:
        """Remove a session for good; True if it existed."""
        ...

    def close(self) -> None:
        """Sync and close every open writer."""
        ...

"""sessionledger: an event-sourced, hash-chained session log for LLM agents.

The everyday API lives here; the parts live one level down:

- :mod:`sessionledger.eventlog`: event types, the line codec and hash chain, stores, writers;
- :mod:`sessionledger.projections`: LLM history, the session catalog, snapshots, stats;
- :mod:`sessionledger.replay`: recovery, verify and repair, time travel, import and export;
- :mod:`sessionledger.tools`: the ``sessionledger`` command line, the framework adapters
  (:mod:`sessionledger.tools.nanobot`, :mod:`sessionledger.tools.openai_agents`), benchmarks.

>>> import sessionledger
>>> store = sessionledger.MemoryStore()
>>> s = store.session("telegram:42")
>>> s.append_message("user", "Plan a trip to Kyoto")
1
>>> [m["content"] for m in sessionledger.history(s.state)]
['Plan a trip to Kyoto']
>>> sessionledger.verify(store).ok
True

Importing it loads neither pydantic (only the importers of foreign files use it) nor rich (only
the command line does).
"""

from __future__ import annotations

from . import eventlog, projections, replay
from ._naming import publish as _publish
from .eventlog import (
    AsyncFileStore,
    AsyncMemoryStore,
    AsyncPostgresStore,
    AsyncSessionWriter,
    CommitUnknownError,
    ConflictError,
    CorruptLogError,
    EventLogError,
    FileStore,
    InvalidEventError,
    LockedError,
    MemoryStore,
    NewerFormatError,
    NotALogError,
    PostgresStore,
    SessionNotFoundError,
    SessionState,
    SessionWriter,
    StorageError,
    StoreClosedError,
    UnsafePathError,
    to_data,
)
from .projections import SessionInfo, history, list_sessions
from .replay import follow, recover, repair, state_at, timeline, verify

__all__ = (
    "AsyncFileStore",
    "AsyncMemoryStore",
    "AsyncPostgresStore",
    "AsyncSessionWriter",
    "CommitUnknownError",
    "ConflictError",
    "CorruptLogError",
    "EventLogError",
    "FileStore",
    "InvalidEventError",
    "LockedError",
    "MemoryStore",
    "NewerFormatError",
    "NotALogError",
    "PostgresStore",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionState",
    "SessionWriter",
    "StorageError",
    "StoreClosedError",
    "UnsafePathError",
    "eventlog",
    "follow",
    "history",
    "list_sessions",
    "projections",
    "recover",
    "repair",
    "replay",
    "state_at",
    "timeline",
    "to_data",
    "verify",
)

_publish(eventlog, projections, replay, facade=__name__, names=__all__)

"""The write side: event types, the fold, stores and writers: what applications use.

The sibling packages' plumbing is public one level down: :mod:`sessionledger.eventlog.codec`
(line codec and hash chain) and :mod:`sessionledger.eventlog.backend` (log scans, view storage,
catalog columns, key stems).

>>> from sessionledger.eventlog import MemoryStore
>>> store = MemoryStore()
>>> s = store.session("telegram:42")
>>> s.append_message("user", "Plan a trip to Kyoto")
1
>>> s.state.messages[0].message["content"]
'Plan a trip to Kyoto'
"""

from ._async_store import AsyncBaseStore, AsyncFileStore, AsyncMemoryStore
from ._async_writer import AsyncSessionWriter
from ._codec import decode_log, verify_chain
from ._copy import CopiedSession, CopyReport, copy_store
from ._errors import (
    ConflictError,
    CorruptLogError,
    EventLogError,
    InvalidEventError,
    KeyUnavailableError,
    LockedError,
    NewerFormatError,
    NotALogError,
    SessionNotFoundError,
    StorageError,
    StoreClosedError,
    UnsafePathError,
)
from ._events import (
    END_REASONS,
    EVENT_TYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    LIFECYCLE_STATES,
    TRIM_REASONS,
    WITHHELD,
    Cleared,
    Compacted,
    Consolidated,
    ConversationResumed,
    EndReason,
    Erased,
    Event,
    Header,
    KnownEvent,
    LifecycleChanged,
    LifecycleState,
    MessageAppended,
    MetadataChanged,
    Redacted,
    Retracted,
    Trimmed,
    TrimReason,
    UnknownEvent,
    UsageRecorded,
)
from ._filestore import FileStore
from ._fold import (
    Compaction,
    EndedConversation,
    SessionState,
    UsageTotals,
    apply,
    fold,
    initial_state,
    state_enc_hook,
)
from ._idindex import IdIndex
from ._keystore import FileKeyStore, KeyProvider, KeyStore, LocalKeyFile, MemoryKeyStore
from ._lifecycle import CleanupReport, EndHook, TrashEntry, workspace_key, workspace_prefix
from ._memstore import MemoryStore
from ._msgindex import MessageList
from ._pg_io import CommitUnknownError
from ._pg_schema import SchemaVersionError
from ._portable import portable, to_data
from ._postgres import PostgresStore
from ._postgres_async import AsyncPostgresStore
from ._store import BaseStore
from ._store_types import CutReport, LoadedLog, OpenReport, Store
from ._tokens import AGENTS_ITEM_KEY, TiktokenCounter, TokenCounter, estimate_tokens
from ._views import SnapshotStatus
from ._writeapi import CompactionResult
from ._writer import DURABILITIES, Durability, SessionWriter

__all__ = (
    "AGENTS_ITEM_KEY",
    "DURABILITIES",
    "END_REASONS",
    "EVENT_TYPES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LIFECYCLE_STATES",
    "TRIM_REASONS",
    "WITHHELD",
    "AsyncBaseStore",
    "AsyncFileStore",
    "AsyncMemoryStore",
    "AsyncPostgresStore",
    "AsyncSessionWriter",
    "BaseStore",
    "CleanupReport",
    "Cleared",
    "CommitUnknownError",
    "Compacted",
    "Compaction",
    "CompactionResult",
    "ConflictError",
    "Consolidated",
    "ConversationResumed",
    "CopiedSession",
    "CopyReport",
    "CorruptLogError",
    "CutReport",
    "Durability",
    "EndHook",
    "EndReason",
    "EndedConversation",
    "Erased",
    "Event",
    "EventLogError",
    "FileKeyStore",
    "FileStore",
    "Header",
    "IdIndex",
    "InvalidEventError",
    "KeyProvider",
    "KeyStore",
    "KeyUnavailableError",
    "KnownEvent",
    "LifecycleChanged",
    "LifecycleState",
    "LoadedLog",
    "LocalKeyFile",
    "LockedError",
    "MemoryKeyStore",
    "MemoryStore",
    "MessageAppended",
    "MessageList",
    "MetadataChanged",
    "NewerFormatError",
    "NotALogError",
    "OpenReport",
    "PostgresStore",
    "Redacted",
    "Retracted",
    "SchemaVersionError",
    "SessionNotFoundError",
    "SessionState",
    "SessionWriter",
    "SnapshotStatus",
    "StorageError",
    "Store",
    "StoreClosedError",
    "TiktokenCounter",
    "TokenCounter",
    "TrashEntry",
    "TrimReason",
    "Trimmed",
    "UnknownEvent",
    "UnsafePathError",
    "UsageRecorded",
    "UsageTotals",
    "apply",
    "copy_store",
    "decode_log",
    "estimate_tokens",
    "fold",
    "initial_state",
    "portable",
    "state_enc_hook",
    "to_data",
    "verify_chain",
    "workspace_key",
    "workspace_prefix",
)

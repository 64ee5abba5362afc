"""The write side: event types, the line codec and hash chain, the fold, stores and writers.

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
from ._codec import (
    SUFFIX_LEN,
    ZERO_HASH,
    ChainCheck,
    Decoded,
    LineDecoder,
    Problem,
    TornTail,
    chain_hash,
    decode_log,
    encode_line,
    encode_lines,
    normalize_key,
    split_hash,
    verify_chain,
)
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
    preview_candidates,
    state_enc_hook,
)
from ._idindex import IdIndex
from ._keystore import FileKeyStore, KeyProvider, KeyStore, LocalKeyFile, MemoryKeyStore
from ._lifecycle import CleanupReport, EndHook, TrashEntry, workspace_key, workspace_prefix
from ._memstore import MemoryStore
from ._msgindex import MessageList
from ._names import key_to_stem, stem_to_key
from ._pg_common import CatalogRecord
from ._pg_io import CommitUnknownError
from ._pg_schema import SchemaVersionError
from ._portable import portable, to_data
from ._postgres import PostgresStore
from ._postgres_async import AsyncPostgresStore
from ._safeio import read_regular_file
from ._store import BaseStore
from ._store_types import CutReport, LoadedLog, OpenReport, Store
from ._tokens import AGENTS_ITEM_KEY, TiktokenCounter, TokenCounter, estimate_tokens
from ._views import LogStat, SnapshotStatus, ViewStorage
from ._writeapi import CompactionResult
from ._writer import DURABILITIES, Durability, SessionIO, SessionWriter, new_event_id

__all__ = (
    "AGENTS_ITEM_KEY",
    "DURABILITIES",
    "END_REASONS",
    "EVENT_TYPES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LIFECYCLE_STATES",
    "SUFFIX_LEN",
    "TRIM_REASONS",
    "WITHHELD",
    "ZERO_HASH",
    "AsyncBaseStore",
    "AsyncFileStore",
    "AsyncMemoryStore",
    "AsyncPostgresStore",
    "AsyncSessionWriter",
    "BaseStore",
    "CatalogRecord",
    "ChainCheck",
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
    "Decoded",
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
    "LineDecoder",
    "LoadedLog",
    "LocalKeyFile",
    "LockedError",
    "LogStat",
    "MemoryKeyStore",
    "MemoryStore",
    "MessageAppended",
    "MessageList",
    "MetadataChanged",
    "NewerFormatError",
    "NotALogError",
    "OpenReport",
    "PostgresStore",
    "Problem",
    "Redacted",
    "Retracted",
    "SchemaVersionError",
    "SessionIO",
    "SessionNotFoundError",
    "SessionState",
    "SessionWriter",
    "SnapshotStatus",
    "StorageError",
    "Store",
    "StoreClosedError",
    "TiktokenCounter",
    "TokenCounter",
    "TornTail",
    "TrashEntry",
    "TrimReason",
    "Trimmed",
    "UnknownEvent",
    "UnsafePathError",
    "UsageRecorded",
    "UsageTotals",
    "ViewStorage",
    "apply",
    "chain_hash",
    "copy_store",
    "decode_log",
    "encode_line",
    "encode_lines",
    "estimate_tokens",
    "fold",
    "initial_state",
    "key_to_stem",
    "new_event_id",
    "normalize_key",
    "portable",
    "preview_candidates",
    "read_regular_file",
    "split_hash",
    "state_enc_hook",
    "stem_to_key",
    "to_data",
    "verify_chain",
    "workspace_key",
    "workspace_prefix",
)

"""The write side: event types, the line codec and hash chain, the fold, stores and writers.

>>> from eventlog import MemoryStore
>>> store = MemoryStore()
>>> s = store.session("telegram:42")
>>> s.append_message("user", "Plan a trip to Kyoto")
1
>>> s.state.messages[0].message["content"]
'Plan a trip to Kyoto'
"""

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
from ._errors import (
    ConflictError,
    CorruptLogError,
    EventLogError,
    InvalidEventError,
    LockedError,
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
    Cleared,
    Compacted,
    Consolidated,
    EndReason,
    Event,
    Header,
    KnownEvent,
    LifecycleChanged,
    LifecycleState,
    MessageAppended,
    MetadataChanged,
    Retracted,
    Trimmed,
    TrimReason,
    UnknownEvent,
)
from ._filestore import FileStore
from ._fold import Compaction, SessionState, apply, fold, initial_state
from ._memstore import MemoryStore
from ._names import key_to_stem, stem_to_key
from ._store import BaseStore, CutReport, LoadedLog, OpenReport, Store
from ._tokens import TiktokenCounter, TokenCounter, estimate_tokens
from ._writer import DURABILITIES, Durability, SessionIO, SessionWriter, new_event_id

__all__ = (
    "DURABILITIES",
    "END_REASONS",
    "EVENT_TYPES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LIFECYCLE_STATES",
    "SUFFIX_LEN",
    "TRIM_REASONS",
    "ZERO_HASH",
    "BaseStore",
    "ChainCheck",
    "Cleared",
    "Compacted",
    "Compaction",
    "ConflictError",
    "Consolidated",
    "CorruptLogError",
    "CutReport",
    "Decoded",
    "Durability",
    "EndReason",
    "Event",
    "EventLogError",
    "FileStore",
    "Header",
    "InvalidEventError",
    "KnownEvent",
    "LifecycleChanged",
    "LifecycleState",
    "LineDecoder",
    "LoadedLog",
    "LockedError",
    "MemoryStore",
    "MessageAppended",
    "MetadataChanged",
    "NotALogError",
    "OpenReport",
    "Problem",
    "Retracted",
    "SessionIO",
    "SessionNotFoundError",
    "SessionState",
    "SessionWriter",
    "StorageError",
    "Store",
    "StoreClosedError",
    "TiktokenCounter",
    "TokenCounter",
    "TornTail",
    "Trimmed",
    "TrimReason",
    "UnknownEvent",
    "UnsafePathError",
    "apply",
    "chain_hash",
    "decode_log",
    "encode_line",
    "encode_lines",
    "estimate_tokens",
    "fold",
    "initial_state",
    "key_to_stem",
    "new_event_id",
    "normalize_key",
    "split_hash",
    "stem_to_key",
    "verify_chain",
)

"""The read side: LLM history, session catalog, snapshots and stats, all derived from the log."""

from sessionledger.eventlog.preview import (
    PREVIEW_MAX_CHARS,
    content_text,
    preview_text,
    sanitize_assistant_text,
    session_preview,
)

from ._catalog import (
    CatalogFilter,
    catalog_heads,
    catalog_rows,
    list_sessions,
    rebuild_catalog,
    select,
)
from ._catalog_row import SessionInfo
from ._compaction_policy import CompactionPolicy
from ._conversation_row import ConversationInfo
from ._conversations import list_conversations
from ._history import (
    ATTACHMENT_HINTS_MAX,
    DEFAULT_MAX_MESSAGES,
    SUMMARY_PREFIX,
    SUMMARY_ROLE,
    attachment_hints,
    history,
    history_with_tokens,
)
from ._orphans import declared_call_ids, legal_start, orphaned_tool_indices
from ._sanitize import image_breadcrumb
from ._sdk_items import describe_item, item_call, sdk_item
from ._sealed_rows import open_sessions as open_sealed_rows
from ._search import SearchHit, drop_search, rebuild_search, refresh_search, search, searchable_text
from ._session_id import SessionID
from ._snapshots import rebuild_snapshot, snapshot_status, write_snapshot
from ._stats import StoreStats, stats_of, store_stats
from ._trimming import (
    FILE_MAX_MESSAGES,
    TrimPlan,
    apply_plan,
    file_cap,
    retain_recent_legal_suffix,
    truncate_to_budget,
)
from ._usage import (
    StoreUsage,
    context_start,
    context_tokens,
    store_usage,
    token_usage_ratio,
    usage_of,
)

__all__ = (
    "ATTACHMENT_HINTS_MAX",
    "DEFAULT_MAX_MESSAGES",
    "FILE_MAX_MESSAGES",
    "PREVIEW_MAX_CHARS",
    "SUMMARY_PREFIX",
    "SUMMARY_ROLE",
    "CatalogFilter",
    "CompactionPolicy",
    "ConversationInfo",
    "SearchHit",
    "SessionID",
    "SessionInfo",
    "StoreStats",
    "StoreUsage",
    "TrimPlan",
    "apply_plan",
    "attachment_hints",
    "catalog_heads",
    "catalog_rows",
    "content_text",
    "context_start",
    "context_tokens",
    "declared_call_ids",
    "describe_item",
    "drop_search",
    "file_cap",
    "history",
    "history_with_tokens",
    "image_breadcrumb",
    "item_call",
    "legal_start",
    "list_conversations",
    "list_sessions",
    "open_sealed_rows",
    "orphaned_tool_indices",
    "preview_text",
    "rebuild_catalog",
    "rebuild_search",
    "rebuild_snapshot",
    "refresh_search",
    "retain_recent_legal_suffix",
    "sanitize_assistant_text",
    "sdk_item",
    "search",
    "searchable_text",
    "select",
    "session_preview",
    "snapshot_status",
    "stats_of",
    "store_stats",
    "store_usage",
    "token_usage_ratio",
    "truncate_to_budget",
    "usage_of",
    "write_snapshot",
)

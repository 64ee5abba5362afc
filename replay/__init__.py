"""Replay: crash recovery, verify and repair, time travel, audit timeline, import/export, follow.

>>> from sessionledger.eventlog import MemoryStore
>>> from sessionledger import replay
>>> store = MemoryStore()
>>> s = store.session("telegram:42")
>>> s.append_message("user", "Plan a trip to Kyoto")
1
>>> s.update_metadata(set={"title": "Kyoto trip"})
2
>>> replay.verify(store).ok
True
>>> replay.state_at(store, "telegram:42", seq=1).metadata
{}
>>> [e.summary for e in replay.timeline(store, "telegram:42", since=2)]
['metadata: set title']
"""

import typing as _typing

from ._document import Document, session_document
from ._errors import ForeignFormatError, PointNotFoundError, RecoverRefusedError, RedactionError
from ._export import (
    ExportedFile,
    ExportReport,
    export_jsonl,
    export_nanobot,
    export_store,
    nanobot_lines,
    nanobot_name,
)
from ._export_md import export_markdown, render_markdown
from ._follow import Follow, FollowPoint, PollingWaker, Waker, follow
from ._fork import fork
from ._importing import ImportReport, SessionImport
from ._modelview import ModelView, ViewRow, model_view
from ._recover import recover
from ._redact import MASK, NO_REDACTION, Redaction
from ._repair import RepairReport, repair
from ._report import Finding, RecoverReport, SessionRecover, SessionVerify, VerifyReport
from ._timeline import (
    CompactionChange,
    StateDiff,
    TimelineEntry,
    describe_event,
    diff,
    diff_states,
    timeline,
)
from ._timetravel import state_at
from ._transcript import Item, Replaced, ToolCall, build_items, message_item
from ._verify import check_log, verify, verify_session

if _typing.TYPE_CHECKING:
    from ._import_json import SessionData, import_session_json, parse_session_json
    from ._import_log import import_log, import_path
    from ._import_nanobot import NanobotSession, import_nanobot, parse_nanobot

# The importers validate foreign files with pydantic; it loads only when one of them is used.
_LAZY = {
    "SessionData": "_import_json",
    "import_session_json": "_import_json",
    "parse_session_json": "_import_json",
    "import_log": "_import_log",
    "import_path": "_import_log",
    "NanobotSession": "_import_nanobot",
    "import_nanobot": "_import_nanobot",
    "parse_nanobot": "_import_nanobot",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = (
    "MASK",
    "NO_REDACTION",
    "CompactionChange",
    "Document",
    "ExportReport",
    "ExportedFile",
    "Finding",
    "Follow",
    "FollowPoint",
    "ForeignFormatError",
    "ImportReport",
    "Item",
    "ModelView",
    "NanobotSession",
    "PointNotFoundError",
    "PollingWaker",
    "RecoverRefusedError",
    "RecoverReport",
    "Redaction",
    "RedactionError",
    "RepairReport",
    "Replaced",
    "SessionData",
    "SessionImport",
    "SessionRecover",
    "SessionVerify",
    "StateDiff",
    "TimelineEntry",
    "ToolCall",
    "VerifyReport",
    "ViewRow",
    "Waker",
    "build_items",
    "check_log",
    "describe_event",
    "diff",
    "diff_states",
    "export_jsonl",
    "export_markdown",
    "export_nanobot",
    "export_store",
    "follow",
    "fork",
    "import_log",
    "import_nanobot",
    "import_path",
    "import_session_json",
    "message_item",
    "model_view",
    "nanobot_lines",
    "nanobot_name",
    "parse_nanobot",
    "parse_session_json",
    "recover",
    "render_markdown",
    "repair",
    "session_document",
    "state_at",
    "timeline",
    "verify",
    "verify_session",
)

"""A drop-in for nanobot's session manager: the same names and behaviour, an event log beneath.

Change one import and an agent written against nanobot runs unchanged::

    from sessionledger.tools.nanobot import Session, SessionManager   # was: from nanobot.session.manager ...

    manager = SessionManager(workspace)
    session = manager.get_or_create("telegram:42")
    session.add_message("user", "Plan a trip to Kyoto")
    session.messages.append({"role": "assistant", "content": "Sure."})   # direct edits work
    manager.save(session)          # appends two ``message`` events; never rewrites a file
    session.get_history(max_messages=120, max_tokens=8_000)

The sessions live in ``<workspace>/sessions/.eventlog/``; nanobot's own ``sessions/*.jsonl``
files are imported once, on first access (see :mod:`tools._nanobot_manager`).
"""

from ._import import LEDGER_NAME
from ._manager import STORE_DIRNAME, SessionManager
from ._session import FILE_MAX_MESSAGES, Session

__all__ = (
    "FILE_MAX_MESSAGES",
    "LEDGER_NAME",
    "STORE_DIRNAME",
    "Session",
    "SessionManager",
)

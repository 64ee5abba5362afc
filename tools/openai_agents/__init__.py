"""The OpenAI Agents SDK's session protocol on the event log: ``EventLogSession``.

``Runner.run(agent, input, session=EventLogSession("chat-42", store))`` keeps every conversation
item as a ``message`` event; ``pop_item`` appends ``retracted``, ``clear_session`` ``cleared``.
The SDK itself (``pip install 'sessionledger[openai-agents]'``) is needed only to run agents.

- Items are stored as message dicts (:mod:`._items`): chat messages as they are, other items
  wrapped under :data:`ITEM_KEY`.
- ``get_items(limit)`` returns exactly the newest ``limit`` items; ``session_settings`` is a
  ``SessionSettings`` or a dict, default ``SessionSettings()``, as the SDK's sessions take it.
- The SDK's automatic compaction finds the snapshot hook its built-in sessions have
  (:mod:`._compaction`), so ``OpenAIResponsesCompactionSession`` and ``EncryptedSession``
  compact a long history as they do on ``SQLiteSession``.
- The store may be sync (a worker thread when it syncs) or async (``AsyncFileStore``,
  ``AsyncPostgresStore`` ...); both under asyncio and trio.
"""

from ._items import ITEM_KEY, item_from_message, message_from_item
from ._session import EventLogSession, SessionClosedError

__all__ = (
    "ITEM_KEY",
    "EventLogSession",
    "SessionClosedError",
    "item_from_message",
    "message_from_item",
)

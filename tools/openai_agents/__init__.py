"""The OpenAI Agents SDK's session protocol on the event log: ``EventLogSession``.

``Runner.run(agent, input, session=EventLogSession("chat-42", store))`` keeps every conversation
item as a ``message`` event; ``pop_item`` appends ``retracted``, ``clear_session`` ``cleared``.
The SDK itself (``pip install 'sessionledger[openai-agents]'``) is needed only to run agents: this
module imports it for type checking only.

Invariants:
- Every item is kept whole. An item with a non-empty string ``role`` (a chat message) is the
  event's message dict exactly, so the history, catalog and previews read it like any message.
  Any other item (``function_call``, ``function_call_output``, ``reasoning`` ...) is stored as
  ``{"role": <its type, or "item">, "_agents_item": <the item>}`` and read back as the item.
  An item that has a role and happens to hold an ``_agents_item`` key is wrapped too, so reading
  back is never ambiguous.
- ``get_items`` returns independent copies: mutating them never changes the log or its state.
- ``add_items`` checks every item before writing any: bad input writes nothing.
- Blocking work (an fsync, opening a log) runs in a worker thread when the store syncs
  (``durability`` other than ``"none"``); otherwise the call is direct. Works under asyncio and
  trio (anyio).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import anyio.to_thread
import msgspec

from sessionledger.eventlog import (
    ConflictError,
    FileStore,
    InvalidEventError,
    SessionWriter,
    Store,
)

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = ("ITEM_KEY", "EventLogSession", "item_from_message", "message_from_item")

#: The key under which an item without a role is kept inside its message dict.
ITEM_KEY: Final = "_agents_item"

_T = TypeVar("_T")
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def message_from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message dict an SDK item is stored as (see the module's invariants)."""
    if not isinstance(item, Mapping):
        raise InvalidEventError(f"an item must be a dict, not {type(item).__name__}")
    role = item.get("role")
    if isinstance(role, str) and role and ITEM_KEY not in item:
        return dict(item)
    kind = item.get("type")
    return {"role": kind if isinstance(kind, str) and kind else "item", ITEM_KEY: dict(item)}


def item_from_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK item a stored message dict holds (the inverse of :func:`message_from_item`)."""
    if ITEM_KEY in message:
        return dict(message[ITEM_KEY])
    return dict(message)


class EventLogSession:
    """An OpenAI Agents SDK ``Session`` whose items live in an event-log session.

    Args:
        session_id: the SDK's session id; it is the log's session key.
        store: a store (``FileStore``, ``MemoryStore``, ``PostgresStore`` ...) or a directory
            for a ``FileStore`` that this session owns and closes.
        session_settings: the SDK's settings; ``limit`` is the default for ``get_items``.
        offload: run store calls in a worker thread (default: when the store syncs).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store | str | os.PathLike[str],
        *,
        session_settings: SessionSettings | None = None,
        offload: bool | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidEventError(f"session_id must be a non-empty str, not {session_id!r}")
        self.session_id = session_id
        self.session_settings = session_settings
        self._owns_store = isinstance(store, (str, os.PathLike))
        self.store: Store = (
            FileStore(Path(store)) if isinstance(store, (str, os.PathLike)) else store
        )
        if offload is None:
            offload = getattr(self.store, "durability", "always") != "none"
        self._offload = offload
        self._writer: SessionWriter | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EventLogSession({self.session_id!r}, {self.store!r})"

    # -- the SDK's protocol ------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the newest ``limit`` of them."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        return await self._run(lambda: self._get_items(limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items, one ``message`` event each, in order."""
        messages = [message_from_item(cast(Mapping[str, Any], item)) for item in items]
        if not messages:
            return
        try:
            messages = _decode(_encode(messages))
        except (TypeError, msgspec.EncodeError, OverflowError) as exc:
            raise InvalidEventError(
                f"session {self.session_id!r}: an item is not JSON-serialisable: {exc}"
            ) from exc
        await self._run(lambda: self._add(messages))

    async def pop_item(self) -> TResponseInputItem | None:
        """Withdraw the newest item (a ``retracted`` event) and return it; None when empty."""
        return await self._run(self._pop)

    async def clear_session(self) -> None:
        """Drop every item (a ``cleared`` event)."""
        await self._run(self._clear)

    # -- beyond the protocol -----------------------------------------------------------------

    def close(self) -> None:
        """Release the log (and close the store when this session opened it)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if self._owns_store:
            self.store.close()
        elif writer is not None:
            writer.close()

    # -- internals ---------------------------------------------------------------------------

    async def _run(self, fn: Callable[[], _T]) -> _T:
        if self._offload:
            return await anyio.to_thread.run_sync(fn)
        return fn()

    def _open(self, *, create: bool) -> SessionWriter | None:
        with self._lock:
            writer = self._writer
            if writer is not None and not writer.closed:
                return writer
            if not create and not self.store.exists(self.session_id):
                return None
            self._writer = self.store.session(self.session_id)
            return self._writer

    def _get_items(self, limit: int | None) -> list[TResponseInputItem]:
        writer = self._open(create=False)
        if writer is None:
            return []
        live = writer.state.messages
        if limit is not None and limit >= 0:
            live = live[len(live) - limit :] if limit else []
        items = [item_from_message(event.message) for event in live]
        return cast("list[TResponseInputItem]", _decode(_encode(items)))

    def _add(self, messages: list[dict[str, Any]]) -> None:
        writer = self._open(create=True)
        assert writer is not None
        for message in messages:
            writer.append_message_dict(message)

    def _pop(self) -> TResponseInputItem | None:
        writer = self._open(create=False)
        if writer is None:
            return None
        for _ in range(8):  # another writer of a shared store may append in between
            live = writer.state.messages
            if not live:
                return None
            seq = writer.seq
            item = _decode(_encode(item_from_message(live[-1].message)))
            try:
                writer.retract(1, expected_seq=seq)
            except ConflictError:
                writer.refresh()
                continue
            return cast("TResponseInputItem", item)
        raise ConflictError(self.session_id, writer.seq, writer.seq)

    def _clear(self) -> None:
        writer = self._open(create=False)
        if writer is not None:
            writer.clear()

"""``EventLogSession``: the OpenAI Agents SDK's session protocol on an event-log session.

Invariants:
- ``get_items(limit)`` is the newest ``limit`` items exactly (``None`` or a negative limit: all
  of them; 0: none), oldest first, as independent copies.
- ``add_items`` checks every item before writing any: bad input writes nothing.
- ``pop_item`` and the compaction snapshot's ``replace_suffix`` guard their first write with
  ``expected_seq``, so another writer of a shared store in between is noticed, never overwritten.
- With a sync store, blocking work runs in a worker thread when the store syncs (``durability``
  other than ``"none"``); with an async store (``AsyncFileStore``, ``AsyncPostgresStore`` ...)
  every call is the store's own coroutine. Works under asyncio and trio (anyio).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import anyio.to_thread
import msgspec

from sessionledger.eventlog import (
    AsyncBaseStore,
    AsyncSessionWriter,
    ConflictError,
    FileStore,
    InvalidEventError,
    SessionState,
    SessionWriter,
    Store,
    StoreClosedError,
)

from . import _settings
from ._items import item_from_message, message_from_item, window

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

_T = TypeVar("_T")
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
#: How often ``pop_item`` retries when another writer appended in between.
_POP_RETRIES = 8

Prune = Callable[[Any], bool]


class SessionClosedError(StoreClosedError, RuntimeError):
    """The session was closed; like the SDK's own sessions, it is a ``RuntimeError`` too."""


def _copies(state: SessionState, start: int, stop: int | None = None) -> list[Any]:
    live = state.messages[start:stop]
    return cast(list[Any], _decode(_encode([item_from_message(e.message) for e in live])))


class EventLogSession:
    """An OpenAI Agents SDK ``Session`` whose items live in an event-log session.

    Args:
        session_id: the SDK's session id; it is the log's session key.
        store: a sync store (``FileStore``, ``MemoryStore``, ``PostgresStore`` ...), an async
            store (``AsyncFileStore``, ``AsyncPostgresStore`` ...), or a directory for a
            ``FileStore`` that this session owns and closes.
        session_settings: the SDK's settings, a ``SessionSettings`` or a dict of its fields
            (default ``SessionSettings()``); ``limit`` is the default for ``get_items``.
        offload: with a sync store, run store calls in a worker thread (default: when the
            store syncs).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncBaseStore | str | os.PathLike[str],
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        offload: bool | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidEventError(f"session_id must be a non-empty str, not {session_id!r}")
        self.session_id = session_id
        self.session_settings = _settings.coerce(session_settings)
        _settings.limit_of(self.session_settings)
        self._owns_store = isinstance(store, (str, os.PathLike))
        self.store: Store | AsyncBaseStore = (
            FileStore(Path(store)) if isinstance(store, (str, os.PathLike)) else store
        )
        self._async = isinstance(self.store, AsyncBaseStore)
        if offload is None:
            offload = getattr(self.store, "durability", "always") != "none"
        self._offload = offload and not self._async
        self._writer: SessionWriter | None = None
        self._awriter: AsyncSessionWriter | None = None
        self._lock = threading.Lock()
        self._alock: anyio.Lock | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"EventLogSession({self.session_id!r}, {self.store!r})"

    # -- the SDK's protocol ------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, exactly the newest ``limit``."""
        self._check_open()
        if limit is None:
            limit = _settings.limit_of(self.session_settings)
        state = await self._state()
        if state is None:
            return []
        if limit == 0:
            return []
        return _copies(state, window(len(state.messages), limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items, one ``message`` event each, in order."""
        self._check_open()
        messages = _checked(self.session_id, items)
        if not messages:
            return
        if self._async:
            writer = await self._aopen(create=True)
            assert writer is not None
            async with self._async_lock():
                for message in messages:
                    await writer.append_message_dict(message)
            return

        def add() -> None:
            writer = self._open(create=True)
            assert writer is not None
            for message in messages:
                writer.append_message_dict(message)

        await self._run(add, settle=True)

    async def pop_item(self) -> TResponseInputItem | None:
        """Withdraw the newest item (a ``retracted`` event) and return it; None when empty."""
        self._check_open()
        if self._async:
            return await self._apop()
        return await self._run(self._pop, settle=True)

    async def _pop_item_with_validation(
        self, validate: Callable[[Any], None] | None = None
    ) -> TResponseInputItem | None:
        """``pop_item`` that first passes the newest item to ``validate`` (in a worker thread);
        when it raises, nothing is withdrawn. The SDK's ``EncryptedSession`` calls this on the
        sessions it treats as SQLite ones, to authenticate before it removes."""
        self._check_open()
        if self._async:
            return await self._apop(validate)
        return await _settled(lambda: self._pop(validate))

    async def clear_session(self) -> None:
        """Drop every item (a ``cleared`` event)."""
        self._check_open()
        if self._async:
            awriter = await self._aopen(create=False)
            if awriter is not None:
                await awriter.clear()
            return

        def clear() -> None:
            writer = self._open(create=False)
            if writer is not None:
                writer.clear()

        await self._run(clear, settle=True)

    # -- the hook the SDK's compaction reads (see _compaction) ---------------------------------

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Prune | None = None
    ) -> Any:
        """The newest ``limit`` items and a guarded suffix replacement, for the SDK's compaction."""
        from ._compaction import snapshot

        return await snapshot(self, limit, prune_prefix)

    # -- beyond the protocol -----------------------------------------------------------------

    def close(self) -> None:
        """Release the log (and close a store this session opened); sync stores only.

        Every later call raises :class:`SessionClosedError`.
        """
        self._closed = True
        with self._lock:
            writer, self._writer = self._writer, None
        if self._owns_store:
            cast(Store, self.store).close()
        elif writer is not None:
            writer.close()

    async def aclose(self) -> None:
        """Release the log, with a sync or an async store."""
        self._closed = True
        if self._async:
            writer, self._awriter = self._awriter, None
            if writer is not None:
                await writer.close()
            return
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"{type(self).__name__} is closed")

    async def _run(self, fn: Callable[[], _T], *, settle: bool = False) -> _T:
        if self._offload:
            return await (_settled(fn) if settle else anyio.to_thread.run_sync(fn))
        return fn()

    def _async_lock(self) -> anyio.Lock:
        if self._alock is None:
            self._alock = anyio.Lock()
        return self._alock

    async def _state(self) -> SessionState | None:
        if self._async:
            awriter = await self._aopen(create=False)
            return None if awriter is None else awriter.state
        writer = await self._run(lambda: self._open(create=False))
        return None if writer is None else writer.state

    def _open(self, *, create: bool) -> SessionWriter | None:
        store = cast(Store, self.store)
        with self._lock:
            writer = self._writer
            if writer is not None and not writer.closed:
                return writer
            if not create and not store.exists(self.session_id):
                return None
            self._writer = store.session(self.session_id)
            return self._writer

    async def _aopen(self, *, create: bool) -> AsyncSessionWriter | None:
        store = cast(AsyncBaseStore, self.store)
        writer = self._awriter
        if writer is not None and not writer.closed:
            return writer
        if not create and not await store.exists(self.session_id):
            return None
        self._awriter = await store.session(self.session_id)
        return self._awriter

    def _pop(self, validate: Callable[[Any], None] | None = None) -> TResponseInputItem | None:
        writer = self._open(create=False)
        if writer is None:
            return None
        for _ in range(_POP_RETRIES):  # another writer of a shared store may append in between
            live = writer.state.messages
            if not live:
                return None
            seq = writer.seq
            item = _copies(writer.state, len(live) - 1)[0]
            if validate is not None:
                validate(_decode(_encode(item)))
            try:
                writer.retract(1, expected_seq=seq)
            except ConflictError:
                writer.refresh()
                continue
            return cast("TResponseInputItem", item)
        raise ConflictError(self.session_id, writer.seq, writer.seq)

    async def _apop(
        self, validate: Callable[[Any], None] | None = None
    ) -> TResponseInputItem | None:
        writer = await self._aopen(create=False)
        if writer is None:
            return None
        async with self._async_lock():
            live = writer.state.messages
            if not live:
                return None
            item = _copies(writer.state, len(live) - 1)[0]
            if validate is not None:
                await anyio.to_thread.run_sync(validate, _decode(_encode(item)))
            await writer.retract(1, expected_seq=writer.seq)
            return cast("TResponseInputItem", item)

    async def _locked(self, fn: Callable[[], _T] | Callable[[], Awaitable[_T]]) -> _T:
        """Run ``fn`` under this session's writer serialisation (a thread or the async lock)."""
        if self._async:
            async with self._async_lock():
                return await cast(Callable[[], Awaitable[_T]], fn)()
        return await self._run(cast(Callable[[], _T], fn), settle=True)


async def _settled(fn: Callable[[], _T]) -> _T:
    """Run ``fn`` in a worker thread and wait for its outcome even when cancelled meanwhile.

    A write the caller cancels still finishes (or fails) before the cancellation is raised, so
    the caller never goes on while the log may still change (the SDK's own sessions do the
    same). Under trio a shielded scope does it; asyncio's ``Task.cancel`` needs the loop below.
    """
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): its cancellation goes through scopes
        with anyio.CancelScope(shield=True):
            return await anyio.to_thread.run_sync(fn)
    task = asyncio.ensure_future(anyio.to_thread.run_sync(fn))
    cancelled: BaseException | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller gets
        raise cancelled
    return task.result()


def _checked(key: str, items: list[Any]) -> list[dict[str, Any]]:
    """Every item as its message dict, checked and copied before anything is written."""
    messages = [message_from_item(cast(Mapping[str, Any], item)) for item in items]
    try:
        return cast(list[dict[str, Any]], _decode(_encode(messages)))
    except (TypeError, msgspec.EncodeError, OverflowError) as exc:
        raise InvalidEventError(
            f"session {key!r}: an item is not JSON-serialisable: {exc}"
        ) from exc

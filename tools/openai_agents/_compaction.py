"""The compaction snapshot the SDK's own sessions give its automatic compaction.

The Agents SDK (0.24) compacts a session automatically only when it can match the newest
stored items to the model exchange it just had. Its built-in sessions (``SQLiteSession``,
``AsyncSQLiteSession``, ``SQLAlchemySession``) answer a ``_get_compaction_snapshot(limit, *,
prune_prefix=None)`` call with the newest ``limit`` items, whether they are all of them, and a
``replace_suffix(start, output)`` that swaps the items from ``start`` on for the compaction's
output, but only if they are still the newest ones. Without it the SDK reads the whole
history and skips compaction unless all of it matches. The SDK documents no public way to do
this; the hook is found by name (``OpenAIResponsesCompactionSession`` and ``EncryptedSession``
look it up with ``getattr``), so this is it. If a newer SDK drops the snapshot type, the hook
returns ``None`` and the SDK falls back to its full read.

In the log: ``replace_suffix`` is a ``trimmed`` event for a pruned prefix (``prune_prefix``:
``EncryptedSession``'s expired items, oldest first, contiguous), a ``retracted`` event for the
replaced items and one ``message`` event per output item, the first guarded by
``expected_seq``. The replaced items stay in the log, behind the ``retracted`` event, so
nothing is lost even if the process dies between the retract and the last append.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sessionledger.eventlog import ConflictError, SessionState

from ._session import Prune, _checked, _copies

if TYPE_CHECKING:
    from ._session import EventLogSession


def _snapshot_type() -> Any:
    try:
        from agents.memory.session import _CompactionSnapshot
    except ImportError:
        return None
    return _CompactionSnapshot


def _pruned(state: SessionState, before: int, prune: Prune | None) -> int:
    """How many of the oldest live items (before index ``before``) ``prune`` drops."""
    if prune is None:
        return 0
    count = 0
    for item in _copies(state, 0, before):
        if not prune(item):
            break
        count += 1
    return count


async def snapshot(session: EventLogSession, limit: int, prune: Prune | None) -> Any:
    """The SDK's ``_CompactionSnapshot`` for ``session`` (None without the SDK's type)."""
    kind = _snapshot_type()
    if kind is None or limit <= 0:
        return None
    state = await session._state()
    if state is None:
        return kind([], True, _nothing)
    live = state.messages
    start = max(0, len(live) - limit)
    seqs = [event.seq for event in live[start:]]
    items = _copies(state, start)
    complete = start == 0

    async def replace_suffix(first: int, output: list[Any]) -> bool:
        expected = seqs[first:]
        if not expected:
            return False
        messages = _checked(session.session_id, output)
        if session._async:
            return bool(
                await session._locked(lambda: _areplace(session, expected, messages, prune))
            )
        return bool(await session._locked(lambda: _replace(session, expected, messages, prune)))

    return kind(items, complete, replace_suffix)


async def _nothing(_start: int, _output: list[Any]) -> bool:
    return False


def _plan(state: SessionState, expected: list[int], prune: Prune | None) -> int | None:
    """How many items to prune first, or None when the suffix is no longer the newest."""
    live = state.messages
    if [event.seq for event in live[len(live) - len(expected) :]] != expected:
        return None
    return _pruned(state, len(live) - len(expected), prune)


def _replace(
    session: EventLogSession,
    expected: list[int],
    messages: list[dict[str, Any]],
    prune: Prune | None,
) -> bool:
    writer = session._open(create=False)
    if writer is None:
        return False
    seq = writer.seq
    drop = _plan(writer.state, expected, prune)
    if drop is None:
        return False
    try:
        if drop:
            writer.trim(drop, "truncate", expected_seq=seq)
            seq = writer.seq
        writer.retract(len(expected), expected_seq=seq)
    except ConflictError:
        return False
    for message in messages:
        writer.append_message_dict(message)
    return True


async def _areplace(
    session: EventLogSession,
    expected: list[int],
    messages: list[dict[str, Any]],
    prune: Prune | None,
) -> bool:
    writer = await session._aopen(create=False)
    if writer is None:
        return False
    seq = writer.seq
    drop = _plan(writer.state, expected, prune)
    if drop is None:
        return False
    try:
        if drop:
            await writer.trim(drop, "truncate", expected_seq=seq)
            seq = writer.seq
        await writer.retract(len(expected), expected_seq=seq)
    except ConflictError:
        return False
    for message in messages:
        await writer.append_message_dict(message)
    return True

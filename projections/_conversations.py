"""Conversations as first-class rows: every conversation of every session, from the catalog.

Rules:
- The rows come from the session catalog (its entries keep each session's ended conversations
  beside its row), never from a log scan: the cost is a listing's, plus one pass over the
  conversations.
- Order ``updated`` (default) is newest activity first (an ended conversation's activity is when
  it ended), ties by key, then newest start first; ``started`` is newest start first; ``key`` is
  by key, then oldest start first. Filters, then offset and limit, as :func:`list_sessions` does.
- A process keeps the last flattened list per catalog (while the catalog's rows are unchanged),
  so listing again costs the filter and the page.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from operator import attrgetter
from typing import Final, Literal

from sessionledger.eventlog import BaseStore, InvalidEventError
from sessionledger.eventlog.backend import catalog_source

from ._catalog import CatalogFilter, _refresh, catalog_conversations
from ._catalog_file import Catalog
from ._catalog_log import name_for
from ._catalog_row import SessionInfo
from ._conversation_row import ConversationInfo
from ._pg_catalog import CatalogRecords, ended_of_record, infos_from_records

ConversationOrder = Literal["updated", "started", "key"]
CONVERSATION_ORDERS: Final = ("updated", "started", "key")


Ended = dict[str, tuple[ConversationInfo, ...]]


def current_row(info: SessionInfo, ended: tuple[ConversationInfo, ...] = ()) -> ConversationInfo:
    """The row of a session's current conversation (``ended``: its ended ones, oldest first)."""
    return ConversationInfo(
        key=info.key,
        start_seq=info.conversation_start,
        current=True,
        title=info.title,
        preview=info.preview,
        messages=info.messages,
        tokens=info.tokens,
        started_at=ended[-1].updated_at if ended else info.created_at,
        updated_at=info.updated_at,
        end_reason="archive" if info.state == "archived" else None,
        state=info.state,
        resumed_from=info.resumed_from,
    )


def conversations_of(
    info: SessionInfo, ended: tuple[ConversationInfo, ...] = ()
) -> list[ConversationInfo]:
    """Every conversation of one session: the current one first, then the ended, newest first."""
    return [current_row(info, ended), *reversed(ended)]


_by_start = attrgetter("start_seq")
_by_key = attrgetter("key")
_by_updated = attrgetter("updated_at")
_by_started = attrgetter("started_at")


def _ordered(
    rows: Iterable[SessionInfo], ended: Ended, order: ConversationOrder
) -> list[ConversationInfo]:
    out: list[ConversationInfo] = []
    none: tuple[ConversationInfo, ...] = ()
    for info in rows:
        out.extend(conversations_of(info, ended.get(info.key, none) if info.ended else none))
    # Stable sorts, last key first.
    if order == "key":
        out.sort(key=_by_start)
        out.sort(key=_by_key)
        return out
    out.sort(key=_by_start, reverse=True)
    out.sort(key=_by_key)
    out.sort(key=_by_started if order == "started" else _by_updated, reverse=True)
    return out


class _Flat:
    __slots__ = ("lists", "lock", "rows")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[SessionInfo] | None = None
        self.lists: dict[str, list[ConversationInfo]] = {}


_flat: weakref.WeakKeyDictionary[BaseStore, _Flat] = weakref.WeakKeyDictionary()
_flat_lock = threading.Lock()


def _all_ordered(
    store: BaseStore, order: ConversationOrder, lazy: bool = False
) -> Iterable[ConversationInfo]:
    """Every conversation in ``order``: the kept list, or (``lazy``, newest first, nothing kept
    yet) a stream that decodes only the catalog entries of the sessions it reaches."""
    cat = _refresh(store, rebuild=False)
    rows = cat.rows
    with _flat_lock:
        try:
            flat = _flat.get(store)
            if flat is None:
                flat = _flat[store] = _Flat()
        except TypeError:
            flat = _Flat()
    with flat.lock:
        if flat.rows is not rows:
            flat.rows, flat.lists = rows, {}
        got = flat.lists.get(order)
        if got is None:
            if lazy and order == "updated":
                return _newest_first(store, cat, rows)
            ended = {e.key: e.ended for e in cat.entries().values() if e.key and e.ended}
            got = flat.lists[order] = _ordered(rows, ended, order)
        return got


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _newest_first(
    store: BaseStore, cat: Catalog, rows: list[SessionInfo]
) -> Iterator[ConversationInfo]:
    """Conversations newest activity first, merged lazily from rows in listing order.

    A session's ended conversations are never newer than its current one, so an ended row is
    emitted once no later session's current row can come before it.
    """
    heap: list[tuple[int, str, int, int, ConversationInfo]] = []
    tie = 0

    def rank(c: ConversationInfo) -> tuple[int, str, int]:
        return (-((c.updated_at - _EPOCH) // _MICRO), c.key, -c.start_seq)

    for info in rows:
        ended = _entry_ended(store, cat, info.key) if info.ended else ()
        current = current_row(info, ended)
        top = rank(current)
        while heap and heap[0][:3] < top:
            yield heapq.heappop(heap)[4]
        yield current
        for past in ended:
            tie += 1
            heapq.heappush(heap, (*rank(past), tie, past))
    while heap:
        yield heapq.heappop(heap)[4]


def _entry_ended(store: BaseStore, cat: Catalog, key: str) -> tuple[ConversationInfo, ...]:
    name = name_for(store, key)
    for entry in cat.bucket(catalog_source(store).log_slot(name)):
        if entry.name == name and entry.key == key:
            return entry.ended
    return ()


def list_conversations(
    store: BaseStore,
    key: str | None = None,
    *,
    prefix: str | None = None,
    agent: str | None = None,
    channel: str | None = None,
    peer: str | None = None,
    state: str | None = None,
    current: bool | None = None,
    updated_after: datetime | None = None,
    updated_before: datetime | None = None,
    order: ConversationOrder = "updated",
    limit: int | None = None,
    offset: int = 0,
) -> list[ConversationInfo]:
    """Every conversation (current and ended) of the sessions that match, newest activity first.

    ``key`` selects one session; ``prefix``, ``agent``, ``channel`` and ``peer`` select sessions
    as :func:`list_sessions` does. ``state`` is ``ended`` or a lifecycle state (of a current
    conversation); ``current`` keeps only current (True) or only ended (False) ones;
    ``updated_after`` / ``updated_before`` are exclusive bounds on the last activity.
    """
    if order not in CONVERSATION_ORDERS:
        raise InvalidEventError(
            f"order must be one of {', '.join(CONVERSATION_ORDERS)}, not {order!r}"
        )
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidEventError(f"limit must be an integer >= 0 or None, not {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidEventError(f"offset must be an integer >= 0, not {offset!r}")
    if key is not None and not isinstance(key, str):
        raise InvalidEventError(f"key must be a str or None, not {key!r}")
    sessions = CatalogFilter(
        prefix=key if key is not None else prefix, agent=agent, channel=channel, peer=peer
    )
    ordered: Iterable[ConversationInfo]
    if isinstance(store, CatalogRecords):
        records = store.query_catalog_records(sessions)
        infos = infos_from_records(records, store)
        ended = {r.key: ended_of_record(r, store) for r in records}
        ordered = _ordered(infos, ended, order)
    elif sessions == CatalogFilter():
        ordered = _all_ordered(store, order, lazy=limit is not None)
    else:
        rows, ended = catalog_conversations(store, sessions)
        ordered = _ordered(rows, ended, order)
    tests = _tests(key, state, current, updated_after, updated_before)
    end = None if limit is None else offset + limit
    if not tests and isinstance(ordered, list):
        return ordered[offset:end]  # a copy: the cached list stays as it is
    for test in tests:
        ordered = filter(test, ordered)
    return list(islice(ordered, offset, end))


def _tests(
    key: str | None,
    state: str | None,
    current: bool | None,
    after: datetime | None,
    before: datetime | None,
) -> list[Callable[[ConversationInfo], bool]]:
    tests: list[Callable[[ConversationInfo], bool]] = []
    if key is not None:
        tests.append(lambda c: c.key == key)
    if state is not None:
        tests.append(lambda c: c.state == state)
    if current is not None:
        tests.append(lambda c: c.current is current)
    if after is not None:
        tests.append(lambda c: c.updated_at > after)
    if before is not None:
        tests.append(lambda c: c.updated_at < before)
    return tests

"""Conversations as first-class rows: every conversation of every session, from the catalog.

Rules:
- The rows come from the session catalog, never from a log scan. For every session, the catalog
  keeps every conversation in listing order (``_catalog_convs``): a listing is a copy of a page
  of it, and a fresh process decodes only the stored chunks a page reaches. A selection of
  sessions (key, prefix, parts) builds its rows from their catalog rows and entries.
- Order ``updated`` (default) is newest activity first (an ended conversation's activity is when
  it ended), ties by key, then newest start first; ``started`` is newest start first; ``key`` is
  by key, then oldest start first. Filters, then offset and limit, as :func:`list_sessions` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from itertools import islice
from typing import Final, Literal

from sessionledger.eventlog import BaseStore, InvalidEventError

from ._catalog import CatalogFilter, catalog_conversations, catalog_listing
from ._catalog_convs import Listing, build
from ._catalog_row import SessionInfo
from ._conversation_row import ConversationInfo
from ._pg_catalog import catalog_records, ended_of_record, infos_from_records
from ._sealed_rows import open_conversations

ConversationOrder = Literal["updated", "started", "key"]
CONVERSATION_ORDERS: Final = ("updated", "started", "key")


def _ordered(
    rows: Iterable[SessionInfo], ended: dict[str, tuple[ConversationInfo, ...]], order: str
) -> list[ConversationInfo]:
    listing = Listing(rows=build(rows, ended))
    got = listing.all() if order == "updated" else listing.sorted_by(order)
    assert got is not None  # a listing built from rows has nothing pending
    return got


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
    Titles and previews of sealed sessions are opened as :func:`list_sessions` opens them.
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
    tests = _tests(key, state, current, updated_after, updated_before)
    end = None if limit is None else offset + limit
    records = catalog_records(store, sessions)
    if records is not None:
        infos = infos_from_records(records, store)
        ended = {r.key: ended_of_record(r, store) for r in records}
        return open_conversations(store, _page(_ordered(infos, ended, order), tests, offset, end))
    if sessions != CatalogFilter():
        rows, ended = catalog_conversations(store, sessions)
        return open_conversations(store, _page(_ordered(rows, ended, order), tests, offset, end))

    def use(listing: Listing) -> list[ConversationInfo]:
        if order != "updated" or end is None:
            got = listing.all() if order == "updated" else listing.sorted_by(order)
            assert got is not None  # ``whole``: the caller rebuilt a listing that disagreed
            return _page(got, tests, offset, end)
        if not tests:
            return list(islice(listing.iterate(offset), end - offset))
        return _page(listing.iterate(), tests, offset, end)

    # Every session: the catalog's own listing (a page decodes only the chunks it reaches).
    return open_conversations(
        store, catalog_listing(store, use, whole=end is None or order != "updated")
    )


def _page(
    rows: Iterable[ConversationInfo],
    tests: list[Callable[[ConversationInfo], bool]],
    offset: int,
    end: int | None,
) -> list[ConversationInfo]:
    if not tests and isinstance(rows, list):
        return rows[offset:end]  # a copy: a kept list stays as it is
    for test in tests:
        rows = filter(test, rows)
    return list(islice(rows, offset, end))


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

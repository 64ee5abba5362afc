"""Every conversation of every session, kept in the catalog in listing order (pure).

Rules:
- Listing order is newest activity first (an ended conversation's activity is when it ended),
  ties by key, then newest start first: the order :func:`list_conversations` gives by default.
- A session's current conversation is built from its session row (:func:`current_row`); its
  ended ones are the rows the fold recorded when each ended (the catalog entry keeps them too,
  so that a row can be advanced over a ``cleared`` event).
- The stored form is the rows in chunks of :data:`CHUNK`, each its own msgpack array: a fresh
  process decodes only the chunks a page reaches, all of them only for a whole listing.
- When sessions change, their old rows are found by their place in the order (binary search)
  and replaced, in a new list (a list handed out before stays as it was). A process that has not
  decoded the chunks keeps the change beside them (rows gone, rows new), stored with them, and
  applies it when it decodes them.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from operator import attrgetter
from typing import Final

import msgspec

from ._catalog_row import SessionInfo
from ._conversation_row import ConversationInfo


class DamagedCatalog(Exception):
    """A stored section of the catalog does not decode (it is derived: rebuild it)."""


#: Rows per stored chunk.
CHUNK: Final = 512
#: Changed rows kept beside undecoded chunks; past this the listing is dropped (rebuilt on use).
PENDING_MAX: Final = 4_096
#: More changed rows than this are merged by sorting, fewer by binary search.
_BISECT_MAX: Final = 64

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
_by_start = attrgetter("start_seq")
_by_key = attrgetter("key")
_by_updated = attrgetter("updated_at")
_by_started = attrgetter("started_at")


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
        sealed=info.sealed,
    )


def conversations_of(
    info: SessionInfo, ended: tuple[ConversationInfo, ...] = ()
) -> list[ConversationInfo]:
    """Every conversation of one session: the current one first, then the ended, newest first."""
    return [current_row(info, ended), *reversed(ended)]


def rank(c: ConversationInfo) -> tuple[int, str, int]:
    """The ascending sort key of listing order."""
    return (-((c.updated_at - _EPOCH) // _MICRO), c.key, -c.start_seq)


def sort_listing(rows: list[ConversationInfo]) -> None:
    """Put ``rows`` in listing order, in place (stable sorts, last key first)."""
    rows.sort(key=_by_start, reverse=True)
    rows.sort(key=_by_key)
    rows.sort(key=_by_updated, reverse=True)


def build(
    sessions: Iterable[SessionInfo], ended: dict[str, tuple[ConversationInfo, ...]]
) -> list[ConversationInfo]:
    """Every conversation of ``sessions`` (``ended``: each session's ended rows, by key)."""
    out: list[ConversationInfo] = []
    none: tuple[ConversationInfo, ...] = ()
    for info in sessions:
        out.extend(conversations_of(info, ended.get(info.key, none) if info.ended else none))
    sort_listing(out)
    return out


def replace(
    rows: list[ConversationInfo], gone: list[ConversationInfo], new: list[ConversationInfo]
) -> list[ConversationInfo] | None:
    """``rows`` (in listing order) without ``gone``, with ``new``, in listing order; a new list.

    None: a row of ``gone`` is not where the order puts it (the caller rebuilds instead).
    """
    out = list(rows)
    for old in gone:
        at = bisect_left(out, rank(old), key=rank)
        while at < len(out) and out[at] != old and rank(out[at]) == rank(old):
            at += 1
        if at >= len(out) or out[at] != old:
            return None
        del out[at]
    if len(new) > _BISECT_MAX:
        out.extend(new)
        sort_listing(out)
        return out
    for row in new:
        out.insert(bisect_left(out, rank(row), key=rank), row)
    return out


# -- stored form ----------------------------------------------------------------------------------

_encode = msgspec.msgpack.Encoder().encode
_decode_chunk = msgspec.msgpack.Decoder(list[ConversationInfo]).decode


def encode_chunks(rows: list[ConversationInfo]) -> list[memoryview]:
    """The stored chunks of ``rows``."""
    return [memoryview(_encode(rows[at : at + CHUNK])) for at in range(0, len(rows), CHUNK)]


class Listing:
    """The conversations of a catalog in listing order: decoded, or stored chunks decoded on
    first use (a page decodes only the chunks it reaches), plus the changes not yet applied to
    the chunks (rows gone and rows new: a process that never decodes the chunks still keeps
    them current, up to :data:`PENDING_MAX` changed rows)."""

    __slots__ = ("_chunks", "_decoded", "_gone", "_new", "_orders", "_rows")

    def __init__(
        self,
        rows: list[ConversationInfo] | None = None,
        chunks: list[memoryview] | None = None,
        gone: list[ConversationInfo] | None = None,
        new: list[ConversationInfo] | None = None,
    ) -> None:
        self._rows = rows
        self._chunks = chunks
        self._gone: list[ConversationInfo] = gone or []
        self._new: list[ConversationInfo] = new or []
        self._decoded: dict[int, list[ConversationInfo]] = {}
        #: The rows in other orders (see :meth:`sorted_by`), while they are unchanged.
        self._orders: dict[str, list[ConversationInfo]] = {}

    def all(self) -> list[ConversationInfo] | None:
        """Every row (decodes what is left; kept). None: the chunks and the changes do not
        agree (the caller rebuilds)."""
        if self._rows is None:
            rows: list[ConversationInfo] = []
            for index in range(len(self._chunks or ())):
                rows += self._chunk(index)
            if self._gone or self._new:
                got = replace(rows, self._gone, self._new)
                if got is None:
                    return None
                rows, self._chunks = got, None
            self._rows, self._decoded, self._gone, self._new = rows, {}, [], []
        return self._rows

    def changed(self, gone: list[ConversationInfo], new: list[ConversationInfo]) -> bool:
        """Apply a change (rows of changed sessions before and after). False: it could not be
        (the caller drops this listing)."""
        self._orders = {}
        if self._rows is not None:
            got = replace(self._rows, gone, new)
            if got is None:
                return False
            self._rows, self._chunks = got, None
            return True
        added = set(self._new)
        for row in gone:
            if row in added:
                self._new.remove(row)
                added.discard(row)
            else:
                self._gone.append(row)
        self._new += new
        return len(self._gone) + len(self._new) <= PENDING_MAX

    def sorted_by(self, order: str) -> list[ConversationInfo] | None:
        """Every row by ``started`` (newest start first, ties by key, then newest start seq) or
        ``key`` (then oldest start first); kept while the rows are unchanged. None: as
        :meth:`all`."""
        got = self._orders.get(order)
        if got is None:
            rows = self.all()
            if rows is None:
                return None
            got = list(rows)
            got.sort(key=_by_start, reverse=order != "key")
            got.sort(key=_by_key)
            if order == "started":
                got.sort(key=_by_started, reverse=True)
            self._orders[order] = got
        return got

    def iterate(self, start: int = 0) -> Iterator[ConversationInfo]:
        """The rows from index ``start`` on, decoding chunks only as they are reached."""
        if self._rows is not None:
            yield from islice(self._rows, start, None)
            return
        if self._gone or self._new:
            gone = set(self._gone)
            kept = (r for r in self._chunk_rows() if r not in gone)
            merged = heapq.merge(kept, sorted(self._new, key=rank), key=rank)
            yield from islice(merged, start, None)
            return
        index, skip = divmod(start, CHUNK)
        for at in range(index, len(self._chunks or ())):
            rows = self._chunk(at)
            yield from rows[skip:] if skip else rows
            skip = 0

    def stored(self) -> tuple[list[memoryview], list[ConversationInfo], list[ConversationInfo]]:
        """The stored form: chunks (passed through when not decoded), rows gone, rows new."""
        if self._chunks is None:
            self._chunks = encode_chunks(self._rows or [])
        return self._chunks, self._gone, self._new

    def _chunk_rows(self) -> Iterator[ConversationInfo]:
        for index in range(len(self._chunks or ())):
            yield from self._chunk(index)

    def _chunk(self, index: int) -> list[ConversationInfo]:
        got = self._decoded.get(index)
        if got is None:
            assert self._chunks is not None
            try:
                got = self._decoded[index] = _decode_chunk(self._chunks[index])
            except (msgspec.DecodeError, ValueError) as exc:
                raise DamagedCatalog(str(exc)) from exc
        return got

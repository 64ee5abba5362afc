"""The stored catalog: entries bucketed by change-table slot, rows in listing order (pure).

Invariants:
- The file is one msgpack array: format, version, the change-table copy it was refreshed
  against (id, slot stamps, membership stamp, the wall-clock time taken before that copy was
  read, and the time of the last full scan), the rows in listing order, and the entries grouped
  by slot. Rows and entries are kept as raw msgpack and decoded only when used: a listing that
  finds nothing changed decodes the rows and no entry; one that finds a slot changed decodes
  that slot's entries.
- Listing order is newest-updated first, ties by key ascending; every function here keeps it.
- An entry's row is the row whose ``key`` it names; an entry with no key is a file that is not a
  readable log of the store (it is remembered so that it is not read again while unchanged).
- A session's ended conversations live in its entry, not its row: listing sessions never
  decodes them; listing conversations decodes the entries.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Final

import msgspec

from ._catalog_row import Row, SessionInfo
from ._conversation_row import ConversationInfo

CATALOG_FORMAT: Final = "sessionlog-catalog"
CATALOG_VERSION: Final = 4


class Entry(msgspec.Struct, array_like=True, gc=False):
    """One log file as the catalog last saw it, with what advancing its row needs."""

    name: str
    size: int
    ino: int
    mtime_ns: int
    #: The session key of its row; None: the file is not a readable log of this store.
    key: str | None = None
    offset: int = 0
    preview_role: int = 0
    meta_summary: str | None = None
    compaction_summary: str | None = None
    ended: tuple[ConversationInfo, ...] = ()

    def row(self, info: SessionInfo) -> Row:
        """This entry's row, given its info."""
        return Row(
            info,
            self.offset,
            self.preview_role,
            self.meta_summary,
            self.compaction_summary,
            self.ended,
        )


def entry_of(name: str, size: int, ino: int, mtime_ns: int, row: Row | None) -> Entry:
    """The entry of a log file and its row (None: not a readable log)."""
    if row is None:
        return Entry(name, size, ino, mtime_ns)
    return Entry(
        name,
        size,
        ino,
        mtime_ns,
        row.info.key,
        row.offset,
        row.preview_role,
        row.meta_summary,
        row.compaction_summary,
        row.ended,
    )


class _Stored(msgspec.Struct, array_like=True):
    format: str
    version: int
    table_id: bytes
    saved_at: int
    full_at: int
    membership: int
    slots: bytes
    rows: msgspec.Raw
    buckets: dict[int, msgspec.Raw]


class Catalog:
    """A catalog in memory: the table copy it is current against, rows, entries by slot."""

    __slots__ = (
        "buckets",
        "full_at",
        "membership",
        "pending",
        "rows",
        "saved_at",
        "settled_ns",
        "slots",
        "stored",
        "table_id",
    )

    def __init__(
        self,
        *,
        table_id: bytes = b"",
        saved_at: int = 0,
        full_at: int = 0,
        membership: int = 0,
        slots: bytes = b"",
        rows: list[SessionInfo] | None = None,
        buckets: dict[int, msgspec.Raw | list[Entry]] | None = None,
    ) -> None:
        self.table_id = table_id
        #: Wall-clock ns taken before the table copy (``slots``, ``membership``) was read.
        self.saved_at = saved_at
        self.full_at = full_at
        self.membership = membership
        self.slots = slots
        self.rows: list[SessionInfo] = [] if rows is None else rows
        self.buckets: dict[int, msgspec.Raw | list[Entry]] = {} if buckets is None else buckets
        #: Entries changed since the stored file was written.
        self.pending = 0
        #: When the table copy may be trusted (wall-clock ns; set by the caller).
        self.settled_ns = 0
        #: (table id, membership, saved_at, full_at) of the stored file, when known.
        self.stored: tuple[bytes, int, int, int] | None = None

    def bucket(self, slot: int) -> list[Entry]:
        """The entries of one slot (decoded on first use)."""
        got = self.buckets.get(slot)
        if got is None:
            return []
        if isinstance(got, msgspec.Raw):
            got = _decode_bucket(got)
            self.buckets[slot] = got
        return got

    def entries(self) -> dict[str, Entry]:
        """Every entry by file name (decodes every slot)."""
        return {e.name: e for slot in list(self.buckets) for e in self.bucket(slot)}


_encoder = msgspec.msgpack.Encoder()
_decode_stored = msgspec.msgpack.Decoder(_Stored).decode
_decode_rows = msgspec.msgpack.Decoder(list[SessionInfo]).decode
_decode_bucket = msgspec.msgpack.Decoder(list[Entry]).decode


def decode_catalog(blob: bytes | None) -> Catalog | None:
    """A stored catalog (None: absent, damaged, or of another format or version)."""
    if not blob:
        return None
    try:
        stored = _decode_stored(blob)
        if stored.format != CATALOG_FORMAT or stored.version != CATALOG_VERSION:
            return None
        rows = _decode_rows(stored.rows)
    except (msgspec.DecodeError, ValueError):
        return None
    catalog = Catalog(
        table_id=stored.table_id,
        saved_at=stored.saved_at,
        full_at=stored.full_at,
        membership=stored.membership,
        slots=stored.slots,
        rows=rows,
        buckets=dict(stored.buckets),
    )
    catalog.stored = (stored.table_id, stored.membership, stored.saved_at, stored.full_at)
    return catalog


def decode_rows(blob: bytes | None) -> list[SessionInfo]:
    """Only the rows of a stored catalog, as stored ([] when it cannot be read)."""
    catalog = decode_catalog(blob)
    return [] if catalog is None else catalog.rows


def encode_catalog(catalog: Catalog) -> bytes:
    """The stored form of ``catalog`` (undecoded buckets are copied as they are)."""
    buckets: dict[int, msgspec.Raw] = {}
    for slot, got in catalog.buckets.items():
        if isinstance(got, msgspec.Raw):
            buckets[slot] = got
        elif got:
            buckets[slot] = msgspec.Raw(_encoder.encode(got))
    stored = _Stored(
        CATALOG_FORMAT,
        CATALOG_VERSION,
        catalog.table_id,
        catalog.saved_at,
        catalog.full_at,
        catalog.membership,
        catalog.slots,
        msgspec.Raw(_encoder.encode(catalog.rows)),
        buckets,
    )
    return _encoder.encode(stored)


# -- listing order --------------------------------------------------------------------------------

_by_key = attrgetter("key")
_by_updated = attrgetter("updated_at")


def sort_rows(rows: list[SessionInfo]) -> None:
    """Put ``rows`` in listing order, in place: newest-updated first, ties by key."""
    rows.sort(key=_by_key)
    rows.sort(key=_by_updated, reverse=True)


def _before(a: SessionInfo, b: SessionInfo) -> bool:
    return a.updated_at > b.updated_at or (a.updated_at == b.updated_at and a.key < b.key)


def insert_row(rows: list[SessionInfo], row: SessionInfo) -> None:
    """Insert ``row`` into ``rows`` (in listing order) where the order puts it."""
    lo, hi = 0, len(rows)
    while lo < hi:
        mid = (lo + hi) // 2
        if _before(rows[mid], row):
            lo = mid + 1
        else:
            hi = mid
    rows.insert(lo, row)


def replace_rows(
    rows: list[SessionInfo], gone: set[str], new: list[SessionInfo]
) -> list[SessionInfo]:
    """``rows`` without the keys in ``gone``, with ``new`` added, in listing order."""
    out = [r for r in rows if r.key not in gone] if gone else list(rows)
    if len(new) > 64:
        out.extend(new)
        sort_rows(out)
        return out
    for row in new:
        insert_row(out, row)
    return out

"""The stored catalog: entries bucketed by change-table slot, rows in listing order (pure).

Invariants:
- The file is one msgpack array: format, version, the change-table copy it was refreshed
  against (id, slot stamps, membership stamp, the wall-clock time taken before that copy was
  read, and the time of the last full scan), the rows in listing order, the entries grouped by
  slot, and the conversations in listing order. Entries and conversations are kept encoded,
  each slot or chunk as one msgpack ``bin`` (skipped, not walked, when the file is read) and
  decoded only when used: a listing that finds nothing changed decodes the rows and no entry;
  one that finds a slot changed decodes that slot's entries.
- Listing order is newest-updated first, ties by key ascending; every function here keeps it.
- An entry's row is the row whose ``key`` it names; an entry with no key is a file that is not a
  readable log of the store (it is remembered so that it is not read again while unchanged).
- A session's ended conversations live in its entry, not its row, so listing sessions never
  decodes them. The entry stores each as an :class:`Ended`: an array without the key and what
  every ended row says (format 6; format 5 kept the whole row, field names included, which
  made the entries most of the file). Every conversation, in listing order, is kept beside the
  rows in chunks (see ``_catalog_convs``), absent until a listing of conversations builds it,
  and dropped when rows change in a process that has not decoded it.
"""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter
from typing import Final

import msgspec

from ._catalog_convs import DamagedCatalog, Listing
from ._catalog_row import Row, SessionInfo
from ._conversation_row import ENDED, ConversationInfo

CATALOG_FORMAT: Final = "sessionlog-catalog"
CATALOG_VERSION: Final = 7


class Ended(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """An ended conversation as its catalog entry stores it: its row without what the entry
    says already (the key) or what every ended row says (not current, state ``ended``).

    Its fields are :class:`ConversationInfo`'s in their order, less those three (a test holds
    them together: a field added to the row is added here).
    """

    start_seq: int
    end_seq: int | None
    title: str
    preview: str
    messages: int
    tokens: int
    started_at: datetime
    updated_at: datetime
    end_reason: str | None
    resumed_from: int | None
    sealed: bool = False


#: The fields of :class:`ConversationInfo` an :class:`Ended` leaves out (the entry's key, and
#: what every ended row says).
ENDED_IMPLIED: Final = ("key", "current", "state")


def compact(row: ConversationInfo) -> Ended:
    """An ended conversation's row as its entry stores it."""
    assert not row.current and row.state == ENDED, row  # what :func:`expand` restores
    return msgspec.convert(row, Ended, from_attributes=True)


def expand(key: str, ended: tuple[Ended, ...]) -> tuple[ConversationInfo, ...]:
    """The rows of a session's ended conversations, as an entry stores them."""
    out = []
    for e in ended:
        fields = msgspec.structs.asdict(e)
        fields["key"] = key
        out.append(ConversationInfo(**fields))
    return tuple(out)


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
    #: The conversations that ended in the log, oldest first (see :class:`Ended`).
    ended: tuple[Ended, ...] = ()

    def ended_rows(self) -> tuple[ConversationInfo, ...]:
        """The rows of the conversations that ended in the log, oldest first."""
        if not self.ended or self.key is None:
            return ()
        return expand(self.key, self.ended)

    def row(self, info: SessionInfo) -> Row:
        """This entry's row, given its info."""
        return Row(
            info,
            self.offset,
            self.preview_role,
            self.meta_summary,
            self.compaction_summary,
            self.ended_rows(),
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
        tuple(compact(c) for c in row.ended),
    )


class _Stored(msgspec.Struct, array_like=True):
    format: str
    version: int
    table_id: bytes
    saved_at: int
    full_at: int
    membership: int
    slots: bytes
    rows: memoryview
    buckets: dict[int, memoryview]
    convs: list[memoryview] | None = None
    convs_gone: list[ConversationInfo] = []
    convs_new: list[ConversationInfo] = []


class Catalog:
    """A catalog in memory: the table copy it is current against, rows, entries by slot."""

    __slots__ = (
        "_rows",
        "_rows_blob",
        "buckets",
        "convs",
        "full_at",
        "membership",
        "pending",
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
        rows: list[SessionInfo] | memoryview | None = None,
        buckets: dict[int, memoryview | list[Entry]] | None = None,
        convs: Listing | None = None,
    ) -> None:
        self.table_id = table_id
        #: Wall-clock ns taken before the table copy (``slots``, ``membership``) was read.
        self.saved_at = saved_at
        self.full_at = full_at
        self.membership = membership
        self.slots = slots
        self._rows: list[SessionInfo] | None = None
        self._rows_blob: memoryview | None = None
        if isinstance(rows, memoryview):
            self._rows_blob = rows
        else:
            self._rows = [] if rows is None else rows
        self.buckets: dict[int, memoryview | list[Entry]] = {} if buckets is None else buckets
        #: Every conversation in listing order (None: not built, or dropped by a change).
        self.convs = convs
        #: Entries changed since the stored file was written.
        self.pending = 0
        #: When the table copy may be trusted (wall-clock ns; set by the caller).
        self.settled_ns = 0
        #: (table id, membership, saved_at, full_at) of the stored file, when known.
        self.stored: tuple[bytes, int, int, int] | None = None

    @property
    def rows(self) -> list[SessionInfo]:
        """The session rows in listing order (decoded on first use).

        Raises:
            DamagedCatalog: the stored rows do not decode (the caller rebuilds).
        """
        if self._rows is None:
            assert self._rows_blob is not None
            try:
                self._rows = _decode_rows(self._rows_blob)
            except (msgspec.DecodeError, ValueError) as exc:
                raise DamagedCatalog(str(exc)) from exc
            self._rows_blob = None
        return self._rows

    @rows.setter
    def rows(self, rows: list[SessionInfo]) -> None:
        self._rows, self._rows_blob = rows, None

    def rows_blob(self) -> memoryview:
        """The stored form of the rows (passed through when not decoded)."""
        if self._rows_blob is not None:
            return self._rows_blob
        return memoryview(_encoder.encode(self._rows))

    def bucket(self, slot: int) -> list[Entry]:
        """The entries of one slot (decoded on first use)."""
        got = self.buckets.get(slot)
        if got is None:
            return []
        if isinstance(got, memoryview):
            try:
                got = _decode_bucket(got)
            except (msgspec.DecodeError, ValueError) as exc:
                raise DamagedCatalog(str(exc)) from exc
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
    except (msgspec.DecodeError, ValueError):
        return None
    catalog = Catalog(
        table_id=stored.table_id,
        saved_at=stored.saved_at,
        full_at=stored.full_at,
        membership=stored.membership,
        slots=stored.slots,
        rows=stored.rows,
        buckets=dict(stored.buckets),
        convs=None
        if stored.convs is None
        else Listing(chunks=stored.convs, gone=stored.convs_gone, new=stored.convs_new),
    )
    catalog.stored = (stored.table_id, stored.membership, stored.saved_at, stored.full_at)
    return catalog


def decode_rows(blob: bytes | None) -> list[SessionInfo]:
    """Only the rows of a stored catalog, as stored ([] when it cannot be read)."""
    catalog = decode_catalog(blob)
    try:
        return [] if catalog is None else catalog.rows
    except DamagedCatalog:
        return []


def encode_catalog(catalog: Catalog) -> bytes:
    """The stored form of ``catalog`` (undecoded buckets are copied as they are)."""
    buckets: dict[int, memoryview] = {}
    for slot, got in catalog.buckets.items():
        if isinstance(got, memoryview):
            buckets[slot] = got
        elif got:
            buckets[slot] = memoryview(_encoder.encode(got))
    stored = _Stored(
        CATALOG_FORMAT,
        CATALOG_VERSION,
        catalog.table_id,
        catalog.saved_at,
        catalog.full_at,
        catalog.membership,
        catalog.slots,
        catalog.rows_blob(),
        buckets,
        *((None, [], []) if catalog.convs is None else catalog.convs.stored()),
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

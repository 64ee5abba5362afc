"""The session catalog: one row per session, kept current from what each log appended since.

Invariants:
- The catalog is derived: the store keeps it as one view file (``.catalog`` in a file store's
  root: a name no log can have), and deleting it loses nothing; the next listing rebuilds it.
- Each row remembers its log's size, identity (inode) and mtime, and the byte offset, seq and
  hash it read up to. A listing scans the store once; a log whose size, identity and mtime are
  unchanged is not read. One that grew is read from the row's offset only, and only if its first
  new line chains from the row's hash; one that shrank, was replaced, or does not chain is read
  whole. So appends by other processes are seen at the next listing.
- Listing order is newest-updated first (ties by key); rows are stored in that order.
- A store that answers catalog queries itself (PostgreSQL: a table kept in the same
  transaction as each append) implements :class:`CatalogQuery`, and :func:`list_sessions`
  hands it the :class:`CatalogFilter` instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, Literal, Protocol, runtime_checkable

import msgspec

from eventlog import (
    FORMAT_NAME,
    ZERO_HASH,
    BaseStore,
    CorruptLogError,
    EventLogError,
    Header,
    InvalidEventError,
    LogStat,
    SessionNotFoundError,
    chain_hash,
    initial_state,
    split_hash,
)

from ._catalog_row import Row, SessionInfo, advance, chains_from, last_hash, row_from_state
from ._pg_catalog import CatalogRecords, infos_from_records
from ._session_id import SessionID

CATALOG_FORMAT: Final = "sessionlog-catalog"
CATALOG_VERSION: Final = 1
Order = Literal["updated", "created", "key"]
ORDERS: Final = ("updated", "created", "key")


class CatalogFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`list_sessions` selects; a :class:`CatalogQuery` store receives it whole."""

    prefix: str | None = None
    agent: str | None = None
    channel: str | None = None
    peer: str | None = None
    state: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    #: ``updated`` (newest first), ``created`` (newest first) or ``key`` (ascending).
    order: Order = "updated"
    limit: int | None = None
    offset: int = 0


@runtime_checkable
class CatalogQuery(Protocol):
    """A store that answers catalog queries itself (e.g. with one indexed SQL query)."""

    def query_catalog(self, filter: CatalogFilter) -> list[SessionInfo]:
        """The rows ``filter`` selects, in its order, limit and offset applied."""
        ...


class _Entry(msgspec.Struct, array_like=True, gc=False):
    name: str
    size: int
    ino: int
    mtime_ns: int
    #: None: the file is not a readable log of this store (its header is bad or misplaced).
    row: Row | None


class _CatalogFile(msgspec.Struct, kw_only=True):
    format: str = CATALOG_FORMAT
    version: int = CATALOG_VERSION
    entries: list[_Entry] = []


_encode = msgspec.msgpack.Encoder().encode
_decode_file = msgspec.msgpack.Decoder(_CatalogFile).decode
_decode_header = msgspec.json.Decoder(Header).decode


def list_sessions(
    store: BaseStore | CatalogQuery,
    *,
    prefix: str | None = None,
    agent: str | None = None,
    channel: str | None = None,
    peer: str | None = None,
    state: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    order: Order = "updated",
    limit: int | None = None,
    offset: int = 0,
) -> list[SessionInfo]:
    """The sessions of ``store`` that match, newest-updated first (or by ``order``).

    ``agent``, ``channel`` and ``peer`` match the parts of structured keys (see
    :class:`SessionID`); ``created_after`` / ``created_before`` are exclusive bounds.
    """
    if order not in ORDERS:
        raise InvalidEventError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidEventError(f"limit must be an integer >= 0 or None, not {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidEventError(f"offset must be an integer >= 0, not {offset!r}")
    query = CatalogFilter(
        prefix=prefix,
        agent=agent,
        channel=channel,
        peer=peer,
        state=state,
        created_after=created_after,
        created_before=created_before,
        order=order,
        limit=limit,
        offset=offset,
    )
    if isinstance(store, CatalogRecords):  # a catalog table (PostgreSQL): one indexed query
        return infos_from_records(store.query_catalog_records(query))
    if isinstance(store, CatalogQuery):
        return store.query_catalog(query)
    return select(catalog_rows(store), query)


def catalog_rows(store: BaseStore) -> list[SessionInfo]:
    """Every session's row, newest-updated first, after bringing the catalog up to date."""
    return [entry.row.info for entry in _refresh(store, rebuild=False) if entry.row is not None]


def rebuild_catalog(store: BaseStore) -> int:
    """Rebuild the catalog from the logs alone (what ``replay.recover`` runs); return its rows."""
    return sum(1 for entry in _refresh(store, rebuild=True) if entry.row is not None)


def select(rows: list[SessionInfo], query: CatalogFilter) -> list[SessionInfo]:
    """Apply a filter, order, offset and limit to rows given newest-updated first (pure)."""
    out = rows
    if query.prefix:
        out = [r for r in out if r.key.startswith(query.prefix)]
    if query.state is not None:
        out = [r for r in out if r.state == query.state]
    if query.created_after is not None:
        after = query.created_after
        out = [r for r in out if r.created_at > after]
    if query.created_before is not None:
        before = query.created_before
        out = [r for r in out if r.created_at < before]
    if query.agent is not None or query.channel is not None or query.peer is not None:
        out = [r for r in out if _parts_match(r.key, query)]
    if query.order == "created":
        out = sorted(out, key=lambda r: r.key)
        out.sort(key=lambda r: r.created_at, reverse=True)
    elif query.order == "key":
        out = sorted(out, key=lambda r: r.key)
    end = None if query.limit is None else query.offset + query.limit
    if query.offset or end is not None:
        out = out[query.offset : end]
    return out if out is not rows else list(out)


def _parts_match(key: str, query: CatalogFilter) -> bool:
    sid = SessionID.from_key(key)
    if sid is None:
        return False
    return (
        (query.agent is None or sid.agent == query.agent)
        and (query.channel is None or sid.channel == query.channel)
        and (query.peer is None or sid.peer == query.peer)
    )


# -- keeping the stored catalog current ----------------------------------------------------------


def _load_entries(store: BaseStore) -> list[_Entry]:
    blob = store.catalog_bytes()
    if not blob:
        return []
    try:
        stored = _decode_file(blob)
    except msgspec.DecodeError:
        return []
    if stored.format != CATALOG_FORMAT or stored.version != CATALOG_VERSION:
        return []
    return stored.entries


def _refresh(store: BaseStore, *, rebuild: bool) -> list[_Entry]:
    old = [] if rebuild else _load_entries(store)
    by_name = {entry.name: entry for entry in old}
    stats = store.scan_logs()
    fresh: list[_Entry] = []
    dirty = rebuild or len(stats) != len(old)
    for st in stats:
        entry = by_name.get(st.name)
        if (
            entry is not None
            and entry.size == st.size
            and entry.ino == st.ino
            and entry.mtime_ns == st.mtime_ns
        ):
            fresh.append(entry)
            continue
        dirty = True
        updated = _update(store, st, entry)
        if updated is not None:
            fresh.append(updated)
    if not dirty:
        return old  # the same entries, already in listing order
    fresh.sort(key=_sort_key)
    fresh.sort(key=_updated_key, reverse=True)
    store.put_catalog(_encode(_CatalogFile(entries=fresh)))
    return fresh


def _sort_key(entry: _Entry) -> str:
    return entry.row.info.key if entry.row is not None else ""


_OLDEST: Final = datetime.min.replace(tzinfo=UTC)


def _updated_key(entry: _Entry) -> datetime:
    return entry.row.info.updated_at if entry.row is not None else _OLDEST


def _update(store: BaseStore, st: LogStat, entry: _Entry | None) -> _Entry | None:
    row = entry.row if entry is not None and entry.ino == st.ino else None
    if row is not None and st.size >= row.offset:
        got = store.read_log(st.name, row.offset)
        if got is None:
            return None
        data = got[1]
        if chains_from(data, row.info.head, store.hash_key):
            head = last_hash(data)
            new = row if head is None else advance(row, data, row.offset, head)
            if new is not None:
                return _Entry(st.name, st.size, st.ino, st.mtime_ns, new)
    return _read_whole(store, st)


def _read_whole(store: BaseStore, st: LogStat) -> _Entry | None:
    got = store.read_log(st.name, 0)
    if got is None:
        return None
    data = got[1]
    header = _header_of(store, st.name, data)
    if header is None:
        return _Entry(st.name, st.size, st.ino, st.mtime_ns, None)
    start = data.find(b"\n") + 1
    row: Row | None = row_from_state(initial_state(header), start)
    head = last_hash(data[start:])
    if head is not None and row is not None:
        row = advance(row, data[start:], start, head)
    if row is None:
        row = _folded_row(store, header.key)
        if row is None:
            return None
    return _Entry(st.name, st.size, st.ino, st.mtime_ns, row)


def _header_of(store: BaseStore, name: str, data: bytes) -> Header | None:
    """The log's header if its first line is a valid one for a log stored under ``name``."""
    end = data.find(b"\n")
    parts = split_hash(data[:end]) if end > 0 else None
    if parts is None or chain_hash(ZERO_HASH, parts[0], store.hash_key) != parts[1]:
        return None
    try:
        header = _decode_header(data[:end])
    except msgspec.DecodeError:
        return None
    if header.format != FORMAT_NAME or _name_for(store, header.key) != name:
        return None
    return header


def _name_for(store: BaseStore, key: str) -> str:
    path_for = getattr(store, "path_for", None)
    return key if path_for is None else str(path_for(key).name)


def _folded_row(store: BaseStore, key: str) -> Row | None:
    """Fold the session (from its snapshot when it has one): for lines a row cannot follow."""
    try:
        try:
            loaded = store.load(key)
        except CorruptLogError:
            loaded = store.load(key, prefix=True)
    except SessionNotFoundError:
        return None
    except EventLogError:
        return None
    return row_from_state(loaded.state, loaded.valid_length)

"""The session catalog: one row per session, kept current from what each log appended since.

Invariants:
- The catalog is derived: the store keeps it as one view file (``.catalog`` in a file store's
  root: a name no log can have), and deleting it loses nothing; the next listing rebuilds it.
- Each entry remembers its log's size, identity (inode) and mtime, and the byte offset, seq and
  hash its row was read up to. A log whose size, identity and mtime are unchanged is not read;
  one that grew is read from the row's offset only, and only if its first new line chains from
  the row's hash (the hash covers every line before it, so the log up to there is the one the
  row was read from, whatever file holds it now: a log that rolled into a new segment has a
  new live file); one that shrank or does not chain is read whole.
- Which logs are stat-ed: every one (one directory scan) when the store keeps no change table,
  when the table is unknown to the catalog or not yet settled, and when the last full scan is
  older than :data:`FULL_SCAN_NS`; otherwise only the logs in table slots whose stamp differs
  from the copy the catalog saved (and the directory's names only when the membership stamp
  differs). The copy is read BEFORE any stat, so an append (or create, or delete) that returned
  before a listing started is seen by it (the rules are in ``eventlog._changes``).
- The stored file never lags a shrink or replacement a listing saw (it is rewritten then): a
  stored row past its log's end means lost lines to ``replay.verify``.
- Rows are kept in listing order, newest-updated first (ties by key), so a listing sorts nothing
  and a filtered, limited one stops early. A process keeps its last catalog in memory (per store
  object) and rewrites the file only when a fresh process would otherwise redo much: after
  :data:`SAVE_AFTER` changed entries, a table or membership change, or a full scan that makes
  the file's copy trusted or renews its full-scan time. The file is always a consistent (table
  copy, rows) pair, at worst older, and a fresh process redoes the difference.
- A store that keeps a catalog table (PostgreSQL: columns written in the same transaction as
  each append) answers ``query_catalog_records`` (see ``_pg_catalog``): :func:`list_sessions`
  hands it the :class:`CatalogFilter` and builds the rows from its records with the same rules.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime
from itertools import islice
from operator import attrgetter
from typing import Final, Literal, TypeVar

import msgspec

from sessionledger.eventlog import BaseStore, InvalidEventError, StorageError
from sessionledger.eventlog.backend import LogStat, catalog_source, split_key

from ._catalog_convs import DamagedCatalog, Listing, build, conversations_of
from ._catalog_file import Catalog, Entry, decode_catalog, decode_rows, encode_catalog, replace_rows
from ._catalog_log import name_for, read_entry
from ._catalog_row import SessionInfo
from ._conversation_row import ConversationInfo
from ._pg_catalog import catalog_records, infos_from_records
from ._sealed_rows import open_sessions

_T = TypeVar("_T")
Order = Literal["updated", "created", "key"]
ORDERS: Final = ("updated", "created", "key")
#: Entries changed since the stored file after which a listing rewrites it.
SAVE_AFTER: Final = 32
#: A listing stats every log when the catalog's last full scan is older than this (ns).
FULL_SCAN_NS: Final = 300 * 1_000_000_000


class CatalogFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`list_sessions` selects; a store with a catalog table receives it whole."""

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


def list_sessions(
    store: BaseStore,
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
    open_sealed: bool = True,
) -> list[SessionInfo]:
    """The sessions of ``store`` that match, newest-updated first (or by ``order``).

    ``agent``, ``channel`` and ``peer`` match the parts of structured keys (see
    :class:`SessionID`); ``created_after`` / ``created_before`` are exclusive bounds. A sealed
    session's title, preview, summary and tags are opened here when ``store`` holds the keys,
    and listed empty when it does not (``SessionInfo.sealed``; the catalog never stores them).
    Opening costs a load per sealed row: ``open_sealed=False`` lists them as stored, and
    :func:`open_sealed_rows` opens just the rows a caller shows (a page of a long list).
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
    records = catalog_records(store, query)  # a catalog table (PostgreSQL): one query
    if records is not None:
        rows = infos_from_records(records, store)
    else:
        rows = select(_refresh(store, rebuild=False).rows, query)
    return open_sessions(store, rows) if open_sealed else rows


def catalog_conversations(
    store: BaseStore, query: CatalogFilter | None = None
) -> tuple[list[SessionInfo], dict[str, tuple[ConversationInfo, ...]]]:
    """The rows ``query`` selects (all: None) and the ended conversations of each, by key.

    Only the catalog entries of the selected sessions that have ended conversations are
    decoded (all of them when many are selected).
    """
    try:
        return _conversations_of(store, _refresh(store, rebuild=False), query)
    except DamagedCatalog:
        return _conversations_of(store, _refresh(store, rebuild=True), query)


def _conversations_of(
    store: BaseStore, cat: Catalog, query: CatalogFilter | None
) -> tuple[list[SessionInfo], dict[str, tuple[ConversationInfo, ...]]]:
    rows = cat.rows if query is None else select(cat.rows, query)
    wanted = [r.key for r in rows if r.ended]
    if len(wanted) > 256:
        ended = {e.key: e.ended_rows() for e in cat.entries().values() if e.key and e.ended}
        return rows, ended
    ended = {}
    for key in wanted:
        name = name_for(store, key)
        for entry in cat.bucket(catalog_source(store).log_slot(name)):
            if entry.name == name and entry.key == key:
                ended[key] = entry.ended_rows()
    return rows, ended


def catalog_rows(store: BaseStore) -> list[SessionInfo]:
    """Every session's row, newest-updated first, after bringing the catalog up to date."""
    return list(_refresh(store, rebuild=False).rows)


def rebuild_catalog(store: BaseStore) -> int:
    """Rebuild the catalog from the logs alone (what ``replay.recover`` runs); return its rows."""
    return len(_refresh(store, rebuild=True, strict=True).rows)


def catalog_heads(store: BaseStore) -> dict[str, tuple[int, str]]:
    """key -> (seq, head) of every row of the STORED catalog, as stored (nothing refreshed)."""
    return {
        r.key: (r.seq, r.head) for r in decode_rows(catalog_source(store).catalog_bytes()) if r.head
    }


# -- selecting ------------------------------------------------------------------------------------

_by_key = attrgetter("key")
_by_created = attrgetter("created_at")


def select(rows: list[SessionInfo], query: CatalogFilter) -> list[SessionInfo]:
    """Apply a filter, order, offset and limit to rows given newest-updated first (pure).

    In the default order the rows are not sorted again, and a limited selection stops at its
    last row.
    """
    out: Iterable[SessionInfo] = rows
    for test in _tests(query):
        out = filter(test, out)
    end = None if query.limit is None else query.offset + query.limit
    if query.order == "updated":
        return list(islice(out, query.offset, end))
    chosen = sorted(out, key=_by_key)
    if query.order == "created":
        chosen.sort(key=_by_created, reverse=True)
    return chosen[query.offset : end]


def _tests(query: CatalogFilter) -> list[Callable[[SessionInfo], bool]]:
    tests: list[Callable[[SessionInfo], bool]] = []
    if query.prefix:
        prefix = query.prefix
        tests.append(lambda r: r.key.startswith(prefix))
    if query.state is not None:
        wanted = query.state
        tests.append(lambda r: r.state == wanted)
    if query.created_after is not None:
        after = query.created_after
        tests.append(lambda r: r.created_at > after)
    if query.created_before is not None:
        before = query.created_before
        tests.append(lambda r: r.created_at < before)
    if query.agent is not None or query.channel is not None or query.peer is not None:
        agent, channel, peer = query.agent, query.channel, query.peer
        tests.append(lambda r: _parts_match(r.key, agent, channel, peer))
    return tests


def _parts_match(key: str, agent: str | None, channel: str | None, peer: str | None) -> bool:
    """Whether a key's parts match, read as :meth:`SessionID.from_key` reads them."""
    parts = split_key(key)
    return (
        parts is not None
        and (agent is None or parts[0] == agent)
        and (channel is None or parts[1] == channel)
        and (peer is None or parts[2] == peer)
    )


# -- keeping the catalog current ------------------------------------------------------------------


class _Cache:
    __slots__ = ("catalog", "lock")

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held across a refresh and a use of its result
        self.catalog: Catalog | None = None


_caches: weakref.WeakKeyDictionary[BaseStore, _Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache_of(store: BaseStore) -> _Cache:
    with _caches_lock:
        try:
            cache = _caches.get(store)
            if cache is None:
                cache = _caches[store] = _Cache()
        except TypeError:  # a store that cannot be a weak key: keep nothing in memory
            cache = _Cache()
        return cache


def _forget_after_fork() -> None:
    # A lock another thread held at the fork would never be released in the child.
    global _caches_lock
    _caches_lock = threading.Lock()
    for cache in list(_caches.values()):
        cache.lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _refresh(
    store: BaseStore, *, rebuild: bool, rows: bool = True, strict: bool = False
) -> Catalog:
    """The catalog brought up to date (``rows``: its rows decoded too); one whose stored
    sections do not decode is rebuilt from the logs. ``strict``: a failure to store it raises
    (see :func:`_save`)."""
    try:
        return _refresh_once(store, rebuild=rebuild, rows=rows, strict=strict)
    except DamagedCatalog:
        return _refresh_once(store, rebuild=True, rows=rows, strict=strict)


def _refresh_once(store: BaseStore, *, rebuild: bool, rows: bool, strict: bool) -> Catalog:
    cache = _cache_of(store)
    source = catalog_source(store)
    with cache.lock:
        now = time.time_ns()
        table = source.read_changes()  # copied BEFORE any stat: see the module rules
        old = None if rebuild else cache.catalog or decode_catalog(source.catalog_bytes())
        cat = Catalog() if old is None else old
        full = True
        # (_apply may raise pending itself: never ``cat.pending += _scan...(...)``.)
        if old is None:
            changed = _scan_all(store, cat, fresh=True)
        elif (
            table is not None
            and cat.table_id == table.ident
            and table.settled_ns <= cat.saved_at <= now
            and now - cat.full_at < FULL_SCAN_NS
        ):
            slots = table.changed_since(cat.slots)
            changed = _scan_changed(store, cat, slots, table.membership)
            full = False
        else:
            changed = _scan_all(store, cat, fresh=False)
        cat.pending += changed
        if table is None:
            cat.table_id, cat.slots, cat.membership = b"", b"", 0
        else:
            cat.table_id, cat.slots, cat.membership = table.ident, table.slots, table.membership
            cat.settled_ns = table.settled_ns
        cat.saved_at = now
        if full:
            cat.full_at = now
        cache.catalog = cat
        if old is None or cat.pending >= SAVE_AFTER or _file_behind(cat, full, now):
            _save(store, cat, strict=strict)
        if rows:
            cat.rows  # noqa: B018 (decoded here, where a damaged file is rebuilt)
        return cat


def _save(store: BaseStore, cat: Catalog, *, strict: bool = False) -> None:
    """Store the catalog. A full disk or a read-only store (``StorageError``) does not fail a
    listing: the catalog is derived, the rows stand, and the next listing tries again; only a
    rebuild asked for (``strict``) raises it."""
    try:
        catalog_source(store).put_catalog(encode_catalog(cat))
    except (StorageError, OSError):
        if strict:
            raise
    else:
        cat.pending = 0
        cat.stored = (cat.table_id, cat.membership, cat.saved_at, cat.full_at)


def catalog_listing(store: BaseStore, use: Callable[[Listing], _T], *, whole: bool) -> _T:
    """``use(listing)`` of every conversation in listing order, the catalog brought up to date
    and its lock held (``whole``: every row is decoded first). A catalog without the listing
    builds it from its rows and entries, and stores it, so the next process reads it instead."""
    cache = _cache_of(store)
    with cache.lock:
        cat = _refresh(store, rebuild=False, rows=False)
        try:
            return use(_listing(store, cat, whole))
        except DamagedCatalog:
            return use(_listing(store, _refresh(store, rebuild=True), whole))


def _listing(store: BaseStore, cat: Catalog, whole: bool) -> Listing:
    listing = cat.convs
    if listing is None or (whole and listing.all() is None):
        ended = {e.key: e.ended_rows() for e in cat.entries().values() if e.key and e.ended}
        listing = cat.convs = Listing(rows=build(cat.rows, ended))
        _save(store, cat)
    return listing


def _file_behind(cat: Catalog, full: bool, now: int) -> bool:
    """Whether the stored file would make a fresh process do much more than this one did."""
    if not cat.table_id:
        return False  # no table: every listing stats everything anyway
    if cat.stored is None:
        return True
    table_id, membership, saved_at, full_at = cat.stored
    if table_id != cat.table_id or membership != cat.membership:
        return True  # a fresh process would stat everything, or list the directory
    if not full:
        return False
    # After a full scan: worth writing once the copy would be trusted, or to renew full_at.
    settled = saved_at >= cat.settled_ns
    return (not settled and now >= cat.settled_ns) or now - full_at > FULL_SCAN_NS // 2


def _scan_all(store: BaseStore, cat: Catalog, *, fresh: bool) -> int:
    """Stat every log (one scan); bring the changed ones up to date. Returns how many changed."""
    known = {} if fresh else cat.entries()
    todo: list[tuple[LogStat, Entry | None]] = []
    for st in catalog_source(store).scan_logs():
        entry = known.pop(st.name, None)
        if entry is None or not _same(entry, st):
            todo.append((st, entry))
    return _apply(store, cat, todo, list(known.values()))


def _scan_changed(store: BaseStore, cat: Catalog, slots: list[int], membership: int) -> int:
    """Stat only the logs of changed slots (and list the directory if membership changed)."""
    todo: list[tuple[LogStat, Entry | None]] = []
    gone: list[Entry] = []
    seen: set[str] = set()
    source = catalog_source(store)
    if membership != cat.membership:
        names = set(source.log_names())
        known = cat.entries()
        gone = [entry for name, entry in known.items() if name not in names]
        seen = {entry.name for entry in gone}
        for name in names.difference(known):
            st = source.stat_log(name)
            if st is not None:
                todo.append((st, None))
    for slot in slots:
        for entry in cat.bucket(slot):
            if entry.name in seen:
                continue
            st = source.stat_log(entry.name)
            if st is None:
                gone.append(entry)
            elif not _same(entry, st):
                todo.append((st, entry))
    return _apply(store, cat, todo, gone)


def _same(entry: Entry, st: LogStat) -> bool:
    return entry.size == st.size and entry.ino == st.ino and entry.mtime_ns == st.mtime_ns


def _apply(
    store: BaseStore, cat: Catalog, todo: list[tuple[LogStat, Entry | None]], gone: list[Entry]
) -> int:
    """Read what changed, then update the catalog's entries and rows in one step."""
    if not todo and not gone:
        return 0
    old_keys = {e.key for _, e in todo if e is not None and e.key is not None}
    old_keys.update(e.key for e in gone if e.key is not None)
    infos = {r.key: r for r in cat.rows if r.key in old_keys} if old_keys else {}
    fresh: list[Entry] = []
    rows: list[SessionInfo] = []
    new_convs: list[ConversationInfo] = []
    for st, entry in todo:
        old_row = None
        # Another identity too: a roll gives a log in segments a new live file, and the row
        # is followed only if the line at its offset chains from its head (see read_entry).
        if entry is not None and entry.key in infos:
            old_row = entry.row(infos[entry.key])
        got = read_entry(store, st, old_row)
        if got is None:
            if entry is not None:
                gone.append(entry)
            continue
        new_entry, row = got
        fresh.append(new_entry)
        if row is not None:
            rows.append(row.info)
            if cat.convs is not None:
                new_convs += conversations_of(row.info, row.ended)
    # Everything is read: now change the catalog (an error above leaves it as it was).
    slot_of = catalog_source(store).log_slot
    dropped = {e.name for e in gone}
    dropped.update(e.name for _, e in todo if e is not None)
    added: dict[int, list[Entry]] = {}
    for e in fresh:
        added.setdefault(slot_of(e.name), []).append(e)
    for slot in {slot_of(name) for name in dropped}.union(added):
        kept = (
            [e for e in cat.bucket(slot) if e.name not in dropped] if dropped else cat.bucket(slot)
        )
        cat.buckets[slot] = kept + added.get(slot, [])
    if cat.convs is not None:
        was = {e.key: e for _, e in todo if e is not None and e.key in infos}
        was.update((e.key, e) for e in gone if e.key in infos)
        old_convs = [c for k, e in was.items() for c in conversations_of(infos[k], e.ended_rows())]
        if not cat.convs.changed(old_convs, new_convs):
            cat.convs = None
    cat.rows = replace_rows(cat.rows, old_keys, rows)
    if any(e is not None and (st.size < e.size or st.ino != e.ino) for st, e in todo):
        # A log shrank or was replaced: the file must not keep recording lines the log no
        # longer has (verify takes a stored row past the log's end for lost lines).
        cat.pending += SAVE_AFTER
    return len(todo) + len(gone)

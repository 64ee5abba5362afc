"""Reading one log for the catalog: its tail since the row, or the whole log.

Invariants:
- A row is advanced over the new bytes only when the log has not shrunk below the row's offset
  and has a complete line past it that chains from the row's head (hash recomputed; a log that
  rolled into a new segment has a new live file, and is still followed); otherwise the log is
  read whole (a changed log with no line past the offset too: a log deleted and made again at
  the same length reaches it), and a log whose lines a row cannot follow is folded (from its
  snapshot when it has one).
- In a keyed store, only lines that verify under the key reach a row: a forged line and every
  line after it are left out (the log itself is left alone; ``verify`` reports it).
- A file whose first line is not a valid header naming a key stored under that file's name is
  not a log of this store: it gets an entry with no row (so it is not read again unchanged).
"""

from __future__ import annotations

import msgspec

from sessionledger.eventlog import (
    FORMAT_NAME,
    BaseStore,
    CorruptLogError,
    EventLogError,
    Header,
    SessionNotFoundError,
    initial_state,
    verify_chain,
)
from sessionledger.eventlog.backend import LogStat, catalog_source
from sessionledger.eventlog.codec import ZERO_HASH, chain_hash, split_hash

from ._catalog_file import Entry, entry_of
from ._catalog_row import Row, advance, chains_from, last_hash, row_from_state

_decode_header = msgspec.json.Decoder(Header).decode


def read_entry(store: BaseStore, st: LogStat, row: Row | None) -> tuple[Entry, Row | None] | None:
    """The entry and row of a changed log, from ``row`` (its last row) when it still applies.

    ``row`` is followed only when the log reaches its offset and the line there chains from
    its head (the hash covers every line before: the same log up to there, even in another
    file, as after a roll to a new segment); otherwise the log is read whole. None: the log
    is gone (or cannot be read as one).
    """
    new = _advance(store, st, row) if row is not None else None
    if new is None:
        return _read_whole(store, st)
    return entry_of(st.name, st.size, st.ino, st.mtime_ns, new), new


def _advance(store: BaseStore, st: LogStat, row: Row) -> Row | None:
    if st.size < row.offset:
        return None
    got = catalog_source(store).read_log(st.name, row.offset)
    if got is None:
        return None
    data = got[1]
    if b"\n" not in data:
        # No line past the row: nothing shows the file still holds the row's log (one deleted
        # and made again, or written over, reaches the same length). Its stat changed with
        # no new line (a torn tail, a cut, another file): read it whole.
        return None
    if not chains_from(data, row.info.head, store.hash_key):
        return None
    data = _verified(data, row.info.head, store.hash_key)
    head = last_hash(data)
    return row if head is None else advance(row, data, row.offset, head)


def _read_whole(store: BaseStore, st: LogStat) -> tuple[Entry, Row | None] | None:
    got = catalog_source(store).read_log(st.name, 0)
    if got is None:
        return None
    data = got[1]
    header = _header_of(store, st.name, data)
    if header is None:
        return entry_of(st.name, st.size, st.ino, st.mtime_ns, None), None
    start = data.find(b"\n") + 1
    data = data[:start] + _verified(data[start:], header_hash(data), store.hash_key)
    row: Row | None = row_from_state(initial_state(header), start)
    head = last_hash(data[start:])
    if head is not None and row is not None:
        row = advance(row, data[start:], start, head)
    if row is None:
        row = _folded_row(store, header.key)
        if row is None:
            return None
    return entry_of(st.name, st.size, st.ino, st.mtime_ns, row), row


def _verified(data: bytes, prev_h: str, key: bytes) -> bytes:
    """With a keyed store, the lines of ``data`` that verify under the key (a forged line and
    everything after it are left out of the row; ``verify`` reports them)."""
    if not key:
        return data
    check = verify_chain(data, key=key, prev_h=prev_h)
    if not check.problems:
        return data
    return data[: check.problems[0].offset]


def header_hash(data: bytes) -> str:
    """The hash field of the first line (the header, already checked by the caller)."""
    parts = split_hash(data[: data.find(b"\n")])
    assert parts is not None
    return parts[1]


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
    if header.format != FORMAT_NAME or name_for(store, header.key) != name:
        return None
    return header


def name_for(store: BaseStore, key: str) -> str:
    """The name under which ``store`` keeps ``key``'s log (as :meth:`scan_logs` names it)."""
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

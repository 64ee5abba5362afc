"""The PostgreSQL store's index snapshots: record files as rows, log bytes read by offset.

The PostgreSQL store keeps the file store's index snapshots (format 4, see
:mod:`eventlog._indexsnap`): the snapshot row holds the folded state without message bodies,
and ``snapshot_records`` (migration 7) holds its two record files, ``index`` (64 bytes per
message event) and ``ids`` (16 bytes per event). Opening reads the snapshot, the ``index``
records and the lines after the snapshot in one query; a message body is read from ``events``
only when something (``history``, a preview) indexes that message.

Invariants:
- The snapshot's bytes and the records are exactly the file store's for the same log (the
  shared code writes them); only where they are kept differs.
- Records are written before the snapshot that covers them, each write like ``pwrite``
  (zeros fill a gap, later bytes stay), so a crash between the two leaves the older snapshot
  valid, as with files. Nothing read here is trusted: chunks are checked against the
  snapshot's digests, lines against the chain (by the shared readers).
- Log bytes by offset are read by seq: the message records map an offset to the seqs around
  it, so a window costs an index range scan of its own rows, not of the session. A range that
  does not line up with what the records say is read again from every row before it.
- A read made while this thread already holds one of the store's connections runs on it (the
  group-commit writer computing a preview holds one): a thread never waits on the pool for a
  second connection, and reads in a ``store.batch`` transaction see that transaction.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, Final

from ._fileindex import IndexName
from ._idindex import IdIndex
from ._indexsnap import FileColdIds, FileMessages, IndexMeta
from ._msgindex import RECORD, MessageList

if TYPE_CHECKING:
    from ._fold import SessionState
    from ._postgres import PostgresStore

#: Past any seq (the upper bound of a log read the records do not bound).
_NO_SEQ: Final = 2**62
_OFFSET = 8  # where a record keeps its line's offset (see RECORD)


class PgIndexFiles:
    """One session's record files in ``snapshot_records`` and its log in ``events``
    (an :class:`~eventlog._fileindex.IndexFiles`)."""

    def __init__(self, store: PostgresStore, key: str, index: bytes | None = None) -> None:
        self._store = store
        self._key = key
        self._kb = key.encode()
        self.where = store._describe(key)
        #: The record files as read (whole, on first use) and written since.
        self._data: dict[str, bytes] = {}
        if index is not None:
            self._data["index"] = index

    def path(self, name: IndexName) -> str:
        """The row holding a record file (for messages)."""
        return f"snapshot_records {name!r} of {self.where}"

    def _load(self, name: IndexName) -> bytes:
        got = self._data.get(name)
        if got is None:
            # Both files in one query, or only this one when the other was read already (the
            # open reads the message records: a first id lookup then reads only the ids).
            names = [n for n in ("index", "ids") if n not in self._data]
            rows = self._query(self._store._sql.records, (self._kb, names))
            found = {str(r[0]): bytes(r[1]) for r in rows}
            for other in names:
                self._data[other] = found.get(other, b"")
            got = self._data[name]
        return got

    def read(self, name: IndexName, offset: int, length: int) -> bytes:
        """Bytes of a record file (fewer, or none, when it is shorter or missing)."""
        return self._load(name)[offset : offset + length]

    def size(self, name: IndexName) -> int:
        """A record file's length (0 when missing)."""
        return len(self._load(name))

    def write(self, name: IndexName, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of a record file (one statement, like ``pwrite``)."""
        self._query(
            self._store._sql.put_records,
            {"k": self._kb, "n": name, "o": offset, "d": data},
            fetch=False,
        )
        old = self._data.get(name)
        if old is not None:
            padded = old + b"\0" * max(offset - len(old), 0)
            self._data[name] = padded[:offset] + data + padded[offset + len(data) :]

    def remove(self) -> None:
        """Nothing to do: the rows go with the session (a foreign key), and a stale row is
        overwritten by the next snapshot (it is read only as far as a snapshot covers)."""

    def read_log(self, offset: int, length: int) -> bytes:
        """``length`` bytes of the log at ``offset`` (fewer when it is shorter)."""
        if length <= 0:
            return b""
        end = offset + length
        lo, hi = self._seqs_around(offset, end)
        data = self._range(offset, end, lo, hi)
        if (lo, hi) != (0, _NO_SEQ) and (not data or (len(data) < length and hi != _NO_SEQ)):
            data = self._range(offset, end, 0, _NO_SEQ)  # the records did not line up
        return data

    def _range(self, offset: int, end: int, lo: int, hi: int) -> bytes:
        rows = self._query(
            self._store._sql.log_range, {"k": self._kb, "lo": lo, "hi": hi, "e": end}
        )
        start = -1
        parts: list[bytes] = []
        for pos, line in rows:
            pos = int(pos)
            if start < 0:
                if pos + len(line) <= offset:
                    continue
                if pos > offset:
                    return b""  # the row holding ``offset`` is not among them
                start = pos
            parts.append(bytes(line))
        data = b"".join(parts)
        return data[offset - start : end - start] if start >= 0 else b""

    def _seqs_around(self, offset: int, end: int) -> tuple[int, int]:
        """Seqs from one whose line starts at or before ``offset`` to one whose line starts at
        or after ``end``, as the message records say (0 and :data:`_NO_SEQ` where they say
        nothing). Unchecked records only narrow a query: :meth:`read_log` checks the result."""
        index = self._data.get("index", b"")
        count = len(index) // RECORD.size
        if not count:
            return 0, _NO_SEQ

        def offset_of(i: int) -> int:
            at = i * RECORD.size + _OFFSET
            return int.from_bytes(index[at : at + 8], "little")

        def seq_of(i: int) -> int:
            at = i * RECORD.size
            return int.from_bytes(index[at : at + 8], "little", signed=True)

        ordinals = range(count)
        first = bisect.bisect_right(ordinals, offset, key=offset_of) - 1
        last = bisect.bisect_left(ordinals, end, key=offset_of)
        lo = seq_of(first) if first >= 0 else 0
        hi = seq_of(last) if last < count else _NO_SEQ
        return (lo, hi) if 0 <= lo < hi else (0, _NO_SEQ)

    def _query(self, query: bytes, args: Any, *, fetch: bool = True) -> list[tuple[Any, ...]]:
        # A cursor of its own: the connection's reused one may hold a caller's unread rows.
        store = self._store
        held = store._held_connection()
        if held is not None:
            try:
                cur = held.execute(query, args, binary=True)
                return cur.fetchall() if fetch else []
            except Exception as exc:
                from ._pg_common import translate

                raise translate(exc, store._where, "read the index") from exc
        with store._reading("read the index") as conn:
            cur = conn.execute(query, args, binary=True)
            return cur.fetchall() if fetch else []


def open_indexed(files: PgIndexFiles, meta: IndexMeta, hash_key: bytes) -> SessionState | None:
    """The state ``meta`` stands for, its messages and ids read through ``files`` when used;
    None when the message records are too short for it (the caller reads the log)."""
    if files.size("index") < meta.records * RECORD.size:
        return None
    state = meta.state
    state.messages = MessageList.indexed(FileMessages(files, meta, hash_key), meta.ranges)
    state.ids = IdIndex(cold=FileColdIds(files, meta, hash_key))
    return state

"""What the sync and async PostgreSQL stores share: the server target, SQL text, and the pure
conversions between rows and sessions (no I/O here, so the two stores cannot drift apart).

Invariants:
- Keys, event ids and key parts travel as UTF-8 ``bytea``: exact for any str (NUL included)
  and ordered by code point, like Python's ``sorted``.
- A session's lines in seq order are its log; ``pos`` is each line's byte offset in it, so a
  byte-offset read (followers, snapshots) starts at the row holding that offset.
- Catalog columns are computed from the folded state by :func:`catalog_values`, so the table
  says what a fold of the log says. Display text (title, summary) has NUL replaced (PostgreSQL
  text cannot hold it); the exact values stay in the log and in ``metadata``.
- Error translation names the server (host, port, database, schema), never a password.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from ._errors import EventLogError, StorageError
from ._fold import EndedConversation, SessionState
from ._names import split_key
from ._pg_schema import channel_name, check_prefix
from ._preview import PREVIEW_MESSAGES, USER_PREVIEW, preview_candidates, preview_with_role

if TYPE_CHECKING:
    import psycopg


_json = msgspec.json.Encoder()


class _RowKey(msgspec.Struct):
    type: str
    seq: int
    id: str


_row_decoder = msgspec.json.Decoder(_RowKey)


def event_row(line: bytes) -> tuple[int, str, str]:
    """The (seq, id, type) of an encoded event line."""
    row = _row_decoder.decode(line)
    return row.seq, row.id, row.type


def key_parts(key: str) -> tuple[str | None, str | None, str | None]:
    """(agent, channel, peer) of a structured key as :func:`split_key` reads it (the catalog
    table's columns); (None, None, None) for a key with no structure."""
    parts = split_key(key)
    return (None, None, None) if parts is None else parts[:3]


class CatalogRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One session's catalog columns, as a PostgreSQL store lists them (the read side turns
    them into its rows: ``preview`` holds the leading user/assistant messages to pick from)."""

    key: str
    title: str | None
    metadata: dict[str, Any]
    preview: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    messages: int
    tokens: int
    state: str
    compaction_summary: str | None
    seq: int
    head: str
    size: int
    #: Where the current conversation began, the one it resumed, and the ended ones; None for a
    #: row written before the table kept them (the read side folds that session).
    conversations: Conversations | None = None


class Conversations(msgspec.Struct, frozen=True, kw_only=True):
    """A session's conversations as the catalog table keeps them (one JSON column)."""

    start: int = 0
    resumed_from: int | None = None
    ended: list[EndedConversation] = []


_ORDERS: Final = {
    "updated": "updated_at DESC, key",
    "created": "created_at DESC, key",
    "key": "key",
}
_record_meta = msgspec.json.Decoder(dict[str, Any])
_record_preview = msgspec.json.Decoder(list[dict[str, Any]])
_record_conversations = msgspec.json.Decoder(Conversations)


def catalog_query(schema: str, filter: Any) -> tuple[bytes, list[Any]]:
    """The SQL and parameters of a catalog listing (``filter`` as ``CatalogFilter`` has it)."""
    where: list[str] = []
    params: list[Any] = []
    if filter.prefix:
        where.append("key >= %s AND key < %s")
        prefix = str(filter.prefix).encode()
        params += [prefix, prefix + b"\xff"]  # no UTF-8 byte is 0xff
    for column in ("agent", "channel", "peer"):
        value = getattr(filter, column)
        if value is not None:
            where.append(f"{column} = %s")
            params.append(str(value).encode())
    if filter.state is not None:
        where.append("lifecycle = %s")
        params.append(text(str(filter.state)))
    if filter.created_after is not None:
        where.append("created_at > %s")
        params.append(filter.created_after)
    if filter.created_before is not None:
        where.append("created_at < %s")
        params.append(filter.created_before)
    order = _ORDERS.get(filter.order)
    if order is None:
        raise ValueError(f"unknown catalog order {filter.order!r}")
    if filter.limit is not None:
        params.append(int(filter.limit))
    if filter.offset:
        params.append(int(filter.offset))
    # Rendered once per shape (composing costs more client time than the query's rows).
    shape = (schema, tuple(where), order, filter.limit is not None, bool(filter.offset))
    rendered = _LISTINGS.get(shape)
    if rendered is None:
        if len(_LISTINGS) > 256:
            _LISTINGS.clear()
        rendered = _LISTINGS[shape] = _render_listing(schema, where, order, shape[3], shape[4])
    return rendered, params


_LISTINGS: dict[tuple[Any, ...], bytes] = {}


def _render_listing(schema: str, where: list[str], order: str, limit: bool, offset: bool) -> bytes:
    from psycopg import sql

    query = (
        "SELECT key, title, metadata, preview, created_at, updated_at, messages, live_tokens, "
        "lifecycle, summary, seq, head, size, conversations FROM {s}.sessions"
        + (" WHERE " + " AND ".join(where) if where else "")
        + f" ORDER BY {order}"
    )
    if limit:
        query += " LIMIT %s"
    if offset:
        query += " OFFSET %s"
    return sql.SQL(query).format(s=sql.Identifier(schema)).as_bytes(None)


#: Records already built, by (key as bytes, seq, head): the catalog columns are a function of the log up
#: to ``seq``, which ``head`` names (the chain), so a row listed again reuses its record (a page
#: a viewer lists every few seconds decodes only the rows that changed). Bounded: cleared when
#: full.
_RECORDS: dict[tuple[bytes, int, str], CatalogRecord] = {}
_RECORDS_MAX: Final = 4096


def catalog_records(rows: Sequence[Sequence[Any]]) -> list[CatalogRecord]:
    """The :class:`CatalogRecord` of each row of :func:`catalog_query` fetched in binary (the
    one built before for the same key, seq and head, if any)."""
    known = _RECORDS
    out: list[CatalogRecord] = []
    for row in rows:
        # key, seq and head as binary rows hold them: bytes, int, str (no conversions).
        ident = (row[0], row[10], row[11])
        record = known.get(ident)
        if record is None:
            if len(known) >= _RECORDS_MAX:
                known.clear()
            record = known[ident] = _catalog_record(row)
        out.append(record)
    return out


def _catalog_record(row: Sequence[Any]) -> CatalogRecord:
    return CatalogRecord(
        key=bytes(row[0]).decode(),
        title=row[1],
        metadata=_record_meta.decode(row[2]),
        preview=_record_preview.decode(row[3]),
        created_at=row[4],
        updated_at=row[5],
        messages=int(row[6]),
        tokens=int(row[7]),
        state=str(row[8]),
        compaction_summary=row[9],
        seq=int(row[10]),
        head=str(row[11]),
        size=int(row[12]),
        conversations=None if row[13] is None else _record_conversations.decode(row[13]),
    )


@dataclass(frozen=True, slots=True)
class CatalogValues:
    """The catalog columns of one session, from its folded state."""

    seq: int
    head: str
    updated_at: datetime
    messages: int
    live_tokens: int
    total_messages: int
    total_tokens: int
    last_consolidated: int
    lifecycle: str
    end_reason: str | None
    title: str | None
    metadata: bytes
    preview: bytes
    summary: str | None
    #: Encoded only for a full write (only non-message events change it).
    conversations: Conversations
    #: Whether appending messages can no longer change ``preview`` (see :func:`catalog_values`).
    settled: bool = False

    def hot(self) -> tuple[Any, ...]:
        """Columns every append changes, in the order of the write statements."""
        return (
            self.seq,
            self.head,
            self.updated_at,
            self.messages,
            self.live_tokens,
            self.total_messages,
            self.total_tokens,
            self.last_consolidated,
            self.lifecycle,
            self.end_reason,
        )

    def encoded_conversations(self) -> bytes:
        """The ``conversations`` column."""
        return _json.encode(self.conversations)

    def full(self) -> tuple[Any, ...]:
        """Columns only some events change (title, metadata, preview, summary)."""
        return (
            self.title,
            self.metadata,
            self.preview,
            self.summary,
            self.encoded_conversations(),
        )


#: Event tags that leave the live messages' leading part alone: after them a settled preview
#: is still the session's (messages only append; the rest touch no message).
KEEPS_PREVIEW: Final = frozenset({"message", "metadata", "consolidated", "lifecycle", "usage"})


def catalog_values(state: SessionState, *, preview: bytes | None = None) -> CatalogValues:
    """The catalog columns of ``state``.

    ``preview``: the stored candidates when they are known to be the state's (settled, and
    nothing since could change them), so the messages are not read for them.

    The preview column keeps the candidates (``preview_candidates``): the read side runs the
    same preview rule over them. They are ``settled`` once the rule stopped before the last
    message (a user message with display text, or the most candidates kept): messages appended
    after that cannot change them.
    """
    # An encrypted session: the catalog columns keep no title, metadata, preview or summary.
    if preview is not None:
        candidates: list[dict[str, Any]] = []
    else:
        candidates = [] if state.sealed else preview_candidates(state.messages)
    title = None if state.sealed else state.metadata.get("title")
    summary = state.compaction.summary if state.compaction is not None else None
    if state.sealed:
        summary = None
    return CatalogValues(
        seq=state.seq,
        head=state.head,
        updated_at=state.updated_at,
        messages=len(state.messages),
        live_tokens=state.live_tokens,
        total_messages=state.total_messages,
        total_tokens=state.total_tokens,
        last_consolidated=state.last_consolidated,
        lifecycle=state.lifecycle,
        end_reason=state.end_reason,
        title=text(title) if isinstance(title, str) else None,
        metadata=_json.encode({} if state.sealed else state.metadata),
        preview=_json.encode(candidates) if preview is None else preview,
        summary=text(summary),
        conversations=Conversations(
            start=state.conversation_start,
            resumed_from=state.resumed_from,
            ended=[
                msgspec.structs.replace(e, title="", preview=[], preview_seqs=[])
                for e in state.ended
            ]
            if state.sealed
            else state.ended,
        ),
        settled=state.sealed or preview is not None or _settled(candidates),
    )


class Loaded(NamedTuple):
    """A session as opening read it: its state, its log's length, and the catalog's stored
    preview column when that is of the same state (None: not known)."""

    state: SessionState
    size: int
    preview: bytes | None


def _settled(candidates: list[dict[str, Any]]) -> bool:
    return len(candidates) >= PREVIEW_MESSAGES or preview_with_role(candidates)[1] == USER_PREVIEW


def stored_preview_settled(preview: bytes, state: SessionState) -> bool:
    """Whether the catalog's stored ``preview`` column (the candidates at ``state``'s seq)
    is settled: messages appended after ``state`` cannot change it (see
    :func:`catalog_values`). False when it does not decode as candidates."""
    if state.sealed:
        return True
    try:
        candidates = _candidates.decode(preview)
    except msgspec.DecodeError:
        return False
    return _settled(candidates)


_candidates = msgspec.json.Decoder(list[dict[str, Any]])


def hot_values(state: SessionState) -> tuple[Any, ...]:
    """The catalog columns a message event changes (``append_event``'s order): updated_at,
    messages, live_tokens, total_messages, total_tokens, last_consolidated, lifecycle,
    end_reason."""
    return (
        state.updated_at,
        len(state.messages),
        state.live_tokens,
        state.total_messages,
        state.total_tokens,
        state.last_consolidated,
        state.lifecycle,
        state.end_reason,
    )


def tail_bytes(rows: Sequence[tuple[Any, ...]], offset: int) -> tuple[int, bytes]:
    """(log length, bytes from ``offset``) from rows (pos, line) starting at or before it."""
    if not rows:
        return offset, b""
    last_pos, last_line = int(rows[-1][0]), rows[-1][1]
    size = last_pos + len(last_line)
    if offset >= size:
        return size, b""
    data = b"".join(bytes(r[1]) for r in rows)
    return size, data[offset - int(rows[0][0]) :]


def notify_payload(key: str, seq: int) -> str:
    """The NOTIFY payload of an append: JSON ``[key, seq]`` (key null when too long)."""
    payload = _json.encode([key, seq])
    # PostgreSQL caps payloads at 8000 bytes, not characters: measured before decoding.
    if len(payload) > 7000:
        payload = _json.encode([None, seq])
    return payload.decode()


def notify_prefix(key: str) -> str:
    """What :func:`notify_payload` of ``key`` holds before the seq (``'["key",'``), encoded
    once per writer rather than on every append (see :func:`notify_from`)."""
    return _json.encode([key, 0]).decode()[:-2]


def notify_from(prefix: str, key: str, seq: int) -> str:
    """:func:`notify_payload` of ``key`` and ``seq``, ``prefix`` being its
    :func:`notify_prefix`."""
    payload = f"{prefix}{seq}]"
    # The cap is in bytes; a character is at most 4 of them (no encoding for a short key).
    if len(payload) <= 1750 or len(payload.encode()) <= 7000:
        return payload
    return notify_payload(key, seq)


def run(
    conn: psycopg.Connection[tuple[Any, ...]],
    query: bytes,
    args: Sequence[Any] | Mapping[str, Any] | None = None,
    *,
    binary: bool = False,
) -> psycopg.Cursor[tuple[Any, ...]]:
    """Execute ``query`` on the connection's own reused cursor; return the cursor (fetch from
    it before the next :func:`run` on that connection).

    A connection serves one thread at a time, so its cursor does too. Creating a cursor per
    statement (``conn.execute``) costs more client time than the rest of a short statement.

    A statement's first run on a connection is sent unprepared (parse, bind and execute in
    one round trip); from its second run on it is prepared (psycopg prepares in a round trip
    of its own, paid once by a statement run again, never by one run once: a CLI's listing).
    A connection lent before the store's schema was checked carries that check
    (``_sessionledger_check``): it goes in the statement itself, in the same round trip.
    """
    cur: psycopg.Cursor[tuple[Any, ...]] | None = getattr(conn, "_sessionledger_cursor", None)
    if cur is None or cur.closed:
        cur = conn.cursor()
        with contextlib.suppress(AttributeError):  # a connection class that takes no attributes
            conn._sessionledger_cursor = cur  # type: ignore[attr-defined]
    seen: set[bytes] | None = getattr(conn, "_sessionledger_seen", None)
    if seen is None:
        seen = set()
        with contextlib.suppress(AttributeError):
            conn._sessionledger_seen = seen  # type: ignore[attr-defined]
    check = getattr(conn, "_sessionledger_check", None)
    if check is not None:
        conn._sessionledger_check = None  # type: ignore[attr-defined]
        check(conn, cur, query, args, binary)
    elif query in seen:
        cur.execute(query, args, prepare=True, binary=binary)
    else:
        cur.execute(query, args, prepare=False, binary=binary)
    if len(seen) < 512:
        seen.add(query)
    return cur


def close_connection(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Close ``conn`` (errors ignored), first dropping what :func:`run` and ``idle_ok`` keep on
    it: its cursor refers back to it, a cycle only the cyclic garbage collector would free
    (every new store object's connection, cursor, adapters and loaders: about a hundred
    objects per CLI run), where the connection alone is freed as soon as it is dropped."""
    attrs = getattr(conn, "__dict__", None)
    if attrs is not None:
        for name in _CONN_ATTRS:
            attrs.pop(name, None)
    with contextlib.suppress(Exception):
        conn.close()


_CONN_ATTRS: Final = (
    "_sessionledger_cursor",
    "_sessionledger_seen",
    "_sessionledger_check",
    "_sessionledger_poller",
)


def text(value: str | None) -> str | None:
    """``value`` as PostgreSQL text can hold it (NUL replaced)."""
    return value.replace("\x00", "\ufffd") if value is not None else None


def translate(
    exc: BaseException, where: str, action: str, *, nothing_written: bool = False
) -> EventLogError:
    """An :class:`EventLogError` for a database error (EventLogErrors pass through)."""
    if isinstance(exc, EventLogError):
        return exc
    cause = " ".join(str(exc).split()) or type(exc).__name__
    if nothing_written:
        cause += "; nothing was written"
    return StorageError(where, action, cause)


def require_psycopg() -> None:
    """Raise a clear ImportError when the ``postgres`` extra is not installed."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ModuleNotFoundError(
            "the PostgreSQL store needs psycopg 3 and psycopg_pool: "
            "pip install 'sessionledger[postgres]'"
        ) from exc


class Statements:
    """The SQL of both stores, bound to one schema (keys and ids as UTF-8 bytea)."""

    def __init__(self, schema: str) -> None:
        from psycopg import sql

        s = sql.Identifier(schema)
        self.channel = channel_name(schema)

        # Rendered once: psycopg renders a Composed query again on every execute.
        def q(text: str) -> bytes:
            return sql.SQL(text).format(s=s, channel=sql.Literal(self.channel)).as_bytes(None)

        #: Fails unless the schema is at this code's version (sent with a store's first query).
        self.check_prefix = check_prefix(schema)
        self.lock = q("SELECT seq, head, size FROM {s}.sessions WHERE key = %s FOR UPDATE")
        self.lock_only = q("SELECT 1 FROM {s}.sessions WHERE key = %s FOR UPDATE")
        self.lines = q("SELECT line FROM {s}.events WHERE key = %s ORDER BY seq")
        self.tail = q(
            "SELECT pos, line FROM {s}.events WHERE key = %(k)s AND seq >= coalesce(("
            "SELECT seq FROM {s}.events WHERE key = %(k)s AND pos <= %(o)s "
            "ORDER BY seq DESC LIMIT 1), 0) ORDER BY seq"
        )
        self.exists = q("SELECT 1 FROM {s}.sessions WHERE key = %s")
        self.keys = q("SELECT key FROM {s}.sessions ORDER BY key")
        self.scan = q("SELECT key, size, session_id, updated_at FROM {s}.sessions")
        self.delete = q("DELETE FROM {s}.sessions WHERE key = %s")
        # Events have no foreign key to their session (it cost every append a lookup): a
        # delete locks the session row first, so no append can slip in between these two.
        self.delete_events = q("DELETE FROM {s}.events WHERE key = %s")
        self.cut = q("DELETE FROM {s}.events WHERE key = %s AND pos >= %s")
        self.find_id = q("SELECT seq FROM {s}.events WHERE key = %s AND id = %s")
        self.quarantine = q(
            "INSERT INTO {s}.quarantine (key, reason, line, byte_offset, data) "
            "VALUES (%s, %s, %s, %s, %s)"
        )
        self.unquarantine = q("DELETE FROM {s}.quarantine WHERE key = %s")
        self.trash = q(
            "INSERT INTO {s}.trash (key, id, deleted_at, reason, data) VALUES (%s, %s, %s, %s, %s)"
        )
        self.trash_list = q("SELECT id, key, deleted_at, reason FROM {s}.trash")
        self.trash_data = q("SELECT data FROM {s}.trash WHERE id = %s")
        self.trash_drop = q("DELETE FROM {s}.trash WHERE id = %s")
        self.snapshot = q("SELECT data FROM {s}.snapshots WHERE key = %s")
        self.put_snapshot = q(
            "INSERT INTO {s}.snapshots (key, data, seq) SELECT key, %s, %s FROM {s}.sessions "
            "WHERE key = %s ON CONFLICT (key) DO UPDATE SET data = excluded.data, "
            "seq = excluded.seq, written_at = now()"
        )
        # Record rows exist only beside an index snapshot (opening reads them unasked): a
        # snapshot dropped or of the other format takes them along.
        self.drop_snapshot = q(
            "WITH r AS (DELETE FROM {s}.snapshot_records WHERE key = %(k)s) "
            "DELETE FROM {s}.snapshots WHERE key = %(k)s"
        )
        self.put_snapshot_only = q(
            "WITH r AS (DELETE FROM {s}.snapshot_records WHERE key = %(k)s) "
            "INSERT INTO {s}.snapshots (key, data, seq) SELECT key, %(d)s, %(seq)s "
            "FROM {s}.sessions WHERE key = %(k)s ON CONFLICT (key) DO UPDATE SET "
            "data = excluded.data, seq = excluded.seq, written_at = now()"
        )
        self.catalog = q("SELECT data FROM {s}.catalog_blob WHERE id = 1")
        self.put_catalog = q(
            "INSERT INTO {s}.catalog_blob (id, data) VALUES (1, %s) "
            "ON CONFLICT (id) DO UPDATE SET data = excluded.data"
        )
        self.create = q(
            "WITH s AS (INSERT INTO {s}.sessions (key, session_id, seq, head, size, created_at, "
            "updated_at, agent, channel, peer, title, metadata, preview, conversations) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (key) DO NOTHING RETURNING key) "
            "INSERT INTO {s}.events (key, seq, pos, id, line) SELECT key, %s, 0, %s, %s FROM s "
            "RETURNING 1"
        )
        # The append (migration 5's append_events): one event's arrays are built server-side,
        # which is cheaper than sending one-element arrays.
        call = (
            "SELECT status, cur_seq, cur_head, cur_size, tail FROM {s}.append_events("
            "%b, %b, %b, {arrays}, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, "
            "%b)"
        )
        self.append_one = q(
            call.replace(
                "{arrays}",
                "ARRAY[%b::bigint], ARRAY[%b::bigint], ARRAY[%b::bytea], ARRAY[%b::bytea]",
            )
        )
        # The common append (migration 6): one message, only the columns a message changes.
        self.append_event = q(
            "SELECT status, cur_seq, cur_head, cur_size, tail FROM {s}.append_event("
            "%b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b, %b)"
        )
        self.append_many = q(
            call.replace("{arrays}", "%b::bigint[], %b::bigint[], %b::bytea[], %b::bytea[]")
        )
        # Where a session is now, and the lines after a seq (a writer catching up, no lock).
        self.since = q(
            "SELECT s.seq, s.head, s.size, (SELECT string_agg(e.line, ''::bytea ORDER BY e.seq) "
            "FROM {s}.events e WHERE e.key = s.key AND e.seq > %s AND e.seq <= s.seq) "
            "FROM {s}.sessions s WHERE s.key = %s"
        )
        # Opening, in one query: an index snapshot's message records (kind 0, migration 7),
        # the snapshot (kind 1) and the lines from its seq on (kind 2), or every line when
        # there is no snapshot with a seq, and the catalog's seq and preview (kind 3: a
        # settled preview spares the next append reading message bodies; none for a row
        # written before the catalog kept conversations, which the next append completes).
        # No message body before the snapshot is read.
        self.open = q(
            "SELECT 0, 0::bigint, 0::bigint, data FROM {s}.snapshot_records "
            "WHERE key = %(k)s AND name = 'index' UNION ALL SELECT 1, seq, 0::bigint, data FROM {s}.snapshots "
            "WHERE key = %(k)s AND seq IS NOT NULL "
            "UNION ALL SELECT 2, e.seq, e.pos, e.line FROM {s}.events e WHERE e.key = %(k)s "
            "AND e.seq >= coalesce((SELECT seq FROM {s}.snapshots WHERE key = %(k)s), 0) "
            "UNION ALL SELECT 3, seq, 0::bigint, CASE WHEN conversations IS NULL THEN NULL "
            "ELSE preview END FROM {s}.sessions WHERE key = %(k)s "
            "ORDER BY 1, 2"
        )
        # An index snapshot's record files (migration 7), read whole and written like pwrite
        # (zeros fill a gap; bytes after the written range stay).
        self.records = q(
            "SELECT name, data FROM {s}.snapshot_records WHERE key = %s AND name = ANY(%s)"
        )
        self.put_records = q(
            "INSERT INTO {s}.snapshot_records (key, name, data) "
            "SELECT key, %(n)s, decode(repeat('00', %(o)s::int), 'hex') || %(d)s "
            "FROM {s}.sessions WHERE key = %(k)s "
            "ON CONFLICT (key, name) DO UPDATE SET data = overlay("
            "snapshot_records.data || decode(repeat('00', "
            "greatest(%(o)s::int - length(snapshot_records.data), 0)), 'hex') "
            "PLACING %(d)s FROM %(o)s::int + 1)"
        )
        # Log bytes by offset (an index reading message lines): the rows between two seqs
        # the records name (0 and the last seq when they name none) that start before the end.
        self.log_range = q(
            "SELECT pos, line FROM {s}.events WHERE key = %(k)s AND seq >= %(lo)s "
            "AND seq < %(hi)s AND pos < %(e)s ORDER BY seq"
        )
        self.follow = q(
            "INSERT INTO {s}.followers (key, pid) VALUES (%s, pg_backend_pid()) "
            "ON CONFLICT DO NOTHING"
        )
        self.unfollow = q("DELETE FROM {s}.followers WHERE key = %s AND pid = pg_backend_pid()")
        self.prune_followers = q(
            "DELETE FROM {s}.followers WHERE pid NOT IN (SELECT pid FROM pg_stat_activity)"
        )
        # Imports and cuts write many lines under the row lock: insert, catalog, notify.
        self.write_full = q(
            "WITH ins AS (INSERT INTO {s}.events (key, seq, pos, id, line) "
            "SELECT %s, * FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[], %s::bytea[])), "
            "upd AS (UPDATE {s}.sessions SET seq = %s, head = %s, updated_at = %s, "
            "messages = %s, live_tokens = %s, total_messages = %s, total_tokens = %s, "
            "last_consolidated = %s, lifecycle = %s, end_reason = %s, size = %s, "
            "title = %s, metadata = %s, preview = %s, summary = %s, conversations = %s "
            "WHERE key = %s) "
            "SELECT pg_notify({channel}, %s)"
        )


@dataclass(frozen=True, slots=True)
class PgTarget:
    """Where the store's data lives: DSN, schema, and a printable name without secrets."""

    dsn: str
    schema: str
    connect_timeout: float

    @property
    def where(self) -> str:
        """``postgresql://host:port/dbname (schema s)``, for messages (parsed once per DSN
        and schema: every new store object names its server)."""
        known = _WHERE.get((self.dsn, self.schema))
        if known is None:
            if len(_WHERE) >= 64:
                _WHERE.clear()
            known = _WHERE[(self.dsn, self.schema)] = self._where()
        return known

    def _where(self) -> str:
        from psycopg.conninfo import conninfo_to_dict

        try:
            info = conninfo_to_dict(self.dsn)
        except Exception:
            return f"PostgreSQL (unparsable DSN), schema {self.schema}"
        host = str(info.get("host") or info.get("hostaddr") or "localhost")
        port = str(info.get("port") or 5432)
        db = str(info.get("dbname") or info.get("user") or "")
        return f"postgresql://{host}:{port}/{db} (schema {self.schema})"

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every connection."""
        return {"connect_timeout": max(2, math.ceil(self.connect_timeout)), "autocommit": True}

    def connect(
        self, cls: type[psycopg.Connection[tuple[Any, ...]]] | None = None
    ) -> psycopg.Connection[tuple[Any, ...]]:
        """One connection now (of ``cls``), or a :class:`StorageError` naming host and port."""
        import psycopg

        try:
            return (cls or psycopg.Connection).connect(self.dsn, **self.connect_kwargs())
        except Exception as exc:
            raise StorageError(self.where, "connect", " ".join(str(exc).split())) from exc

    def statements(self) -> Statements:
        """The SQL bound to this schema (rendered once per schema and process: rendering
        every statement cost a new store object more client time than its first query)."""
        known = _STATEMENTS.get(self.schema)
        if known is None:
            if len(_STATEMENTS) >= 64:
                _STATEMENTS.clear()
            known = _STATEMENTS[self.schema] = Statements(self.schema)
        return known


#: Printable server names by (DSN, schema).
_WHERE: dict[tuple[str, str], str] = {}
#: Rendered statements by schema (immutable: bytes only).
_STATEMENTS: dict[str, Statements] = {}

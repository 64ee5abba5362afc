"""What the sync and async PostgreSQL stores share: the server target, SQL text, and the pure
conversions between rows and sessions (no I/O here, so the two stores cannot drift apart).

Invariants:
- A session loads from one query: its snapshot row (if any) and its lines from the snapshot's
  seq on (or all of them). The snapshot is used only when its seq and hash match the line at
  that seq; otherwise the log is read whole. The lines are checked exactly like a file's.
- Catalog columns are computed from the folded state by :func:`catalog_values`, so the table
  says what a fold of the log says.
- Error translation names the server (host, port, database, schema), never a password.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._codec import LineDecoder, decode_log, split_hash
from ._errors import CorruptLogError, EventLogError, NotALogError, StorageError
from ._fold import SessionState, apply, fold

if TYPE_CHECKING:
    import psycopg

#: How many leading live messages the catalog keeps for the preview, and how much of each.
PREVIEW_MESSAGES: Final = 8
PREVIEW_CHARS: Final = 2000

_snapshot_encoder = msgspec.msgpack.Encoder()
_snapshot_decoder = msgspec.msgpack.Decoder(SessionState)
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
    """(agent, channel, peer) of a structured key ``agent:channel:peer[:thread]``.

    A two-part key ``channel:peer`` (nanobot's ``telegram:42``) has no agent.
    """
    parts = key.split(":")
    if len(parts) >= 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return None, parts[0], parts[1]
    return None, None, None


def _preview_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and len(content) > PREVIEW_CHARS:
        content = content[:PREVIEW_CHARS]
    elif isinstance(content, list):
        content = [
            {"type": "text", "text": str(p.get("text", ""))[:PREVIEW_CHARS]}
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        ]
    return {"role": message.get("role"), "content": content}


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(
            isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"].strip()
            for p in content
        )
    return False


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

    def full(self) -> tuple[Any, ...]:
        """Columns only some events change (title, metadata, preview, summary)."""
        return (self.title, self.metadata.decode(), self.preview.decode(), self.summary)


def catalog_values(state: SessionState) -> CatalogValues:
    """The catalog columns of ``state``.

    ``preview`` keeps the first live user and assistant messages up to the first user message
    with text (at most :data:`PREVIEW_MESSAGES`, text cut to :data:`PREVIEW_CHARS`), so the
    read side computes the preview with its own rules from them.
    """
    candidates: list[dict[str, Any]] = []
    for event in state.messages:
        message = event.message
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        candidates.append(_preview_message(message))
        if (role == "user" and _has_text(message.get("content"))) or len(
            candidates
        ) >= PREVIEW_MESSAGES:
            break
    title = state.metadata.get("title")
    summary = state.compaction.summary if state.compaction is not None else None
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
        title=title if isinstance(title, str) else None,
        metadata=_json.encode(state.metadata),
        preview=_json.encode(candidates),
        summary=summary,
    )


def encode_snapshot(state: SessionState) -> bytes:
    """A snapshot of ``state`` (msgpack of the folded state)."""
    return _snapshot_encoder.encode(state)


def state_from_rows(
    where: str, key: str, hash_key: bytes, rows: Sequence[tuple[Any, ...]]
) -> SessionState | None:
    """Fold the rows of the load query: (0, seq, snapshot, head) first if any, then (1, seq, line).

    Returns None when the snapshot does not match the log (the caller reloads without it).
    """
    if not rows:
        raise NotALogError(where, "the session has no header row")
    if rows[0][0] == 0:
        snap_seq, data, head = int(rows[0][1]), bytes(rows[0][2]), str(rows[0][3])
        lines = rows[1:]
        if not lines or int(lines[0][1]) != snap_seq:
            return None
        parts = split_hash(bytes(lines[0][2]).rstrip(b"\n"))
        if parts is None or parts[1] != head:
            return None
        try:
            state = _snapshot_decoder.decode(data)
        except msgspec.DecodeError:
            return None
        if state.seq != snap_seq or state.head != head or state.key != key:
            return None
        dec = LineDecoder(
            key=hash_key,
            prev_h=head,
            last_seq=snap_seq,
            expect_header=False,
            first_line=snap_seq + 2,
        )
        events = dec.feed(b"".join(bytes(r[2]) for r in lines[1:]))
        if dec.bad is not None or dec.pending:
            line = dec.bad.line if dec.bad is not None else dec.line_no + 1
            raise CorruptLogError(where, line, dec.bad.reason if dec.bad else "incomplete line")
        for event in events:
            apply(state, event)
        return state
    decoded = decode_log(b"".join(bytes(r[2]) for r in rows), key=hash_key)
    if decoded.header is None:
        problem = decoded.bad or decoded.torn
        raise NotALogError(where, f"line 1: {problem.reason if problem else 'empty'}")
    problem = decoded.bad or decoded.torn
    if problem is not None:
        raise CorruptLogError(where, problem.line, problem.reason)
    if decoded.header.key != key:
        raise NotALogError(where, f"its header names session {decoded.header.key!r}")
    return fold(decoded.header, decoded.events)


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
            "pip install 'sessionlog[postgres]'"
        ) from exc


class Statements:
    """The SQL of both stores, bound to one schema."""

    def __init__(self, schema: str) -> None:
        from psycopg import sql

        s = sql.Identifier(schema)
        self.channel = f"sessionlog_{schema}"[:63]

        def q(text: str) -> sql.Composed:
            return sql.SQL(text).format(s=s, channel=sql.Literal(self.channel))

        self.lock = q("SELECT seq, head, size FROM {s}.sessions WHERE key = %s FOR UPDATE")
        self.tail = q("SELECT line FROM {s}.events WHERE key = %s AND seq > %s ORDER BY seq")
        self.lines = q("SELECT 1, seq, line FROM {s}.events WHERE key = %s ORDER BY seq")
        self.lock_lines = q(
            "SELECT 1, e.seq, e.line FROM {s}.events e WHERE e.key = %s AND EXISTS "
            "(SELECT 1 FROM {s}.sessions WHERE key = %s FOR UPDATE) ORDER BY e.seq"
        )
        self.load = q(
            "SELECT 0, seq, data, head FROM {s}.snapshots WHERE key = %(k)s "
            "UNION ALL SELECT 1, seq, line, NULL FROM {s}.events WHERE key = %(k)s AND seq >= "
            "coalesce((SELECT seq FROM {s}.snapshots WHERE key = %(k)s), 0) ORDER BY 1, 2"
        )
        self.exists = q("SELECT 1 FROM {s}.sessions WHERE key = %s")
        self.keys = q("SELECT key FROM {s}.sessions ORDER BY key")
        self.delete = q("DELETE FROM {s}.sessions WHERE key = %s")
        self.find_id = q("SELECT seq FROM {s}.events WHERE key = %s AND id = %s")
        self.quarantine = q(
            "INSERT INTO {s}.quarantine (key, reason, line, byte_offset, data) "
            "VALUES (%s, %s, %s, %s, %s)"
        )
        self.unquarantine = q("DELETE FROM {s}.quarantine WHERE key = %s")
        self.save_snapshot = q(
            "INSERT INTO {s}.snapshots (key, seq, head, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, head = excluded.head, "
            "data = excluded.data, written_at = now()"
        )
        self.create = q(
            "WITH s AS (INSERT INTO {s}.sessions (key, session_id, seq, head, created_at, "
            "updated_at, agent, channel, peer, title, metadata, size) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s) "
            "ON CONFLICT (key) DO NOTHING RETURNING key) "
            "INSERT INTO {s}.events (key, seq, id, line) SELECT key, %s, %s, %s FROM s RETURNING 1"
        )
        write = (
            "WITH ins AS (INSERT INTO {s}.events (key, seq, id, line) "
            "SELECT %s, * FROM unnest(%s::bigint[], %s::text[], %s::bytea[])), "
            "upd AS (UPDATE {s}.sessions SET seq = %s, head = %s, updated_at = %s, "
            "messages = %s, live_tokens = %s, total_messages = %s, total_tokens = %s, "
            "last_consolidated = %s, lifecycle = %s, end_reason = %s, size = size + %s"
        )
        tail = " WHERE key = %s) SELECT pg_notify({channel}, %s)"
        self.write_hot = q(write + tail)
        self.write_full = q(
            write + ", title = %s, metadata = %s::jsonb, preview = %s::jsonb, summary = %s" + tail
        )


@dataclass(frozen=True, slots=True)
class PgTarget:
    """Where the store's data lives: DSN, schema, and a printable name without secrets."""

    dsn: str
    schema: str
    connect_timeout: float

    @property
    def where(self) -> str:
        """``postgresql://host:port/dbname (schema s)``, for messages."""
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
        return {"connect_timeout": max(2, math.ceil(self.connect_timeout)), "autocommit": False}

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """One connection now, or a :class:`StorageError` naming host and port."""
        import psycopg

        try:
            return psycopg.connect(self.dsn, **self.connect_kwargs())
        except Exception as exc:
            raise StorageError(self.where, "connect", " ".join(str(exc).split())) from exc

    def statements(self) -> Statements:
        """The SQL bound to this schema."""
        return Statements(self.schema)

"""Search what was said: a full-text projection over every message of every session.

Rules:
- The index is a projection like the catalog: built from the logs alone, deletable at any time
  (:func:`drop_search`), rebuilt on the next search. It never touches the append path: a search
  (or :func:`refresh_search`, e.g. from a background task) first catches it up with what the
  logs appended since, in one transaction per batch of sessions.
- Per session the index remembers the byte offset, seq and hash it read up to and the
  conversation current there. A log whose next line does not chain from that hash (cut,
  replaced) is read again from its start; a session that is gone leaves the index.
- Every ``message`` event ever appended is indexed (also messages later trimmed, withdrawn or
  cleared: the log keeps them, and search finds the conversation where something was said).
  The text is the content's text, tool-call arguments, and an Agents SDK item's arguments,
  output and reasoning summary.
- The embedded default is SQLite FTS5 from the standard library (file store: ``.search.sqlite3``
  in the store's directory; memory store: in memory). A PostgreSQL store uses PostgreSQL's own
  full text search, in tables of its schema.
- The index's connection closes with its store (``store.close()``, or leaving ``with store:``);
  a search after that opens it again.
- A query is words, matched all at once (each word as written, case and accents folded); no
  query syntax is passed through, so no input is a syntax error.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from functools import partial
from typing import Any, Final, Literal, Protocol

import msgspec

from sessionledger.eventlog import (
    BaseStore,
    Cleared,
    FileStore,
    InvalidEventError,
    MessageAppended,
    PostgresStore,
    SessionNotFoundError,
    portable,
)
from sessionledger.eventlog.backend import split_key
from sessionledger.eventlog.codec import LineDecoder
from sessionledger.eventlog.preview import content_text

from ._sdk_items import sdk_item

#: Sessions caught up per transaction.
BATCH: Final = 256
#: Order ``relevance`` ranks the newest this many matches (bounded time at any index size).
RELEVANCE_WINDOW: Final = 500
SearchOrder = Literal["relevance", "recent"]
_WORD = re.compile(r"\w+", re.UNICODE)


@portable()
class SearchHit(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One message that matched: where it is, a snippet around the match, and its score."""

    key: str
    #: The conversation it belongs to (its ``start_seq``, as :func:`list_conversations` has it).
    conversation: int
    seq: int
    role: str
    ts: datetime
    #: Text around the match, matched words in ``[`` ``]``.
    snippet: str
    #: Higher is better (the backend's relevance: BM25 in SQLite, ts_rank in PostgreSQL).
    score: float


class Mark(msgspec.Struct, frozen=True, array_like=True):
    """How far one session is indexed."""

    offset: int
    seq: int
    head: str
    conversation: int


class Doc(msgspec.Struct, frozen=True, array_like=True):
    """One message as the index holds it."""

    seq: int
    conversation: int
    role: str
    ts: datetime
    text: str


class SearchQuery(msgspec.Struct, frozen=True, kw_only=True):
    """What a backend is asked: the words and the filters."""

    words: tuple[str, ...]
    prefix: str | None = None
    channel: str | None = None
    role: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 20
    order: SearchOrder = "relevance"


#: (key, mark read before, new mark, docs, read from the start).
Update = tuple[str, "Mark | None", Mark, list[Doc], bool]

encode_mark = msgspec.msgpack.Encoder().encode
decode_mark = msgspec.msgpack.Decoder(Mark).decode

FilterName = Literal["prefix", "channel", "role", "since", "until"]


def filters(query: SearchQuery) -> list[tuple[FilterName, str | datetime]]:
    """The filters ``query`` sets besides its words (each backend says them in its SQL)."""
    named: tuple[tuple[FilterName, str | datetime | None], ...] = (
        ("prefix", query.prefix or None),
        ("channel", query.channel),
        ("role", query.role),
        ("since", query.since),
        ("until", query.until),
    )
    return [(name, value) for name, value in named if value is not None]


def still_current(
    updates: list[Update], mark_now: Callable[[str], Mark | None]
) -> Iterator[Update]:
    """The updates whose session is indexed as far as when they were read; the others were
    caught up meanwhile by another process (called inside the backend's write transaction)."""
    for update in updates:
        if mark_now(update[0]) == update[1]:
            yield update


def channel_of(key: str) -> str | None:
    """The channel part of a structured key, as :class:`SessionID` reads it (None: none)."""
    parts = split_key(key)
    return None if parts is None else parts[1]


class Backend(Protocol):
    """Where an index lives (SQLite or PostgreSQL)."""

    def changed(self, store: BaseStore) -> tuple[list[str], list[str]]:
        """(keys whose log moved past what is indexed, keys indexed but gone)."""
        ...

    def mark(self, key: str) -> Mark | None:
        """How far ``key`` is indexed (read now, not cached)."""
        ...

    def write(self, updates: list[Update]) -> None:
        """Add each session's docs (replacing what it had when read from the start), in one
        transaction; skip a session whose mark changed meanwhile (another process caught it
        up)."""
        ...

    def forget(self, keys: list[str]) -> None:
        """Remove sessions from the index."""
        ...

    def query(self, query: SearchQuery) -> list[SearchHit]:
        """The best hits, best first."""
        ...

    def drop(self) -> None:
        """Delete the index."""
        ...

    def close(self) -> None:
        """Close its connection (the index stays; the next use opens it again)."""
        ...


# -- what is indexed ------------------------------------------------------------------------------


def searchable_text(message: Mapping[str, Any]) -> str:
    """The text of a message that search matches (content, tool-call arguments, SDK items)."""
    parts: list[str] = []
    item = sdk_item(message)
    if item is not None:
        message = item
    text = content_text(message.get("content"))
    if text:
        parts.append(text)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                parts.append(fn["arguments"])
    for name in ("arguments", "output", "reasoning_content"):
        value = message.get(name)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.append(content_text(value) or "")
    summary = message.get("summary")
    if isinstance(summary, list):
        parts.extend(
            s["text"] for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str)
        )
    return "\n".join(p for p in parts if p)


def read_docs(store: BaseStore, key: str, mark: Mark | None) -> Update | None:
    """The messages ``key`` appended after ``mark`` (from the start when it no longer chains).

    None: the session is gone (or is no longer a readable log).
    """
    try:
        got = _read_after(store, key, mark)
        fresh = mark is None
        if got is None and mark is not None:
            got = _read_after(store, key, None)  # cut or replaced: read it again whole
            fresh = True
    except SessionNotFoundError:
        return None
    if got is None:
        return None
    return key, mark, got[0], got[1], fresh


def _read_after(store: BaseStore, key: str, mark: Mark | None) -> tuple[Mark, list[Doc]] | None:
    offset = 0 if mark is None else mark.offset
    size, data = store.read_tail(key, offset)
    if mark is None:
        dec = LineDecoder(key=store.hash_key)
        conversation = 0
    else:
        if size < offset:
            return None
        dec = LineDecoder(
            key=store.hash_key,
            prev_h=mark.head,
            last_seq=mark.seq,
            expect_header=False,
            offset=offset,
        )
        conversation = mark.conversation
    events = dec.feed(data)
    if dec.bad is not None and not events and mark is not None:
        return None  # the first new line does not chain: not the log we indexed
    docs: list[Doc] = []
    for event in events:
        if isinstance(event, MessageAppended):
            message = event.message
            role = message.get("role")
            text = searchable_text(message)
            if text:
                docs.append(
                    Doc(
                        seq=event.seq,
                        conversation=conversation,
                        role=role if isinstance(role, str) else "",
                        ts=event.ts,
                        text=text,
                    )
                )
        elif isinstance(event, Cleared) and event.reason is not None:
            conversation = event.seq
    if mark is None and dec.header is None:
        return None
    seq = events[-1].seq if events else (mark.seq if mark else dec.last_seq)
    return Mark(offset=dec.offset, seq=seq, head=dec.head, conversation=conversation), docs


# -- the public face ------------------------------------------------------------------------------

_backends: weakref.WeakKeyDictionary[BaseStore, Backend] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _backend(store: BaseStore) -> Backend:
    with _lock:
        got = _backends.get(store)
    if got is not None:
        return got
    # Built outside the module lock: it may do I/O (PostgreSQL's schema check, opening the
    # SQLite file), and one slow store must not hold up every other store's search.
    fresh = _new_backend(store)
    with _lock:
        got = _backends.get(store)
        if got is None:
            _backends[store] = fresh
            store.on_close(partial(_close_backend, weakref.ref(store), fresh))
            return fresh
    fresh.close()  # another thread built one first: keep theirs
    return got


def _close_backend(ref: weakref.ref[BaseStore], backend: Backend) -> None:
    """The store closed: close its index's connection now, not when the collector runs."""
    store = ref()
    with _lock:
        if store is not None and _backends.get(store) is backend:
            del _backends[store]
    backend.close()


def _new_backend(store: BaseStore) -> Backend:
    """PostgreSQL's own full text search for a PostgreSQL store; else SQLite FTS5, in a file
    beside a file store's logs, in memory for any other store."""
    if isinstance(store, PostgresStore):
        from ._search_pg import PgBackend

        return PgBackend(store)
    from ._search_sqlite import FILE_NAME, SqliteBackend

    return SqliteBackend(store.root / FILE_NAME if isinstance(store, FileStore) else None)


def _batches(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]


def refresh_search(store: BaseStore) -> int:
    """Catch the search index up with the logs (off the append path); return sessions read."""
    backend = _backend(store)
    changed, gone = backend.changed(store)
    if gone:
        backend.forget(gone)
    done = 0
    for keys in _batches(changed):
        updates: list[Update] = []
        vanished: list[str] = []
        for key in keys:
            got = read_docs(store, key, backend.mark(key))
            if got is None:
                vanished.append(key)
                continue
            updates.append(got)
        backend.write(updates)
        if vanished:
            backend.forget(vanished)
        done += len(keys)
    return done


def rebuild_search(store: BaseStore) -> int:
    """Delete the search index and build it again from the logs; return sessions indexed."""
    drop_search(store)
    return refresh_search(store)


def drop_search(store: BaseStore) -> None:
    """Delete the search index (the next search rebuilds it)."""
    _backend(store).drop()
    with _lock:
        _backends.pop(store, None)


def search(
    store: BaseStore,
    query: str,
    *,
    prefix: str | None = None,
    channel: str | None = None,
    role: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 20,
    order: SearchOrder = "relevance",
    refresh: bool = True,
) -> list[SearchHit]:
    """Messages of every session that contain all the words of ``query``, best first.

    ``prefix`` and ``channel`` select sessions (by key, as :func:`list_sessions` does), ``role``
    the speaker, ``since`` / ``until`` the message time (inclusive / exclusive). ``order``
    ``relevance`` ranks the newest :data:`RELEVANCE_WINDOW` matches by score (older matches are
    reached by narrowing: ``until``, filters, more words); ``recent`` gives the newest matches
    first (newest as indexed: each catch-up adds its messages in time order). The index is caught up first unless ``refresh`` is False (then it answers from what
    it holds).

    Raises:
        InvalidEventError: a query with no word, or a bad limit.
    """
    if not isinstance(query, str):
        raise InvalidEventError(f"query must be a str, not {query!r}")
    words = tuple(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    if not words:
        raise InvalidEventError(f"the query {query!r} has no word to search for")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidEventError(f"limit must be an integer >= 1, not {limit!r}")
    if order not in ("relevance", "recent"):
        raise InvalidEventError(f"order must be relevance or recent, not {order!r}")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
            raise InvalidEventError(f"{name} must be an aware datetime, not {value!r}")
    if refresh:
        refresh_search(store)
    ask = SearchQuery(
        words=words,
        prefix=prefix,
        channel=channel,
        role=role,
        since=since,
        until=until,
        limit=limit,
        order=order,
    )
    return _backend(store).query(ask)

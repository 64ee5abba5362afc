"""Catalog rows from a store that keeps its catalog as a table (PostgreSQL).

Such a store answers ``query_catalog_records(filter)`` with one indexed query and returns
``eventlog.CatalogRecord``s: the columns it keeps in the same transaction as each append. This
module turns them into :class:`SessionInfo` rows with the catalog's own rules (preview, tags,
summary), so a listing from PostgreSQL equals one from files.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, cast, runtime_checkable

from sessionledger.eventlog import EndedConversation, EventLogError
from sessionledger.eventlog.preview import session_preview

from ._catalog_row import SessionInfo, _described, _summary
from ._conversation_row import ConversationInfo, ended_rows


@runtime_checkable
class CatalogRecords(Protocol):
    """A store whose catalog is a table it keeps current itself."""

    def query_catalog_records(self, filter: Any) -> list[Any]:
        """The records ``filter`` selects, in its order, limit and offset applied."""
        ...


_KEEPS_TABLE: dict[type, bool] = {}


def catalog_records(store: object, query: Any) -> list[Any] | None:
    """The records ``query`` selects when ``store`` keeps its catalog as a table
    (:class:`CatalogRecords`), else None. The protocol check is kept per type: a runtime
    protocol check walks the protocol on every call, a fifth of a short listing."""
    kind = type(store)
    known = _KEEPS_TABLE.get(kind)
    if known is None:
        known = _KEEPS_TABLE[kind] = isinstance(store, CatalogRecords)
    return cast(CatalogRecords, store).query_catalog_records(query) if known else None


def info_from_record(record: Any, store: Any = None) -> SessionInfo:
    """The catalog row of one ``eventlog.CatalogRecord``.

    A record written before the table kept conversations is completed from ``store`` (its
    session folded), or left without ended conversations when no store is given.
    """
    conv = record.conversations
    start, resumed, ended = (
        _conversations(store, record.key)
        if conv is None
        else (conv.start, conv.resumed_from, conv.ended)
    )
    title, tags, meta_summary = _described(record.metadata)
    preview = session_preview(record.preview)
    return SessionInfo(
        key=record.key,
        title=title,
        preview=preview,
        created_at=record.created_at,
        updated_at=record.updated_at,
        messages=record.messages,
        tokens=record.tokens,
        state=record.state,
        tags=tags,
        summary=_summary(meta_summary, record.compaction_summary),
        seq=record.seq,
        head=record.head,
        conversation_start=start,
        resumed_from=resumed,
        ended=len(ended),
    )


def ended_of_record(record: Any, store: Any = None) -> tuple[ConversationInfo, ...]:
    """The ended conversations of one record's session, oldest first."""
    conv = record.conversations
    ended = _conversations(store, record.key)[2] if conv is None else conv.ended
    return ended_rows(record.key, record.created_at, ended)


def infos_from_records(records: Iterable[Any], store: Any = None) -> list[SessionInfo]:
    """The catalog rows of several records, in their order (see :func:`info_from_record`).

    A record listed before (the store hands out the same record object for the same key, seq
    and head) gets the row built then: rows are frozen and a function of the record. A record
    without conversations (written before the table kept them) is not: its row is completed
    from ``store``, which another store object (one without the keys of a sealed session)
    completes otherwise.
    """
    out: list[SessionInfo] = []
    for record in records:
        if record.conversations is None:
            out.append(info_from_record(record, store))
            continue
        known = _INFOS.get(id(record))
        if known is not None and known[0] is record:
            out.append(known[1])
            continue
        info = info_from_record(record, store)
        if len(_INFOS) >= 4096:
            _INFOS.clear()
        _INFOS[id(record)] = (record, info)
        out.append(info)
    return out


#: Rows by the identity of their record (kept alive beside it, so an id is never reused).
_INFOS: dict[int, tuple[Any, SessionInfo]] = {}


def _conversations(store: Any, key: str) -> tuple[int, int | None, list[EndedConversation]]:
    if store is None:
        return 0, None, []
    try:
        state = store.state(key)
    except EventLogError:
        return 0, None, []
    return state.conversation_start, state.resumed_from, state.ended

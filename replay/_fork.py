"""Fork: a new session from any conversation of a session, at any seq.

Rules:
- The fork's header records where it came from: ``fork_of`` (the source key), ``fork_seq`` and
  ``fork_h`` (the hash of the source's line at that seq), so ``verify`` can check the link while
  the source exists, and a rewritten source is detected from the fork.
- The fork starts from the source's state after ``seq`` (time travel): the conversation current
  at that seq, its metadata (in the header), its live messages (as ``message`` events with their
  stored token counts), its consolidation cursor and its compaction. Nothing else is copied.
- The fork is built whole and installed at once (``import_bytes``): a crash leaves no half fork,
  and a key that already holds a session is never overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sessionledger.eventlog import (
    BaseStore,
    Consolidated,
    Header,
    InvalidEventError,
    KnownEvent,
    MessageAppended,
)
from sessionledger.eventlog.backend import new_event_id
from sessionledger.eventlog.codec import encode_lines

from ._timetravel import state_at


def fork(
    store: BaseStore,
    key: str,
    seq: int | None = None,
    *,
    new_key: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """Start a new session from session ``key`` as it was after event ``seq`` (default: now).

    ``new_key`` defaults to ``<key>:fork-<8 hex>``; ``metadata`` is merged over the source's.
    Returns the new session's key.

    Raises:
        SessionNotFoundError: no session ``key``.
        PointNotFoundError: ``seq`` is past the end of the source.
        InvalidEventError: ``new_key`` already names a session, or the metadata cannot be encoded.
    """
    source = state_at(store, key, seq=seq)
    target = new_key if new_key is not None else f"{key}:fork-{new_event_id()[:8]}"
    if store.exists(target):
        raise InvalidEventError(f"cannot fork into {target!r}: that session exists")
    now = datetime.now(UTC)
    meta = dict(source.metadata)
    meta.update(metadata or {})
    header = Header(
        seq=0,
        ts=now,
        id=new_event_id(),
        key=target,
        created_at=now,
        metadata=meta,
        fork_of=key,
        fork_seq=source.seq,
        fork_h=source.head,
    )
    events: list[Header | KnownEvent] = [header]
    n = 0
    for message in source.messages:
        n += 1
        events.append(
            MessageAppended.of(
                seq=n, ts=now, id=new_event_id(), message=message.message, tokens=message.tokens
            )
        )
    if source.last_consolidated:
        n += 1
        events.append(Consolidated(seq=n, ts=now, id=new_event_id(), upto=source.last_consolidated))
    if source.compaction is not None:
        n += 1
        events.append(source.compaction.recorded(seq=n, ts=now, id=new_event_id()))
    try:
        data, _ = encode_lines(events, key=store.hash_key)
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(f"cannot fork {key!r}: {exc}") from exc
    if store.import_bytes(target, data) != "created":
        raise InvalidEventError(f"cannot fork into {target!r}: that session exists")
    return target

"""Opening a session from its bytes: decode, check, cut a torn tail, fold (every backend).

A store opens a session the same way whatever holds its bytes, so the stores cannot drift
apart: the functions here take the store (its backend, hash key, views, sealing, durability).

Rules:
- A log's first line is its header, and the header names the session's key: anything else
  is :class:`NotALogError`, never read as another session's log.
- A torn last line (no newline, bad JSON, bad hash) is a crash mid-write: opening cuts it off
  into quarantine (beside the log, nothing silently dropped) and syncs the cut unless the
  store's durability is ``"none"``. A bad line in the middle is :class:`CorruptLogError`.
- A header cut anywhere, even inside its first bytes, is a crash while creating the session:
  it goes to quarantine and the session is created again.
- A log (or segment) of a newer format is read, never appended to (:class:`NewerFormatError`).
- With a snapshot the log is read from the snapshot's line; a snapshot the log no longer
  matches is ignored and the whole log read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from ._codec import ZERO_HASH, Decoded, TornTail, decode_log, encode_line
from ._errors import (
    CorruptLogError,
    InvalidEventError,
    NewerFormatError,
    NotALogError,
    SessionNotFoundError,
    StorageError,
)
from ._events import FORMAT_VERSION, Header
from ._fold import SessionState, fold, fold_decoded
from ._indexsnap import IndexMeta
from ._snapshot import Snapshot
from ._store_types import OpenReport, RawSession
from ._values import encode_checked
from ._writer import SessionIO, new_event_id

if TYPE_CHECKING:
    from ._store import BaseStore

#: How every header line starts (a prefix of it is a header cut while being written).
_HEADER_START = b'{"type":"header"'


def decode_checked(store: BaseStore, key: str, data: bytes) -> Decoded:
    """``key``'s log bytes decoded and opened (sealed values); refuse what is not its log."""
    decoded = decode_log(data, key=store.hash_key)
    if decoded.header is None:
        problem = decoded.bad or decoded.torn
        reason = problem.reason if problem is not None else "empty file"
        raise NotALogError(store._describe(key), f"line 1: {reason}")
    if decoded.header.key != key:
        raise NotALogError(store._describe(key), f"its header names session {decoded.header.key!r}")
    store._privacy.unseal(key, decoded)
    return decoded


def cut_torn(store: BaseStore, key: str, io: SessionIO, torn: TornTail, keep: int) -> OpenReport:
    """Move a torn tail into quarantine and cut the log back to ``keep`` bytes (synced)."""
    where = store._backend.quarantine(
        key, torn.data, reason=torn.reason, line=torn.line, offset=torn.offset
    )
    io.truncate(keep)
    if store.durability != "none":
        io.sync()
    return OpenReport(key, torn=torn, quarantine=where)


def open_checked(
    store: BaseStore, key: str, *, create: bool, metadata: Mapping[str, Any] | None
) -> tuple[RawSession, SessionState, OpenReport]:
    """Open ``key`` under its writer lock, cut a torn tail, fold it (the async store too)."""
    snap = store._views.read_snapshot(key)
    raw = store._backend.open_raw(key, create, snap)
    if raw is None:
        raise SessionNotFoundError(key)
    try:
        state, report = store._prepare(key, raw, metadata)
    except BaseException:
        if raw.created:  # e.g. a full disk failed the header: no empty log is left behind
            store._backend.discard_new(key, raw.io)
        raw.io.close()
        raise
    return raw, state, report


def prepare(
    store: BaseStore, key: str, raw: RawSession, metadata: Mapping[str, Any] | None
) -> tuple[SessionState, OpenReport]:
    """The folded state of a log opened under its lock (created when new), per the rules."""
    data = raw.data
    base: int = getattr(raw, "base", 0)
    snap: Snapshot | IndexMeta | None = getattr(raw, "snapshot", None)
    restored = None
    if base:
        # Read from the snapshot's line: use it, or (the log no longer matches it) read all.
        restored = store._views.restore(key, data, base=base, snap=snap)
        if restored is None:
            data = store._backend.read(key) or b""
    torn_header = b"\n" not in data and (
        data.startswith(_HEADER_START) or _HEADER_START.startswith(data)
    )
    if restored is None and (not data or torn_header):
        # A new session, or a crash while its header was being written.
        report = OpenReport(key, created=True)
        if data:
            torn = TornTail(1, 0, data, "incomplete header line")
            report = cut_torn(store, key, raw.io, torn, 0)
        return _create(store, key, raw.io, metadata), report
    if restored is None:
        restored = store._views.restore(key, data)
    decoded = restored[2] if restored is not None else store._decode(key, data)
    if decoded.bad is not None:
        raise CorruptLogError(store._describe(key), decoded.bad.line, decoded.bad.reason)
    assert decoded.header is not None
    version = max(decoded.header.version, decoded.version)
    if version > FORMAT_VERSION:  # read it, never append to it
        raise NewerFormatError(store._describe(key), version, FORMAT_VERSION)
    report = OpenReport(key)
    if decoded.torn is not None:
        report = cut_torn(store, key, raw.io, decoded.torn, decoded.valid_length)
    state = restored[3] if restored is not None else fold_decoded(decoded.header, decoded)
    return state, report


def _create(
    store: BaseStore, key: str, io: SessionIO, metadata: Mapping[str, Any] | None
) -> SessionState:
    """Write a new session's header line (sealed by an encrypting store); its state."""
    header = new_header(key, metadata)
    sealed = store._privacy.seal_new_header(header)
    line, h = encode_line(sealed, ZERO_HASH, store.hash_key)
    io.append(line)
    if store.durability != "none":
        try:
            io.sync()
        except BaseException:
            # The caller is told the session was not created: leave no header that could list
            # it (the open's clean-up then removes the empty file, lock still held).
            with contextlib.suppress(StorageError):
                io.truncate(0)
            raise
    return fold(msgspec.structs.replace(header, h=h, sealing=sealed.sealing), ())


def new_header(key: str, metadata: Mapping[str, Any] | None) -> Header:
    """A new session's header event (its id and times drawn now)."""
    now = datetime.now(UTC)
    return Header(
        seq=0,
        ts=now,
        id=new_event_id(),
        key=key,
        created_at=now,
        metadata=dict(metadata or {}),
    )


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidEventError` (before anything is written) for a value JSON cannot carry."""
    if not isinstance(metadata, Mapping):
        raise InvalidEventError(f"metadata must be a dict, not {type(metadata).__name__}")
    encode_checked(metadata, "metadata")

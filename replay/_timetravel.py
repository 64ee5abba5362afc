"""Time travel: the folded state of a session as of a seq or a moment.

``state_at(store, key, seq=N)`` decodes (and checks) only the lines up to seq N and folds them
with the same fold the writer uses, so ``projections.history(state_at(...))`` is exactly what
the LLM was given then. ``at=`` picks the last event whose time is at or before the moment,
taking events in seq order and stopping at the first later one (event times never go backwards
for one writer; a stepped-back clock cannot make time travel skip ahead).

A naive ``at`` is local time (like nanobot's timestamps and what a person types).
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from sessionledger.eventlog import (
    BaseStore,
    CorruptLogError,
    InvalidEventError,
    NotALogError,
    SessionState,
    decode_log,
    fold,
)

from ._errors import PointNotFoundError
from ._fastscan import paused_gc, scan
from ._views import where


class _Stamp(msgspec.Struct):
    ts: datetime


_stamp = msgspec.json.Decoder(_Stamp)


def _aware(at: datetime) -> datetime:
    return at.astimezone(UTC) if at.tzinfo is None else at


def _line_ends(data: bytes) -> list[int]:
    """Offsets just past every newline."""
    ends: list[int] = []
    find = data.find
    pos = find(b"\n")
    while pos >= 0:
        ends.append(pos + 1)
        pos = find(b"\n", pos + 1)
    return ends


def _seq_for_time(data: bytes, ends: list[int], at: datetime) -> int:
    """Lines (header included) whose events are at or before ``at``, by bisection on ts."""

    def ts_of(i: int) -> datetime | None:
        start = ends[i - 1] if i else 0
        try:
            return _stamp.decode(data[start : ends[i] - 1]).ts
        except msgspec.DecodeError:
            return None

    lo, hi = 1, len(ends)  # lines [1, lo) are known <= at; find the first event line > at
    while lo < hi:
        mid = (lo + hi) // 2
        ts = ts_of(mid)
        if ts is None or ts > at:
            hi = mid
        else:
            lo = mid + 1
    return lo


def state_at(
    store: BaseStore, key: str, seq: int | None = None, at: datetime | None = None
) -> SessionState:
    """The session's state after event ``seq``, or as of time ``at`` (neither: the latest).

    Raises:
        PointNotFoundError: ``seq`` is past the end of the log, or ``at`` before the session.
        CorruptLogError: a line before that point is corrupt.
        NotALogError: the file is not a session log.
        SessionNotFoundError: no session ``key``.
    """
    if seq is not None and at is not None:
        raise InvalidEventError("give seq or at, not both")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise InvalidEventError(f"seq must be an integer >= 0, not {seq!r}")
    path = where(store, key)
    data = store.read_bytes(key)
    first = data.find(b"\n") + 1
    header = decode_log(data[:first], key=store.hash_key).header if first else None
    if header is None:
        raise NotALogError(path, "line 1 is not a valid session header")
    if header.key != key:
        raise NotALogError(path, f"its header names session {header.key!r}")
    base = header.seq
    if at is not None:
        moment = _aware(at)
        if moment < header.created_at:
            raise PointNotFoundError(path, f"{moment.isoformat()} is before the session began")
        ends = _line_ends(data)
        cut = ends[_seq_for_time(data, ends, moment) - 1]
    elif seq is not None:
        if seq < base:
            raise PointNotFoundError(path, f"seq {seq} is before this segment (seq {base})")
        cut = _end_of_line(data, seq - base + 1)
        if _SEGMENT_HEADER in data:  # a log in segments: their headers are lines, not seqs
            cut = _end_of_event(data, seq - base)
    else:
        cut = data.rfind(b"\n") + 1
    fast = scan(data, store.hash_key, end=cut)
    if fast is not None:
        start, events, last = fast.header, fast.events, fast.last_seq
    else:
        decoded = decode_log(data[:cut], key=store.hash_key)
        # A torn last line is not part of the log (recover cuts it); a bad line before it is.
        torn_mid = decoded.torn is not None and (decoded.header is None or cut < len(data))
        problem = decoded.bad or (decoded.torn if torn_mid else None)
        if problem is not None:
            raise CorruptLogError(path, problem.line, problem.reason)
        assert decoded.header is not None
        start, events, last = decoded.header, decoded.events, decoded.last_seq
    if seq is not None and last < seq:
        raise PointNotFoundError(path, f"seq {seq} is past the end of the log (seq {last})")
    if start.sealing:  # an encrypted session: open what the store would open
        events = store.open_events(key, start, list(events))
        start = store.open_header(key, start)
    with paused_gc():
        state = fold(start, events)
    if fast is not None:
        # The fast path decodes message bodies in place: give the live ones their own bytes so
        # the returned state does not keep the whole log buffer alive.
        state.messages = state.messages.detached()
    return state


_SEGMENT_HEADER = b'\n{"type":"header"'


def _end_of_event(data: bytes, events: int) -> int:
    """Offset just past the line of the ``events``-th event, segment headers not counted (or
    past the last complete line if there are fewer)."""
    pos = data.find(b"\n")
    while events > 0 and pos >= 0:
        nxt = data.find(b"\n", pos + 1)
        if nxt < 0:
            break
        if not data.startswith(_SEGMENT_HEADER[1:], pos + 1):
            events -= 1
        pos = nxt
    return pos + 1


def _end_of_line(data: bytes, line: int) -> int:
    """Offset just past 1-based ``line`` (or past the last complete line if there are fewer)."""
    pos = -1
    find = data.find
    for _ in range(line):
        nxt = find(b"\n", pos + 1)
        if nxt < 0:
            break
        pos = nxt
    return pos + 1

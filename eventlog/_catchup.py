"""Many writers, one log: folding in what other writers appended (every backend).

Any number of stores (in this process or others) may write the same session; a store keeps
one :class:`SessionLog` per session it writes. Each write locks the log for that write only
and first catches the log up (:func:`catch_up`).

Rules:
- Lines that follow the chain from the last line this log knew are folded in (opened first
  for a sealed session).
- An incomplete last line found under the lock was left by a dead writer: it goes to
  quarantine, as on open. Without the lock nothing is written.
- Anything else (a log cut back or replaced, a line that does not follow, a forked child's
  first write) reloads the session from the log in place, exactly as on open.
- Before a store hands out another writer of a log it holds (:func:`revalidate`), it also
  checks that the log still ends with the line it last knew, so a log rewritten in place to
  the same length is reloaded too.
- A log whose session was removed meanwhile is closed (``store._gone``); its writers raise.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._backend import CatchUp, SharedIO
from ._codec import decode_log
from ._errors import SessionNotFoundError, StoreClosedError
from ._fold import SessionState, apply
from ._opening import cut_torn
from ._writer import SessionIO, SessionLog

if TYPE_CHECKING:
    from ._store import BaseStore

#: The end of every line: its 32 hex digits of hash, the closing quote and brace, a newline.
_HEAD_BYTES = 35


@dataclass(slots=True)
class _Reopened:
    io: SessionIO
    data: bytes
    created: bool = False


def weak_catch_up(store: BaseStore) -> CatchUp:
    """The store's catch-up for its backend's I/O, holding the store weakly (no cycle)."""
    ref = weakref.ref(store)

    def bound(key: str, io: SharedIO, state: SessionState, *, locked: bool) -> bool:
        target = ref()
        if target is None:
            raise StoreClosedError("the store is gone")
        return catch_up(target, key, io, state, locked=locked)

    return bound


def catch_up(
    store: BaseStore,
    key: str,
    io: SharedIO,
    state: SessionState,
    *,
    locked: bool,
    check_head: bool = False,
) -> bool:
    """Fold into ``state`` what other writers appended to ``key``'s log since ``io`` looked.

    ``locked``: the log's lock is held (a write follows); an incomplete last line is then
    a dead writer's and goes to quarantine, and anything unexpected reloads the log in
    place. Without the lock nothing is written, and False means: read the log instead.
    """
    if not locked:
        with io.pinned() as usable:
            return usable and not io.stale and _fold_new(store, key, io, state, locked=False)
    if not io.stale and _fold_new(store, key, io, state, locked=True, check_head=check_head):
        return True
    # Cut back, replaced in place, a line that does not follow, or a forked child's first
    # write: open the log again, exactly as on open (quarantine, CorruptLogError).
    data = io.read_from(0)
    io.set_size(len(data))
    fresh, report = store._prepare(key, _Reopened(io, data), None)
    store._reports[key] = report
    for name in SessionState.__struct_fields__:
        setattr(state, name, getattr(fresh, name))
    io.stale = False
    return True


def revalidate(store: BaseStore, key: str, log: SessionLog) -> bool:
    """Before handing out a writer of a log ``store`` already holds: catch it up, checking
    that the log still ends with the line it last knew. False: the session is gone."""
    io: Any = log.io
    if not hasattr(io, "lock"):
        return True
    with log.lock:
        if log.closed:
            return False
        io.lock(True)
        try:
            catch_up(store, key, io, log.state, locked=True, check_head=True)
        except SessionNotFoundError:
            return False
        finally:
            io.unlock()
        if log.state.seq < log.commit.written:
            log.rebase()
    return True


def _fold_new(
    store: BaseStore,
    key: str,
    io: SharedIO,
    state: SessionState,
    *,
    locked: bool,
    check_head: bool = False,
) -> bool:
    try:
        length = io.observe()
    except SessionNotFoundError:
        if locked:
            store._gone(key, io)
            raise
        return False
    known = io.size()
    if check_head and known >= _HEAD_BYTES:
        if length < known:
            return False
        # The last line this log knew must still be there: its hash ends it.
        end = io.read_from(known - _HEAD_BYTES)[:_HEAD_BYTES]
        if end[:32] != state.head.encode("ascii") or end[32:] != b'"}\n':
            return False
    if length == known:
        return True
    if length < known:
        return False
    tail = io.read_from(known)
    decoded = decode_log(
        tail,
        key=store.hash_key,
        expect_header=False,
        prev_h=state.head,
        last_seq=state.seq,
        offset=known,
        first_line=state.seq + 2,
    )
    torn = decoded.torn
    if decoded.bad is not None or (torn is not None and torn.data.endswith(b"\n")):
        return False
    for event in store._privacy.unseal_events(key, state, decoded.events):
        apply(state, event)
    state.head = decoded.head  # the last line's, as in fold_decoded
    io.set_size(decoded.valid_length)
    if torn is not None and locked:
        store._reports[key] = cut_torn(store, key, io, torn, decoded.valid_length)
    return True

"""The store's privacy operations: encryption at rest, erasure, redaction, key rotation.

Every sync store holds one :class:`Privacy` and delegates its privacy methods to it; it is
inert until the store is given a ``key_provider``.

Rules:
- Sealing follows the session's header: a session created by an encrypting store is sealed
  (header ``sealing``), one created without a key provider stays plaintext, whatever store
  opens it later. Reading a sealed session without the keys raises
  :class:`KeyUnavailableError`; reading the bytes (``read_bytes``, ``verify``) needs no key.
- Erase and redact first append their event (who, when, why) and make it durable, then destroy
  the keys in the key store (one atomic replace), then drop the session's snapshot. A crash
  after the event and before the keys are destroyed loses nothing: readers already treat those
  seqs as destroyed (the log says so), and the next open of the session (or a repeated call)
  destroys the keys. A crash before the event changes nothing.
- Derived views never hold plaintext of a sealed session: snapshots (either format) are sealed
  with the key of their seq (so erasing destroys them too); an index snapshot is opened where
  it is read (``_read_snapshot``) and sealed where it is encoded, so in memory it is always
  plaintext; catalog rows of sealed sessions keep no title, preview or summary.
- Rotation rewraps the key records only; no log byte changes.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from ._codec import Decoded
from ._crypto import SEALING, WINDOW, Keyring, OpenMessage, SessionSeal, WindowOpener
from ._errors import EventLogError, InvalidEventError, KeyUnavailableError
from ._events import Erased, Event, Header, KnownEvent, MessageAppended, Redacted
from ._fold import SessionState
from ._indexsnap import IndexMeta
from ._keystore import KeyProvider, KeyStore
from ._names import check_key
from ._snapshot import Anchored, S
from ._writeapi import Draft, WriteAPI

if TYPE_CHECKING:
    from ._store import BaseStore
    from ._writer import SessionWriter

_MAX_NOTE: Final = 1000


def _check_note(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > _MAX_NOTE:
        raise InvalidEventError(f"{name} must be a str of at most {_MAX_NOTE} chars, not {value!r}")
    return value


class Privacy:
    """Erase, redact, rotate, and the sealing hooks of one store (it holds this object)."""

    def __init__(self, store: BaseStore) -> None:
        # The store owns this object: a weak reference back, so no cycle keeps the store alive.
        self._store = cast("BaseStore", weakref.proxy(store))
        #: The store's key provider and key store (None: no encryption).
        self.keyring: Keyring | None = None
        #: The seal of each sealed session this store opened, by session id.
        self._seals: dict[str, SessionSeal] = {}

    def use_keys(self, provider: KeyProvider | None, keystore: KeyStore | None) -> None:
        """Encrypt with ``provider``'s master key and ``keystore``'s records (None: plaintext)."""
        if provider is None:
            if keystore is not None:
                raise InvalidEventError("key_store= needs a key_provider=")
            return
        if keystore is None:
            raise InvalidEventError("this store needs key_store= beside key_provider=")
        self.keyring = Keyring(provider, keystore)

    # -- hooks the store calls -------------------------------------------------------------------

    def seal_of(self, key: str, header: Header) -> SessionSeal:
        """The seal of a sealed session (its key tree re-read), or raise if it cannot open."""
        keyring = self.keyring
        if keyring is None:
            raise KeyUnavailableError(
                f"session {key!r}", "its log is encrypted; open the store with its key_provider"
            )
        if header.sealing != SEALING:
            raise KeyUnavailableError(f"session {key!r}", f"unknown sealing {header.sealing!r}")
        tree = keyring.tree(header.id)
        cache = self._seals
        seal = cache.get(header.id)
        if seal is None or seal.key != key:
            seal = cache[header.id] = SessionSeal(keyring, key, header.id, tree)
        else:
            seal.tree = tree  # the record's tree now (another store may have destroyed keys)
        return seal

    def unseal_events(self, key: str, state: SessionState, events: list[Event]) -> list[Event]:
        """Events another writer appended after ``state``, opened (a shared log's catch-up)."""
        if not state.sealed:
            return events
        header = Header(
            seq=0,
            ts=state.created_at,
            id=state.id,
            key=key,
            created_at=state.created_at,
            sealing=SEALING,
        )
        seal = self.seal_of(key, header)
        seal.note_dead(events)
        return [seal.open_event(e) for e in events]

    def unseal(self, key: str, decoded: Decoded) -> None:
        """Open a freshly decoded log in place (nothing to do for a plaintext one)."""
        header = decoded.header
        if header is not None and header.sealing:
            self.seal_of(key, header).open_decoded(decoded)

    def open_sealed(self, key: str, snapshot: Anchored) -> bool:
        """Open a snapshot's sealed values in place (False: its seq's key was destroyed)."""
        header = snapshot.header
        if not header.sealing:
            return True
        return self._open_sealed(key, snapshot) is not None

    def _open_sealed(self, key: str, snapshot: Anchored) -> SessionSeal | None:
        """``open_sealed`` of a sealed snapshot: the seal it opened with (its key tree read from
        the key store now), or None when its seq's key was destroyed."""
        seal = self.seal_of(key, snapshot.header)
        state = snapshot.state
        erased = state.erased_upto or -1  # 0: nothing was erased (seq 0 is the header)
        seal.dead = (max(seal.dead[0], erased), seal.dead[1] | set(state.redacted))
        return seal if seal.open_snapshot(snapshot) else None

    def unseal_restored(
        self, key: str, snapshot: Anchored, decoded: Decoded, *, just_read: bool = False
    ) -> bool:
        """Open a snapshot's sealed values and the tail decoded after it (before the fold).

        An index snapshot's values were opened when it was read (``_read_snapshot``); its
        messages are read from the log lines, and get the opener as they are. ``just_read``:
        the caller read this index snapshot in the same call, so the key tree it was opened
        with (read from the key store then) is the one used: a load reads the key record once.
        False when the snapshot cannot be opened (its seq's key was destroyed): read the log.
        """
        header = snapshot.header
        if not header.sealing:
            return True
        seal: SessionSeal | None
        if not isinstance(snapshot, IndexMeta):
            seal = self._open_sealed(key, snapshot)
            if seal is None:
                return False
        else:
            seal = self._seals.get(header.id) if just_read else None
            if seal is None or seal.key != key:
                seal = self.seal_of(key, header)
        decoded.header = snapshot.header  # the tail's decode names the snapshot's header
        seal.open_decoded(decoded, header=False)
        opener = self.opener_of(seal, snapshot)
        messages = snapshot.state.messages
        source = messages.source
        if isinstance(snapshot, IndexMeta) and source is not None:
            source.opener = opener
        for message in messages.in_memory:
            message.__dict__["_open"] = opener
        return True

    def seal_new_header(self, header: Header) -> Header:
        """The header line's event for a new session (a key record is created first)."""
        keyring = self.keyring
        if keyring is None:
            return header
        tree = keyring.create(header.id)
        seal = self._seals[header.id] = SessionSeal(keyring, header.key, header.id, tree)
        return seal.seal_header(header)

    def arm_writer(self, writer: WriteAPI[Any, Any]) -> None:
        """Give a writer of a sealed session its sealer, and finish an interrupted erasure."""
        seal = self._seals.get(writer.state.id)
        if seal is None or self.keyring is None:
            return
        writer._seal = seal.seal
        self.finish_destroying(seal, writer.state)

    def finish_destroying(self, seal: SessionSeal, state: SessionState) -> None:
        keyring = self.keyring
        assert keyring is not None
        if state.erased_upto and state.erased_upto > seal.tree.erased_upto:
            seal.tree = keyring.destroy(seal.session_id, 0, state.erased_upto)
        for seq in state.redacted:
            if not seal.tree.destroyed(seq):
                seal.tree = keyring.destroy(seal.session_id, seq, seq)

    @staticmethod
    def opener_of(seal: SessionSeal, snapshot: Anchored) -> OpenMessage:
        """How the messages of ``snapshot`` (opened with ``seal``) open: from its window when
        it has one, else each on its own."""
        if isinstance(snapshot, IndexMeta):
            window = snapshot.window_view()
            if window:
                return WindowOpener(seal, snapshot.seq, window)
        return seal.open_message

    def seal_snapshot(
        self, key: str, snapshot: S, messages: Sequence[MessageAppended] | None = None
    ) -> S:
        """A snapshot of a sealed session with its plaintext values sealed (messages already
        are); an index snapshot given its state's live ``messages`` gets a window of the
        newest (see ``SessionSeal.seal_window``)."""
        if not snapshot.header.sealing:
            return snapshot
        seal = self.seal_of(key, snapshot.header)
        sealed = seal.seal_snapshot(snapshot)
        if messages is not None and isinstance(sealed, IndexMeta) and len(messages):
            window = seal.seal_window(sealed.seq, messages[-WINDOW:])
            sealed.window, sealed.window_span = window, (0, len(window))
        return sealed

    # -- public operations -----------------------------------------------------------------------

    def open_header(self, key: str, header: Header) -> Header:
        """A header read from ``key``'s bytes by hand, its sealed values opened (as ``load``).

        For tools that decode log bytes themselves (time travel, follow, viewers); a plaintext
        header is returned as is. Raises :class:`KeyUnavailableError` without the keys.
        """
        if not header.sealing:
            return header
        return self.seal_of(key, header).open_header(header)

    def open_events(self, key: str, header: Header, events: list[Event]) -> list[Event]:
        """Events read from ``key``'s bytes by hand, opened as ``load`` opens them.

        ``header`` is the session's header (as read, or opened); messages get their opener
        (decrypted on use). A plaintext session's events are returned as they are.
        """
        if not header.sealing:
            return events
        seal = self.seal_of(key, header)
        seal.note_dead(events)
        return [seal.open_event(e) for e in events]

    def finish_erasures(self, key: str) -> bool:
        """Destroy keys an interrupted erase or redact left (the log records it); True if any.

        ``replay.recover`` calls it for every session; opening a session for writing does too.
        """
        if self.keyring is None:
            return False
        store = self._store
        data = store._backend.read(check_key(key))
        header = header_of(data) if data else None
        if header is None or not header.sealing:
            return False
        state = store.load(key).state
        seal = self.seal_of(key, header)
        before = seal.tree
        self.finish_destroying(seal, state)
        return seal.tree is not before

    @contextlib.contextmanager
    def sealed_writer(self, key: str, what: str) -> Iterator[tuple[SessionWriter, SessionSeal]]:
        """This store's writer of ``key`` (opened for the call, and closed after, if need be)."""
        store = self._store
        if self.keyring is None:
            raise InvalidEventError(f"{what} needs an encrypted store (key_provider=)")
        key = check_key(key)
        own = store._writers.get(key)
        opened = own is None or own.closed
        writer = store.open(key)
        try:
            seal = self._seals.get(writer.state.id)
            if seal is None:
                raise InvalidEventError(
                    f"session {key!r} is not encrypted: {what} destroys keys, and it has none"
                )
            yield writer, seal
        finally:
            if opened:
                store._close_writer(key)

    def erase(self, key: str, *, by: str | None = None, reason: str | None = None) -> int:
        """Erase a session's content: destroy its keys, keep its log (envelopes and chain).

        Appends an ``erased`` event (``by``, ``reason``; the time is its ``ts``) and returns its
        seq. Afterwards every message reads back as a placeholder (``_withheld: "erased"``),
        metadata is empty, and no file holds anything that opens, even with the master key.
        The session stays writable; later events get keys the erasure did not destroy.
        """
        by, reason = _check_note("by", by), _check_note("reason", reason)

        def make(_s: SessionState, seq: int, ts: datetime, eid: str) -> KnownEvent:
            return Erased(seq=seq, ts=ts, id=eid, by=by, reason=reason)

        with self.sealed_writer(key, "erase") as (writer, seal):
            seq = writer._submit(Draft(make), None, None)
            writer.flush()
            seal.dead = (max(seal.dead[0], seq), seal.dead[1])
            self.finish_destroying(seal, writer.state)
            self.drop_views(key)
        return seq

    def redact(
        self, key: str, seq: int, *, by: str | None = None, reason: str | None = None
    ) -> int:
        """Redact one message: destroy its key; its event stays, with its envelope.

        Appends a ``redacted`` event naming ``seq`` and returns its seq (a message already
        redacted appends nothing and returns 0). Afterwards the message reads back as a
        placeholder (``_withheld: "redacted"``) that history, previews and exports skip.
        """
        by, reason = _check_note("by", by), _check_note("reason", reason)
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise InvalidEventError(f"seq must be an integer >= 1, not {seq!r}")

        def make(_s: SessionState, at: int, ts: datetime, eid: str) -> KnownEvent:
            return Redacted(seq=at, ts=ts, id=eid, target=seq, by=by, reason=reason)

        with self.sealed_writer(key, "redact") as (writer, seal):
            state = writer.state
            if seq in state.redacted or seq <= state.erased_upto:
                self.finish_destroying(seal, state)
                return 0
            if not self.is_message(key, state, seq):
                raise InvalidEventError(f"session {key!r}: seq {seq} is not a message event")
            done = writer._submit(Draft(make), None, None)
            writer.flush()
            seal.dead[1].add(seq)
            self.finish_destroying(seal, writer.state)
            self.drop_views(key)
        return done

    def rotate_master_key(self, *, retire: bool = True) -> int:
        """Rewrap every session key under a new master key; return how many were rewrapped.

        No log is touched. With ``retire`` the old master keys are dropped at the end (only
        then: a crash midway leaves every record openable; call again to finish).
        """
        if self.keyring is None:
            raise InvalidEventError("rotate_master_key needs an encrypted store (key_provider=)")
        # The seals stay: rotation rewraps the records, their trees are the same, and a state
        # loaded before must keep the seal that a later erase or redact here updates.
        return self.keyring.rotate(retire=retire)

    def is_message(self, key: str, state: SessionState, seq: int) -> bool:
        if seq > state.seq:
            return False
        for message in state.messages:
            if message.seq == seq:
                return True
        store = self._store
        for event in store.load(key, snapshot=False).events:
            if event.seq == seq:
                return isinstance(event, MessageAppended)
        return False

    def drop_views(self, key: str) -> None:
        """Remove the session's snapshot (rebuilt from the log when next needed)."""
        store = self._store
        with contextlib.suppress(EventLogError, OSError):
            store.put_snapshot(key, None)
        store._views.seqs.pop(key, None)

    def forget_keys(self, session_id: str | None) -> None:
        """Destroy the key record of a session that was deleted for good."""
        if self.keyring is not None and session_id is not None:
            with contextlib.suppress(KeyUnavailableError):
                self.keyring.remove(session_id)


def header_of(data: bytes) -> Header | None:
    """The header of a log's bytes, without checking anything (None if unreadable)."""
    end = data.find(b"\n")
    if end <= 0:
        return None
    try:
        return msgspec.json.decode(data[:end], type=Header)
    except msgspec.DecodeError:
        return None

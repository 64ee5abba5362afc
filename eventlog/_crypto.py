"""Encryption at rest: content sealed at the write boundary, opened when it is read.

A store with a ``key_provider`` seals what people said and leaves the envelope readable:

- ``message``: the body becomes ``{"role": <role>, "$sealed": <b64>}``; the whole message dict
  (every key) is inside. ``seq``, ``ts``, ``id``, ``tokens`` and ``role`` stay readable.
- ``metadata`` and the header's ``metadata``: each value becomes ``{"$sealed": <b64>}``; the
  keys stay readable.
- ``compacted``: ``summary`` becomes ``""`` and ``extra`` ``{"$sealed": <b64>}`` holding both.
- The header's ``sealing`` names the scheme; every other event is unchanged.

``<b64>`` is base64 of a 12-byte random nonce and the AES-256-GCM ciphertext, under the key of
the event's seq from the session's key tree (``_keytree``), with the session id, seq and field
name as associated data (a ciphertext moved elsewhere does not open). The hash chain covers the
sealed line, so ``verify`` needs no key.

Opening: a store that reads a sealed log (``BaseStore._decode``) opens metadata, headers and
summaries at once (they are small and few) and attaches an opener to each message, which
decrypts on the first use of ``.message``. A seq whose key was destroyed on purpose opens to a
placeholder (``{"role", "content": None, "_withheld": "erased"|"redacted"}``, metadata values
``None``); a key that is missing or wrong raises :class:`KeyUnavailableError`, never garbage.
"""

from __future__ import annotations

import os
import threading
from binascii import a2b_base64, b2a_base64
from collections.abc import Callable, Sequence
from functools import partial
from hashlib import blake2b
from importlib import import_module
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from ._codec import Decoded
from ._errors import KeyUnavailableError
from ._events import (
    WITHHELD,
    Compacted,
    Erased,
    Event,
    Header,
    KnownEvent,
    MessageAppended,
    MetadataChanged,
    Redacted,
)
from ._fold import EndedConversation
from ._jsonbytes import encode_json
from ._keystore import KeyProvider, KeyStore, _aead, check_session_id
from ._keytree import SEED_LEN, KeyTree
from ._snapshot import Anchored

if TYPE_CHECKING:
    pass

SEALING: Final = "aes-256-gcm/keytree-16x8"
SEALED: Final = "$sealed"
_SEALED_OPEN: Final = b',"$sealed":"'
_MESSAGE_BODY: Final = b'{"role":%b' + _SEALED_OPEN + b'%b%b"}'
_ROLES: Final = {r: encode_json(r) for r in ("user", "assistant", "tool", "system", "developer")}
#: How a sealed compaction summary starts inside a snapshot (a NUL never starts a summary
#: this library seals: the marker and the base64 after it are all it holds).
_SUMMARY_MARK: Final = "\x00sealed:"
_NONCE: Final = 12
_RECORD_MAGIC: Final = b"SLKEY1\n"
_decode_json = msgspec.json.Decoder().decode
S = TypeVar("S", bound=Anchored)
_record_decoder = msgspec.msgpack.Decoder(tuple[str, bytes])
_record_encoder = msgspec.msgpack.Encoder()

#: How many of the newest live messages a sealed index snapshot's window holds (a history
#: of up to this many messages opens none of them one by one), and how many bytes of
#: plaintext at most (older messages are left out past it).
WINDOW: Final = 512
WINDOW_BYTES: Final = 8 << 20
#: The depth of the key tree's nodes a window's key derives from (each covers 256 seqs).
WINDOW_DEPTH: Final = 6
_WINDOW_SHIFT: Final = 4 * (8 - WINDOW_DEPTH)
#: ``magic || u32le first node || u32le last node || nonce || AES-256-GCM(msgpack entries)``
_WINDOW_MAGIC: Final = b"SLW1"
_WINDOW_HEAD: Final = len(_WINDOW_MAGIC) + 8
#: A window's nodes at most (a window naming more is refused unopened: no key derivations).
_WINDOW_NODES: Final = 4096
_window_encoder = msgspec.msgpack.Encoder()
#: A window's plaintext: ``u32le n || msgpack [(seq, hash, length), ...] (n bytes) || bodies``.
_window_decoder = msgspec.msgpack.Decoder(list[tuple[int, str, int]])
#: An opened window: by seq, each entry's line hash and plaintext (a view of the window's).
Window = dict[int, tuple[str, memoryview]]


class _Envelope(msgspec.Struct):
    role: Any = None
    sealed: str = msgspec.field(name="$sealed", default="")


_decode_envelope = msgspec.json.Decoder(_Envelope).decode


_B64 = Callable[[str | bytes | memoryview], bytes]


def _base64() -> tuple[Callable[[bytes], bytes], _B64, _B64]:
    """Base64 encode, decode, and strict decode: pybase64's SIMD codec when its C extension is
    there (the optional ``crypto`` extra installs it; about 10x faster on a message body), else
    the standard library's. Both write the standard alphabet with padding and no newline.

    The strict decoder refuses any character outside the alphabet (and bad padding) with a
    ``ValueError``; pybase64's is faster than its lenient one (1.7x on a 2 KB message body,
    5x on 1 MB, measured here)."""
    try:
        fast = import_module("pybase64")
        if "C extension active" in fast.get_version():
            decode = fast.b64decode
            return fast.b64encode, decode, partial(decode, validate=True)
    except ImportError:  # pragma: no cover - the extra is not installed
        pass
    return (
        (lambda data: b2a_base64(data, newline=False)),
        a2b_base64,
        partial(a2b_base64, strict_mode=True),
    )


_b64encode, _b64decode, _b64decode_strict = _base64()

_nonces: list[bytes] = []


def _nonce() -> bytes:
    """12 random bytes, drawn from a pool refilled 256 nonces at a time (one syscall)."""
    while True:
        try:
            return _nonces.pop()
        except IndexError:  # empty (another thread may have taken the last one)
            pool = os.urandom(_NONCE * 256)
            _nonces.extend(pool[i : i + _NONCE] for i in range(0, len(pool), _NONCE))


# A forked child must not draw the nonces its parent will use.
os.register_at_fork(after_in_child=_nonces.clear)


def _context(session_id: str) -> bytes:
    return b"sessionledger-datakey|" + session_id.encode("ascii")


class Keyring:
    """A store's keys: the provider (master key) and the key store (wrapped key trees)."""

    def __init__(self, provider: KeyProvider, keystore: KeyStore) -> None:
        if not isinstance(provider, KeyProvider):
            raise TypeError(f"key_provider must implement KeyProvider, not {provider!r}")
        self.provider = provider
        self.keystore = keystore
        self._cache: dict[str, tuple[bytes, KeyTree]] = {}
        self._lock = threading.Lock()

    def _encode(self, session_id: str, tree: KeyTree) -> bytes:
        wrapped = self.provider.wrap(tree.encode(), _context(session_id))
        return _RECORD_MAGIC + _record_encoder.encode((session_id, wrapped))

    def _decode(self, session_id: str, record: bytes) -> tuple[bytes, KeyTree]:
        what = f"the key record of session id {session_id}"
        if not record.startswith(_RECORD_MAGIC):
            raise KeyUnavailableError(what, "not a key record")
        try:
            owner, wrapped = _record_decoder.decode(record[len(_RECORD_MAGIC) :])
        except msgspec.DecodeError as exc:
            raise KeyUnavailableError(what, f"unreadable: {exc}") from exc
        if owner != session_id:
            raise KeyUnavailableError(what, f"it belongs to session id {owner}")
        plain = self.provider.unwrap(wrapped, _context(session_id))
        try:
            return wrapped, KeyTree.decode(plain)
        except msgspec.DecodeError as exc:
            raise KeyUnavailableError(what, f"unreadable key tree: {exc}") from exc

    def create(self, session_id: str) -> KeyTree:
        """A new session's key tree, stored (durably) before anything is sealed with it."""
        check_session_id(session_id)
        tree = KeyTree.new(os.urandom(SEED_LEN))
        record = self._encode(session_id, tree)
        with self.keystore.locked():
            if self.keystore.get(session_id) is not None:
                raise KeyUnavailableError(f"session id {session_id}", "a key record exists")
            self.keystore.put(session_id, record)
        with self._lock:
            self._cache[session_id] = (record, tree)
        return tree

    def tree(self, session_id: str) -> KeyTree:
        """The session's key tree as its record holds it now."""
        record = self.keystore.get(check_session_id(session_id))
        if record is None:
            raise KeyUnavailableError(
                f"session id {session_id}", "no key record (erased and deleted, or another store)"
            )
        with self._lock:
            cached = self._cache.get(session_id)
            if cached is not None and cached[0] == record:
                return cached[1]
        tree = self._decode(session_id, record)[1]
        with self._lock:
            self._cache[session_id] = (record, tree)
        return tree

    def destroy(self, session_id: str, lo: int, hi: int) -> KeyTree:
        """Destroy the keys of seqs ``lo..hi`` (0..seq: erase; seq..seq: redact), durably."""
        with self.keystore.locked():
            record = self.keystore.get(check_session_id(session_id))
            if record is None:
                raise KeyUnavailableError(f"session id {session_id}", "no key record")
            tree = self._decode(session_id, record)[1]
            if all(tree.destroyed(s) for s in (lo, hi)):
                return tree
            new = tree.punctured(lo, hi)
            fresh = self._encode(session_id, new)
            self.keystore.put(session_id, fresh)
        with self._lock:
            self._cache[session_id] = (fresh, new)
        return new

    def remove(self, session_id: str) -> None:
        """Destroy a session's whole record (the session itself is gone)."""
        with self.keystore.locked():
            self.keystore.remove(check_session_id(session_id))
        with self._lock:
            self._cache.pop(session_id, None)

    def rotate(self, *, retire: bool = True) -> int:
        """Rewrap every record under a new master key; return how many were rewrapped.

        Order: the provider adds the new key (the old still unwraps), each record is rewrapped
        and replaced atomically, then (``retire``) the old keys are dropped. A crash anywhere
        leaves every record openable; running it again finishes the job.
        """
        done = 0
        with self.keystore.locked():
            self.provider.rotate()
            for session_id in self.keystore.ids():
                record = self.keystore.get(session_id)
                if record is None:
                    continue
                wrapped, tree = self._decode(session_id, record)
                if self.provider.is_current(wrapped):
                    continue
                self.keystore.put(session_id, self._encode(session_id, tree))
                done += 1
            if retire:
                self.provider.retire()
        with self._lock:
            self._cache.clear()
        return done


class SessionSeal:
    """Seals and opens one session's content with its key tree."""

    __slots__ = (
        "_aad_prefix",
        "_aead",
        "_errors",
        "dead",
        "key",
        "keyring",
        "session_id",
        "tree",
    )

    def __init__(self, keyring: Keyring, key: str, session_id: str, tree: KeyTree) -> None:
        self.keyring = keyring
        self.key = key
        self.session_id = session_id
        self.tree = tree
        #: Seqs destroyed according to the log (erasure and redaction events), which count
        #: even before the key store has caught up (a crash between the two).
        self.dead: tuple[int, set[int]] = (-1, set())
        self._aad_prefix = f"sl1|{session_id}|".encode()
        self._aead = _aead()
        from cryptography.exceptions import InvalidTag

        self._errors = (InvalidTag, ValueError)  # binascii.Error is a ValueError

    # -- keys ------------------------------------------------------------------------------------

    def _leaf(self, seq: int) -> bytes:
        leaf = self.tree.leaf(seq)
        if leaf is None:
            raise KeyUnavailableError(
                f"session {self.key!r} seq {seq}", "its key is not in the key store"
            )
        return leaf

    def _aad(self, seq: int, name: str) -> bytes:
        return b"%s%d|%s" % (self._aad_prefix, seq, name.encode())

    def destroyed(self, seq: int) -> str | None:
        """``"erased"`` or ``"redacted"`` when the content of ``seq`` was destroyed, else None."""
        upto, redacted = self.dead
        if seq <= upto or seq <= self.tree.erased_upto:
            return "erased"
        if seq in redacted or self.tree.destroyed(seq):
            return "redacted"
        return None

    # -- sealing ---------------------------------------------------------------------------------

    def seal_bytes(self, seq: int, name: str, plain: bytes) -> str:
        """``plain`` sealed for field ``name`` of event ``seq``, as base64 text."""
        nonce = _nonce()
        sealed = self._aead(self._leaf(seq)).encrypt(nonce, plain, self._aad(seq, name))
        return _b64encode(nonce + sealed).decode("ascii")

    def open_bytes(self, seq: int, name: str, text: str | bytes | memoryview) -> bytes:
        """The plaintext of a sealed field (raises :class:`KeyUnavailableError`)."""
        return self._open(seq, b"%s%d|%s" % (self._aad_prefix, seq, name.encode()), text)

    def _open(self, seq: int, aad: bytes, text: str | bytes | memoryview) -> bytes:
        leaf = self._leaf(seq)
        try:
            # Not strict: a bad character can only come with a bad chain or a bad tag.
            blob = _b64decode(text)
            return self._aead(leaf).decrypt(blob[:_NONCE], blob[_NONCE:], aad)
        except self._errors as exc:  # the tag (or the base64) does not check
            raise KeyUnavailableError(
                f"session {self.key!r} seq {seq}", "sealed content does not open (wrong key)"
            ) from exc

    def _seal_values(self, seq: int, values: dict[str, Any], prefix: str = "m:") -> dict[str, Any]:
        return {
            name: {SEALED: self.seal_bytes(seq, prefix + name, encode_json(value))}
            for name, value in values.items()
        }

    def _open_values(
        self, seq: int, values: dict[str, Any], prefix: str = "m:", *, strict: bool = False
    ) -> dict[str, Any]:
        gone = not strict and self.destroyed(seq) is not None
        out: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(SEALED), str):
                sealed = value[SEALED]
                value = None if gone else _decode_json(self.open_bytes(seq, prefix + name, sealed))
            out[name] = value
        return out

    def seal_header(self, header: Header) -> Header:
        """The header as written: metadata values sealed, ``sealing`` set."""
        return msgspec.structs.replace(
            header, metadata=self._seal_values(0, dict(header.metadata)), sealing=SEALING
        )

    def _seal_message(self, event: MessageAppended) -> MessageAppended:
        # The hot path (one per append): the leaf from the tree's cached group state, one
        # cipher object, one base64 pass, the body built by one format.
        seq = event.seq
        nonce = _nonce()
        sealed = self._aead(self._leaf(seq)).encrypt(
            nonce, event.body, b"%s%d|message" % (self._aad_prefix, seq)
        )
        message = event.message
        role = message.get("role")
        role_json = _ROLES.get(role) if isinstance(role, str) else None
        # 12 bytes are 16 base64 characters with no padding: base64(nonce + sealed) is
        # base64(nonce) + base64(sealed), without copying the ciphertext first.
        body = _MESSAGE_BODY % (
            role_json or encode_json(role),
            _b64encode(nonce),
            _b64encode(sealed),
        )
        out = MessageAppended(
            seq=seq, ts=event.ts, id=event.id, body=msgspec.Raw(body), tokens=event.tokens
        )
        cached = out.__dict__
        cached["message"] = message
        cached["_open"] = self.open_message
        # The exact plaintext sealed: a snapshot's window takes it without decrypting.
        cached["_plain"] = event.body
        return out

    def seal(self, event: KnownEvent) -> KnownEvent:
        """The event as its line is written (the caller folds the plaintext one)."""
        seq = event.seq
        match event:
            case MessageAppended():
                return self._seal_message(event)
            case MetadataChanged():
                return msgspec.structs.replace(event, set=self._seal_values(seq, event.set))
            case Compacted():
                inner = encode_json({"summary": event.summary, "extra": event.extra})
                return msgspec.structs.replace(
                    event, summary="", extra={SEALED: self.seal_bytes(seq, "compacted", inner)}
                )
            case _:
                return event

    # -- opening ---------------------------------------------------------------------------------

    def open_message(self, event: MessageAppended) -> dict[str, Any]:
        """The message dict of a sealed message event (a placeholder when destroyed)."""
        # The hot path of reading (one per message read; a history window opens hundreds):
        # the checks of ``destroyed``, the leaf and the decryption inline, the base64 decoded
        # strictly in place (any other form of body takes ``_open_message``).
        seq = event.seq
        upto, redacted = self.dead
        tree = self.tree
        if seq <= upto or seq <= tree.erased_upto or seq in redacted or tree.redacted:
            gone = self.destroyed(seq)
            if gone is not None:
                return {"role": event.role, "content": None, WITHHELD: gone}
        body = bytes(event.body)
        # The envelope as this module writes it is ``{"role":<role>,"$sealed":"<b64>"}``:
        # the base64 runs from the first ``,"$sealed":"`` after the role's opening quote to the
        # closing ``"}``. A match inside the role, a key after the sealed one or an escape
        # leaves a character the strict decoder refuses; then the body is decoded whole.
        start = body.find(_SEALED_OPEN, 8) + len(_SEALED_OPEN)
        leaf = tree.leaf(seq)
        if start <= len(_SEALED_OPEN) or not body.endswith(b'"}') or leaf is None:
            return self._open_message(event, body)
        try:
            blob = _b64decode_strict(memoryview(body)[start:-2])
        except ValueError:
            return self._open_message(event, body)
        try:
            plain = self._aead(leaf).decrypt(
                blob[:_NONCE], blob[_NONCE:], b"%s%d|message" % (self._aad_prefix, seq)
            )
        except self._errors as exc:  # the tag does not check
            raise KeyUnavailableError(
                f"session {self.key!r} seq {seq}", "sealed content does not open (wrong key)"
            ) from exc
        opened: dict[str, Any] = _decode_json(plain)
        return opened

    def _open_message(self, event: MessageAppended, body: bytes) -> dict[str, Any]:
        """``open_message`` for a body of any form (not destroyed)."""
        try:
            envelope = _decode_envelope(body)
        except msgspec.ValidationError as exc:  # e.g. a "$sealed" that is not a string
            raise KeyUnavailableError(
                f"session {self.key!r} seq {event.seq}", "its body is not a sealed message"
            ) from exc
        if not envelope.sealed:
            message: dict[str, Any] = _decode_json(body)
            if SEALED in message:  # an envelope whose seal is empty: no message to give back
                raise KeyUnavailableError(
                    f"session {self.key!r} seq {event.seq}", "its body is not a sealed message"
                )
            return message
        opened: dict[str, Any] = _decode_json(
            self._open(event.seq, b"%s%d|message" % (self._aad_prefix, event.seq), envelope.sealed)
        )
        return opened

    def open_event(self, event: Event) -> Event:
        """An event with its sealed fields opened (messages get an opener, decrypted on use)."""
        match event:
            case MessageAppended():
                event.__dict__["_open"] = self.open_message
                return event
            case MetadataChanged():
                return msgspec.structs.replace(event, set=self._open_values(event.seq, event.set))
            case Compacted():
                sealed = event.extra.get(SEALED)
                if not isinstance(sealed, str):
                    return event
                if self.destroyed(event.seq) is not None:
                    return msgspec.structs.replace(event, summary="", extra={})
                inner = _decode_json(self.open_bytes(event.seq, "compacted", sealed))
                return msgspec.structs.replace(
                    event, summary=str(inner.get("summary", "")), extra=dict(inner.get("extra", {}))
                )
            case _:
                return event

    def open_header(self, header: Header) -> Header:
        """The header with its metadata values opened."""
        return msgspec.structs.replace(header, metadata=self._open_values(0, header.metadata))

    def seal_snapshot(self, snapshot: S) -> S:
        """``snapshot`` (either format) with its plaintext values sealed under the key of its
        seq, as a copy.

        Message bodies in a snapshot are the log's (already sealed; an index snapshot holds
        none); what the fold made plaintext is sealed here: header and state metadata values,
        the compaction summary, ended conversations' titles and previews. Erasing the
        snapshot's seq destroys its key, so the snapshot no longer opens. Each preview message
        of an ended conversation is sealed under its own message's key (``_seal_ended``), so
        redacting that message leaves it readable in no snapshot.
        """
        seq = snapshot.seq
        header = msgspec.structs.replace(
            snapshot.header, metadata=self._seal_values(seq, snapshot.header.metadata, "s:h:")
        )
        state = msgspec.structs.replace(
            snapshot.state, metadata=self._seal_values(seq, snapshot.state.metadata, "s:m:")
        )
        compaction = state.compaction
        if compaction is not None and compaction.summary:
            sealed = self.seal_bytes(seq, "s:summary", compaction.summary.encode())
            state.compaction = msgspec.structs.replace(compaction, summary=_SUMMARY_MARK + sealed)
        state.ended = [self._seal_ended(seq, i, e) for i, e in enumerate(state.ended)]
        return msgspec.structs.replace(snapshot, header=header, state=state)

    def open_snapshot(self, snapshot: Anchored) -> bool:
        """Open a decoded snapshot's (either format) sealed values in place; False if its key
        is gone."""
        seq = snapshot.seq
        if self.tree.leaf(seq) is None:
            return False
        header = snapshot.header
        try:
            snapshot.header = msgspec.structs.replace(
                header, metadata=self._open_values(seq, header.metadata, "s:h:", strict=True)
            )
            state = snapshot.state
            state.metadata = self._open_values(seq, state.metadata, "s:m:", strict=True)
            compaction = state.compaction
            if compaction is not None and compaction.summary.startswith(_SUMMARY_MARK):
                text = self.open_bytes(seq, "s:summary", compaction.summary[len(_SUMMARY_MARK) :])
                state.compaction = msgspec.structs.replace(compaction, summary=text.decode())
            ended = []
            for i, e in enumerate(state.ended):
                opened = self._open_ended(seq, i, e)
                if opened is None:
                    return False
                ended.append(opened)
            state.ended = ended
        except KeyUnavailableError:
            return False
        return True

    def _seal_ended(self, seq: int, i: int, ended: EndedConversation) -> EndedConversation:
        """Ended conversation ``i`` of the snapshot at ``seq``, sealed: its title under the
        snapshot seq's key (field ``s:e:<i>``, holding ``{"title", "preview": [], "withheld"}``),
        then each preview message under the key of its own seq (field ``s:e:<seq>:<i>:<j>``),
        which a redaction of that message destroys. A message whose key was already destroyed
        when the conversation ended (redacted before it) is the fold's placeholder (its role,
        content null): that is sealed under the snapshot seq's key and its seq listed in
        ``withheld``. A preview without its seqs is left out: nothing is sealed under a key
        its erasure spares."""
        preview, seqs = ended.preview, ended.preview_seqs
        if len(seqs) != len(preview) or any(self.destroyed(p) == "erased" for p in seqs):
            preview, seqs = [], []
        withheld = [p for p in seqs if self.destroyed(p) is not None]
        inner = encode_json({"title": ended.title, "preview": [], "withheld": withheld})

        def one(j: int, p: int, message: dict[str, Any]) -> dict[str, Any]:
            if p in withheld:  # never its content: only what the log's fold leaves of it
                placeholder = {"role": message.get("role"), "content": None}
                field = f"s:e:{seq}:{i}:{j}:withheld"
                return {SEALED: self.seal_bytes(seq, field, encode_json(placeholder))}
            return {SEALED: self.seal_bytes(p, f"s:e:{seq}:{i}:{j}", encode_json(message))}

        return msgspec.structs.replace(
            ended,
            title="",
            preview=[
                {SEALED: self.seal_bytes(seq, f"s:e:{i}", inner)},
                *(one(j, p, m) for j, (p, m) in enumerate(zip(seqs, preview, strict=True))),
            ],
            preview_seqs=seqs,
        )

    def _open_ended(self, seq: int, i: int, ended: EndedConversation) -> EndedConversation | None:
        """``_seal_ended`` undone; a preview message whose key was destroyed after the snapshot
        was written (it was redacted) takes the whole preview with it, as the fold's
        ``redacted`` does; one already destroyed when it was written is its placeholder. None:
        a snapshot of the layout before ``preview_seqs`` holding a preview (it is read from the
        log instead; its preview messages are not known). Raises :class:`KeyUnavailableError` when a key
        that exists does not open its field (wrong key)."""
        texts = [t for t in (p.get(SEALED) for p in ended.preview) if isinstance(t, str)]
        if not texts or len(texts) != len(ended.preview):
            return ended  # sealed by no one (not a sealed entry)
        seqs = ended.preview_seqs
        if len(texts) != 1 + len(seqs):
            raise KeyUnavailableError(f"session {self.key!r} seq {seq}", "damaged snapshot")
        inner = _decode_json(self.open_bytes(seq, f"s:e:{i}", texts[0]))
        if inner["preview"]:
            return None
        withheld = inner.get("withheld", [])
        preview: list[dict[str, Any]] = []
        for j, (p, text) in enumerate(zip(seqs, texts[1:], strict=True)):
            if p in withheld:  # redacted before the end: its placeholder
                field = f"s:e:{seq}:{i}:{j}:withheld"
                preview.append(_decode_json(self.open_bytes(seq, field, text)))
                continue
            if self.destroyed(p) is not None or self.tree.leaf(p) is None:
                preview, seqs = [], []
                break
            preview.append(_decode_json(self.open_bytes(p, f"s:e:{seq}:{i}:{j}", text)))
        return msgspec.structs.replace(
            ended, title=inner["title"], preview=preview, preview_seqs=seqs
        )

    # -- the window of an index snapshot ------------------------------------------------------

    def _window_key(self, first: int, last: int) -> bytes | None:
        """The key of a window whose messages lie under nodes ``first..last`` of depth
        :data:`WINDOW_DEPTH` (256 seqs each): derived from each node's seed
        (:meth:`KeyTree.node_key`), so it exists only while no key under them was destroyed.
        None when one was."""
        if not 0 <= first <= last or last - first >= _WINDOW_NODES:
            return None
        tree = self.tree
        parts = []
        for prefix in range(first, last + 1):
            part = tree.node_key(WINDOW_DEPTH, prefix)
            if part is None:
                return None
            parts.append(part)
        return blake2b(b"".join(parts), digest_size=32, person=b"sl-window").digest()

    def _window_aad(self, seq: int, first: int, last: int) -> bytes:
        return b"%swindow|%d|%d|%d" % (self._aad_prefix, seq, first, last)

    def plain_of(self, event: MessageAppended) -> bytes | None:
        """The exact plaintext sealed in a message event's line (None: destroyed, or not a
        sealed message), without decrypting when the writer or a window holds it."""
        if self.destroyed(event.seq) is not None:
            return None
        cached = event.__dict__
        plain = cached.get("_plain")
        if plain is not None:
            return bytes(plain)
        opener = cached.get("_open")
        if isinstance(opener, WindowOpener):
            plain = opener.plain(event)
            if plain is not None:
                return plain
        body = bytes(event.body)
        try:
            envelope = _decode_envelope(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if not envelope.sealed:
            return None
        aad = b"%s%d|message" % (self._aad_prefix, event.seq)
        return self._open(event.seq, aad, envelope.sealed)

    def seal_window(self, seq: int, messages: Sequence[MessageAppended]) -> bytes:
        """The window of a snapshot at ``seq`` whose newest live messages are ``messages``:
        each one's seq, line hash and exact plaintext, sealed as one under a key derived from
        the key tree's nodes they lie under (see :meth:`_window_key`). Redacting or erasing
        any of them destroys that key with theirs, whatever file still holds the window.
        b"" when there is none to write (a message destroyed, or not sealed)."""
        entries: list[tuple[int, str, bytes]] = []
        size = 0
        for event in reversed(messages):
            try:
                plain = self.plain_of(event)
            except KeyUnavailableError:
                return b""
            if plain is None or not event.h:
                return b""
            size += len(plain)
            if size > WINDOW_BYTES:
                break
            entries.append((event.seq, event.h, plain))
        if not entries:
            return b""
        entries.reverse()
        first, last = entries[0][0] >> _WINDOW_SHIFT, entries[-1][0] >> _WINDOW_SHIFT
        key = self._window_key(first, last)
        if key is None:
            return b""
        head = _window_encoder.encode([(seq, h, len(body)) for seq, h, body in entries])
        inner = b"".join([len(head).to_bytes(4, "little"), head, *(e[2] for e in entries)])
        nonce = _nonce()
        sealed = self._aead(key).encrypt(nonce, inner, self._window_aad(seq, first, last))
        return b"".join(
            (_WINDOW_MAGIC, first.to_bytes(4, "little"), last.to_bytes(4, "little"), nonce, sealed)
        )

    def open_window(self, seq: int, window: bytes | memoryview) -> Window:
        """The plaintext and entries of a snapshot's window (empty: none, or it does not
        open: its key was destroyed, or it was damaged or moved)."""
        if len(window) < _WINDOW_HEAD + _NONCE or window[:4] != _WINDOW_MAGIC:
            return {}
        first = int.from_bytes(window[4:8], "little")
        last = int.from_bytes(window[8:12], "little")
        key = self._window_key(first, last)
        if key is None:
            return {}
        view = memoryview(window)
        try:
            plain = self._aead(key).decrypt(
                view[_WINDOW_HEAD : _WINDOW_HEAD + _NONCE],
                view[_WINDOW_HEAD + _NONCE :],
                self._window_aad(seq, first, last),
            )
            at = 4 + int.from_bytes(plain[:4], "little")
            heads = _window_decoder.decode(memoryview(plain)[4:at])
        except (*self._errors, msgspec.DecodeError):
            return {}
        view = memoryview(plain)
        entries: Window = {}
        for s, h, n in heads:
            entries[s] = (h, view[at : at + n])
            at += n
        if at != len(plain):  # sealed by this module, so never; but never read past it
            return {}
        return entries

    def note_dead(self, events: list[Event]) -> None:
        """Record the erasures and redactions ``events`` hold (before opening anything)."""
        upto, redacted = self.dead
        for event in events:
            if isinstance(event, Erased):
                upto = max(upto, event.seq)
            elif isinstance(event, Redacted):
                redacted.add(event.target)
        self.dead = (upto, redacted)

    def open_decoded(self, decoded: Decoded, *, header: bool = True) -> None:
        """Open ``decoded`` in place: every event, and its header (unless ``header`` is false)."""
        self.note_dead(decoded.events)
        if header and decoded.header is not None:
            decoded.header = self.open_header(decoded.header)
        decoded.events = [self.open_event(e) for e in decoded.events]


OpenMessage = Callable[[MessageAppended], dict[str, Any]]


class WindowOpener:
    """The opener of the messages of a sealed index snapshot that has a window: a message
    the window holds (same seq, same line hash) is decoded from it, any other through
    :meth:`SessionSeal.open_message`.

    The window is opened on first use, with the key tree the seal holds then, and opened
    again whenever the seal's tree changes (an erase or redact, or another store's, read at
    the next load): what it opened under a tree is never used once that tree is replaced.
    A seq destroyed according to the log or the tree is never taken from it.
    """

    __slots__ = ("_opened", "_seq", "_tree", "_window", "seal")

    def __init__(self, seal: SessionSeal, seq: int, window: bytes | memoryview) -> None:
        self.seal = seal
        self._seq = seq
        self._window = window
        self._tree: KeyTree | None = None
        self._opened: Window = {}

    def _plain(self, event: MessageAppended) -> memoryview | None:
        """The plaintext the window holds for ``event`` (None: it does not, or must not)."""
        seal = self.seal
        seq = event.seq
        upto, redacted = seal.dead
        tree = seal.tree
        if seq <= upto or seq <= tree.erased_upto or seq in redacted or tree.redacted:
            return None
        if self._tree is not tree:
            self._opened = {}  # drop what the old tree opened before opening again
            self._opened = seal.open_window(self._seq, self._window)
            self._tree = tree
        entry = self._opened.get(seq)
        if entry is None or entry[0] != event.h:
            return None
        return entry[1]

    def __call__(self, event: MessageAppended) -> dict[str, Any]:
        # The hot path of a history (one call per message): ``_plain`` inline.
        seal = self.seal
        seq = event.seq
        upto, redacted = seal.dead
        tree = seal.tree
        if not (seq <= upto or seq <= tree.erased_upto or seq in redacted or tree.redacted):
            if self._tree is not tree:
                self._opened = {}  # drop what the old tree opened before opening again
                self._opened = seal.open_window(self._seq, self._window)
                self._tree = tree
            entry = self._opened.get(seq)
            if entry is not None and entry[0] == event.h:
                opened: dict[str, Any] = _decode_json(entry[1])
                return opened
        return seal.open_message(event)

    def plain(self, event: MessageAppended) -> bytes | None:
        """The plaintext the window holds for ``event`` (None: it holds none)."""
        plain = self._plain(event)
        return None if plain is None else bytes(plain)

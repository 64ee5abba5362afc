"""The fast path of reading a whole log: one hash loop, one batched decode, GC paused.

:func:`scan` accepts only a log that is entirely sound (a header, then complete lines that all
chain, decode and count up in seq): it returns None for anything else, and the caller falls back
to :func:`eventlog.decode_log`, which finds and describes the first problem. So the fast path
can never call a bad log good: it checks the same things the line decoder checks (hash field
shape, chained hash, header, valid events of known types, contiguous seq).

``light`` decoding (for verify) reads every event field typed, except free-form values (message
dicts, metadata values, compaction extras), which are only checked to be well-formed JSON of
the right kind (object or array) without building Python objects for them.
"""

from __future__ import annotations

import gc
from binascii import hexlify
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Final, Union, get_args, get_origin

import msgspec

from sessionledger.eventlog import EVENT_TYPES, FORMAT_NAME, Header, KnownEvent
from sessionledger.eventlog.codec import ZERO_HASH

_HASH_OPEN: Final = b',"h":"'
_HASH_CLOSE: Final = b'"}'
_header = msgspec.json.Decoder(Header)
_full: msgspec.json.Decoder[KnownEvent] = msgspec.json.Decoder(KnownEvent)


def _has_any(tp: Any) -> bool:
    return tp is Any or any(_has_any(arg) for arg in get_args(tp))


def _light_type(event_type: type[msgspec.Struct]) -> tuple[type[msgspec.Struct], dict[str, bytes]]:
    """A mirror of ``event_type`` whose free-form fields are :class:`msgspec.Raw`."""
    fields: list[tuple[str, Any, Any]] = []
    kinds: dict[str, bytes] = {}
    for f in msgspec.structs.fields(event_type):
        # The mirror's fields are named as the JSON names them (a field may be renamed).
        name = f.encode_name
        tp = f.type
        if _has_any(tp):
            origin = get_origin(tp)
            kinds[name] = b"{" if origin is dict else b"[" if origin is list else b""
            tp = msgspec.Raw
        if f.default is not msgspec.NODEFAULT:
            fields.append((name, tp, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((name, tp, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((name, tp, msgspec.NODEFAULT))
    config = event_type.__struct_config__
    light = msgspec.defstruct(
        "Light" + event_type.__name__,
        [(n, t) if d is msgspec.NODEFAULT else (n, t, d) for n, t, d in fields],
        tag=config.tag,
        tag_field=config.tag_field,
        kw_only=True,
        frozen=True,
    )
    return light, kinds


_LIGHT = {t: _light_type(t) for t in EVENT_TYPES}
_KINDS: Final = {light: kinds for light, kinds in _LIGHT.values() if kinds}
_light: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
    Union[tuple(light for light, _ in _LIGHT.values())]  # noqa: UP007
)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC while building many acyclic objects (decoded events)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(slots=True)
class Scanned:
    """A sound log: its header, its events (light or full) and its head."""

    header: Header
    events: Sequence[Any]
    head: str
    lines: int

    @property
    def last_seq(self) -> int:
        """The last event's seq (the header's when there is none)."""
        return self.events[-1].seq if self.events else self.header.seq


def _chain_ok(data: bytes, key: bytes, size: int) -> tuple[str, int] | None:
    """Check every line's hash field and chained hash; (head, lines) or None."""
    view = memoryview(data)
    find = data.find
    base = blake2b(digest_size=16, key=key)
    prev = ZERO_HASH.encode("ascii")
    pos = 0
    lines = 0
    while pos < size:
        end = find(b"\n", pos)
        if end < 0 or end - pos < 42:
            return None
        if data[end - 40 : end - 34] != _HASH_OPEN or data[end - 2 : end] != _HASH_CLOSE:
            return None
        # h = blake2b(prev_h || body): the previous line's hash as its 32 hex characters.
        hasher = base.copy()
        hasher.update(prev)
        hasher.update(view[pos : end - 40])
        got = data[end - 34 : end - 2]
        if hexlify(hasher.digest()) != got:
            return None
        prev = got
        pos = end + 1
        lines += 1
    return prev.decode("ascii"), lines


def scan(
    data: bytes, key: bytes = b"", *, light: bool = False, end: int | None = None
) -> Scanned | None:
    """The sound log in ``data[:end]``, or None if anything is off (use ``decode_log`` then)."""
    size = len(data) if end is None else end
    if size <= 0 or data[size - 1] != 0x0A:
        return None
    chained = _chain_ok(data, key, size)
    if chained is None:
        return None
    first = data.index(b"\n") + 1
    try:
        header = _header.decode(data[: first - 1])
        with paused_gc():
            events = (_light if light else _full).decode_lines(memoryview(data)[first:size])
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None  # hostile nesting or bytes: the slow path says which line is bad
    if header.format != FORMAT_NAME or len(events) != chained[1] - 1:
        return None
    seq = header.seq
    for event in events:
        seq += 1
        if event.seq != seq:
            return None
        if light:
            kinds = _KINDS.get(type(event))
            if kinds:
                for name, opener in kinds.items():
                    raw = getattr(event, name)
                    if opener and isinstance(raw, msgspec.Raw) and memoryview(raw)[:1] != opener:
                        return None
    return Scanned(header=header, events=events, head=chained[0], lines=chained[1])

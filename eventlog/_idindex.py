"""Event ids for idempotent retries: exact, with the ids a snapshot covers kept compactly.

``SessionState.ids`` maps every event id in the log to its seq. Folding events adds them to a
dict; a state opened from an index snapshot keeps the ids the snapshot covers on disk instead
(:class:`ColdIds`: 16 bytes per event, an 8-byte digest of the id and its line's offset) and
reads them into memory (as one ``bytes`` of those records) the first time an id is looked up
that the dict does not hold.

Invariants:
- Exact: a digest is only a candidate; a hit is confirmed by reading the event's line at the
  recorded offset and comparing its seq and id, so a digest collision never turns a new event
  into a "retry", and every id in the log is found.
- The dict holds only ids folded since the state was opened; a copy shares the cold part.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from hashlib import blake2b
from typing import Any, Final, Protocol

ID_RECORD: Final = 16


_PROTOS: dict[bytes, Any] = {}


def id_hasher(key: bytes = b"") -> Any:
    """The primed hasher of :func:`id_digest` for ``key``, shared: copy it, never update it
    (a loop over many ids copies it itself)."""
    proto = _PROTOS.get(key)
    if proto is None:  # a copy of a primed hasher skips the key block and parameter set-up
        proto = _PROTOS[key] = blake2b(digest_size=8, key=key, person=b"sl-ids")
        if len(_PROTOS) > 64:  # a process with many keys: keep a few
            _PROTOS.pop(next(iter(_PROTOS)))
    return proto


def id_digest(event_id: str, key: bytes = b"") -> bytes:
    """The 8-byte digest an id record keeps (keyed like the chain, when the store is keyed)."""
    hasher = id_hasher(key).copy()
    hasher.update(event_id.encode("utf-8", "surrogatepass"))
    digest: bytes = hasher.digest()
    return digest


class ColdIds(Protocol):
    """The ids of events 1..``count`` (a snapshot's), on disk."""

    count: int

    def find(self, event_id: str) -> int | None:
        """The seq of the event with this id among them, or None."""

    def items(self) -> Iterator[tuple[str, int]]:
        """Every (id, seq), oldest first (reads the log: for checks and tests)."""


class IdIndex:
    """Event id -> seq (a mapping, see the module docstring)."""

    __slots__ = ("_cold", "_recent")

    def __init__(self, recent: Mapping[str, int] | None = None, cold: ColdIds | None = None):
        self._recent: dict[str, int] = dict(recent or {})
        self._cold = cold

    @property
    def cold(self) -> ColdIds | None:
        """The ids kept on disk (None: all are in memory)."""
        return self._cold

    @property
    def recent(self) -> dict[str, int]:
        """The ids held in memory."""
        return self._recent

    def get(self, event_id: str, default: int | None = None) -> int | None:
        """The seq of the event with ``event_id``, or ``default``."""
        seq = self._recent.get(event_id)
        if seq is None and self._cold is not None:
            seq = self._cold.find(event_id)
        return default if seq is None else seq

    def __getitem__(self, event_id: str) -> int:
        seq = self.get(event_id)
        if seq is None:
            raise KeyError(event_id)
        return seq

    def __setitem__(self, event_id: str, seq: int) -> None:
        self._recent[event_id] = seq

    def pop(self, event_id: str, default: int | None = None) -> int | None:
        """Forget an id folded since the state was opened (an undone write); ids on disk stay."""
        return self._recent.pop(event_id, default)

    def __contains__(self, event_id: object) -> bool:
        return isinstance(event_id, str) and self.get(event_id) is not None

    def __len__(self) -> int:
        cold = self._cold.count if self._cold is not None else 0
        return cold + sum(1 for seq in self._recent.values() if seq > cold)

    def __iter__(self) -> Iterator[str]:
        return (event_id for event_id, _ in self.items())

    def items(self) -> Iterator[tuple[str, int]]:
        """Every (id, seq): the cold ones (read from the log), then the recent ones."""
        cold = 0
        if self._cold is not None:
            cold = self._cold.count
            yield from self._cold.items()
        for event_id, seq in self._recent.items():
            if seq > cold:
                yield event_id, seq

    def copy(self) -> IdIndex:
        """An independent index (the cold part is read-only and shared)."""
        return IdIndex(self._recent, self._cold)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdIndex | dict):
            mine = dict(self.items())
            theirs = dict(other.items())
            return mine == theirs
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        cold = self._cold.count if self._cold is not None else 0
        return f"IdIndex({len(self._recent)} in memory, {cold} on disk)"

"""Sealing a derived view with the store's secret (pure).

A keyed store's log lines cannot be forged without the key; a view derived from them (the
session catalog) must not be a way around that. A keyed store seals each view it writes: the
view's bytes, then ``\\nsealed:`` and a 32-hex keyed blake2b of those bytes. A view whose seal
is missing or wrong is treated as absent, so it is rebuilt from the logs. Unkeyed stores write
views as they are.
"""

from __future__ import annotations

from hashlib import blake2b
from hmac import compare_digest
from typing import Final

_MARK: Final = b"\nsealed:"
_HEX: Final = 32


def _mac(data: bytes, key: bytes) -> bytes:
    return blake2b(data, key=key, digest_size=_HEX // 2, person=b"sl-view").hexdigest().encode()


def seal(data: bytes, key: bytes) -> bytes:
    """``data`` with its seal under ``key`` (unchanged when ``key`` is empty)."""
    if not key:
        return data
    return data + _MARK + _mac(data, key)


def unseal(blob: bytes | None, key: bytes) -> bytes | None:
    """The data of a sealed view, or None when its seal does not verify under ``key``."""
    if blob is None or not key:
        return blob
    cut = len(blob) - _HEX - len(_MARK)
    if cut < 0 or blob[cut : cut + len(_MARK)] != _MARK:
        return None
    data = blob[:cut]
    return data if compare_digest(_mac(data, key), blob[cut + len(_MARK) :]) else None

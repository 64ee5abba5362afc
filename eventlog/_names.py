"""File names for session keys (pure): collision-free, reversible, filesystem-safe, bounded.

Rules:
- Lowercase ASCII letters, digits and ``-`` stand for themselves; every other byte of the key's
  UTF-8 form (upper case, ``.``, ``/``, ``:``, ``_``, NUL, non-ASCII ...) becomes ``_`` and two
  lowercase hex digits. So ``a:b`` is ``a_3ab`` and ``a_b`` is ``a_5fb``: different files; keys
  differing only in case differ in name, which matters on case-insensitive filesystems; and no
  name contains a separator, a dot or starts with one (``..`` cannot escape the store).
- Key structure is read here once (:func:`split_key`): ``agent:channel:peer[:thread]``, or
  nanobot's ``channel:peer``; the catalog's filters, search and PostgreSQL's columns read it so.
- Names longer than :data:`MAX_STEM` keep a readable prefix and end in ``~`` and a 32-hex blake2b
  of the key: still unique, no longer reversible; the log's header carries the true key anyway.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Final

from ._errors import InvalidEventError

MAX_STEM: Final = 180
_PLAIN: Final = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-")
_TABLE: Final = tuple(chr(b) if b in _PLAIN else f"_{b:02x}" for b in range(256))


def check_key(key: object) -> str:
    """Return ``key`` if it is a usable session key, else raise :class:`InvalidEventError`."""
    if not isinstance(key, str):
        raise InvalidEventError(f"session key must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidEventError("session key must not be empty")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventError(f"session key {key!r} is not valid Unicode text: {exc}") from exc
    return key


def key_to_stem(key: str) -> str:
    """Return the file name stem for ``key`` (no suffix)."""
    raw = check_key(key).encode("utf-8")
    stem = "".join([_TABLE[b] for b in raw])
    if len(stem) <= MAX_STEM:
        return stem
    digest = blake2b(raw, digest_size=16).hexdigest()
    prefix = stem[: MAX_STEM - 33]
    cut = prefix.rfind("_", len(prefix) - 2)
    if cut >= 0:  # never split an escape
        prefix = prefix[:cut]
    return f"{prefix}~{digest}"


def stem_to_key(stem: str) -> str | None:
    """Invert :func:`key_to_stem`; None for a hashed (long) stem or one it never produces."""
    if "~" in stem:
        return None
    out = bytearray()
    i = 0
    n = len(stem)
    while i < n:
        c = stem[i]
        if c == "_":
            pair = stem[i + 1 : i + 3]
            if len(pair) != 2 or pair.strip("0123456789abcdef"):
                return None
            out.append(int(pair, 16))
            i += 3
        elif ord(c) < 128 and ord(c) in _PLAIN:
            out.append(ord(c))
            i += 1
        else:
            return None
    try:
        key = out.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return key if key and key_to_stem(key) == stem else None


def split_key(key: str) -> tuple[str, str, str, str | None] | None:
    """(agent, channel, peer, thread) of a structured key; None when it has no structure.

    ``agent:channel:peer[:thread]`` (the thread may itself hold ``:``), or nanobot's
    ``channel:peer`` (agent ``""``, no thread); fewer than two parts or an empty part: None.
    """
    parts = key.split(":", 3)
    if len(parts) < 2 or not all(parts):
        return None
    if len(parts) == 2:
        return "", parts[0], parts[1], None
    return parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else None

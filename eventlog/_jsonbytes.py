"""JSON bytes as the log writes them (pure): msgspec's encoding plus the format's extra escapes.

msgspec escapes C0 controls but writes DEL, the C1 controls (U+0085 is a line break to Python's
``str.splitlines``) and U+2028/U+2029 raw; the format escapes them too. These byte sequences
only occur inside JSON strings, so replacing them keeps the JSON and its decoded value.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

_UNSAFE: Final = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")
_encode = msgspec.json.Encoder().encode


def _escape(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match.group().decode("utf-8"))


def escape_unsafe(data: bytes) -> bytes:
    """``data`` with DEL, C1 controls, U+2028 and U+2029 written as ``\\uXXXX`` escapes."""
    if b"\x7f" in data or (
        not data.isascii()
        and (b"\xc2" in data or b"\xe2\x80\xa8" in data or b"\xe2\x80\xa9" in data)
    ):
        return _UNSAFE.sub(_escape, data)
    return data


def encode_json(value: Any) -> bytes:
    """``value`` as the log writes JSON.

    Raises:
        msgspec.EncodeError: a value is not JSON-serialisable, or a string is not valid Unicode.
    """
    try:
        data = _encode(value)
    except UnicodeEncodeError as exc:  # a lone surrogate: not text JSON can carry
        raise msgspec.EncodeError(f"a string is not valid Unicode: {exc}") from exc
    # ``escape_unsafe``, inlined: this runs once per append.
    if b"\x7f" in data or (
        not data.isascii()
        and (b"\xc2" in data or b"\xe2\x80\xa8" in data or b"\xe2\x80\xa9" in data)
    ):
        return _UNSAFE.sub(_escape, data)
    return data

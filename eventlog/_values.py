"""The JSON value policy (pure): what a caller's value may be, checked once at the write boundary.

Rule: what is acknowledged is exactly what replay reads. A value written into an event (a
message field, a metadata value, a compaction's extra statistics, a header's metadata) must be
made of JSON types only, so that the live state (which keeps the caller's objects) equals the
state folded from disk:

- ``None``, ``bool``, ``int``, ``str`` (valid Unicode), finite ``float``;
- ``list`` of such values, ``dict`` with ``str`` keys and such values;
- nested at most :data:`MAX_DEPTH` containers deep.

The test is that the value reads back equal from its JSON (:func:`encode_checked`: encode,
decode, compare; the hot path), so ``tuple``, ``set``, ``bytes``, ``datetime``, ``Decimal``,
``UUID``, plain enums, pydantic models and every other object are refused with
:class:`InvalidEventError` naming the field, because JSON would carry them as something else (a
list, base64 text, a string) and a reopened session would differ from the live one. Convert
first (``model.model_dump()``, ``list(t)``, ``dt.isoformat()``). Subclasses of ``str``,
``int``, ``dict`` and ``list`` (``StrEnum``, ``OrderedDict``) read back equal and are taken.

The reader enforces the same depth: an event line nests :data:`LINE_MAX_DEPTH` containers at
most (the value's own, plus the event object and the field that holds it), and a deeper line is
unreadable (:func:`line_too_deep`), never a ``RecursionError``. So the reader accepts exactly
the nesting the writer accepts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from ._errors import InvalidEventError
from ._jsonbytes import encode_json

#: How many containers (lists, dicts) deep a value may nest; ``[[1]]`` is 2 deep.
MAX_DEPTH: Final = 64
#: The nesting an event line may have: the event object and the mapping that holds the value.
LINE_MAX_DEPTH: Final = MAX_DEPTH + 2

# An escape (two bytes, only inside strings) is one token, so an escaped quote never ends one.
_TOKEN: Final = re.compile(rb'\\.|[\[\]{}"]', re.DOTALL)


class _Refused(Exception):
    """A value broke the policy; ``path`` is built while unwinding (innermost last)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []


def _kind(value: object) -> str:
    cls = type(value)
    if hasattr(cls, "model_dump"):
        return f"a pydantic model ({cls.__name__}); pass value.model_dump() instead"
    hints: dict[type, str] = {
        tuple: "a tuple (JSON has no tuples; pass a list)",
        set: "a set (JSON has no sets; pass a sorted list)",
        frozenset: "a frozenset (JSON has no sets; pass a sorted list)",
        bytes: "bytes (JSON carries text; decode or base64-encode it first)",
        bytearray: "a bytearray (JSON carries text; decode or base64-encode it first)",
    }
    if cls in hints:
        return hints[cls]
    return f"a {cls.__module__}.{cls.__qualname__}, not a JSON type (convert it first)"


def _walk(value: object, depth: int) -> None:
    cls = type(value)
    if cls is str or cls is int or cls is bool or value is None:
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(f"{value!r} is not a JSON number")
        return
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        keyed, items = True, value.items()
    elif isinstance(value, list):
        keyed, items = False, enumerate(value)
    elif isinstance(value, str | int) and not hasattr(cls, "model_dump"):
        return  # a str or int subclass (StrEnum, IntEnum) is written and read back equal
    else:
        raise _Refused(f"is {_kind(value)}")
    if depth >= MAX_DEPTH:
        raise _Refused(f"nested deeper than {MAX_DEPTH} containers")
    for name, item in items:
        if keyed and not isinstance(name, str):
            raise _Refused(f"key {name!r} is a {type(name).__name__}; JSON object keys are str")
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        try:
            _walk(item, depth + 1)
        except _Refused as exc:
            exc.path.append(f"[{name!r}]" if keyed else f"[{name}]")
            raise


def check_value(value: object, field: str) -> None:
    """Raise :class:`InvalidEventError` naming ``field`` unless ``value`` follows the policy."""
    try:
        _walk(value, 0)
    except _Refused as exc:
        path = exc.path[::-1]
        if len(path) > 6:  # a path through a deep value: its start says where it is
            path = [*path[:4], "..."]
        where = field + "".join(path)
        raise InvalidEventError(f"{where}: {exc.reason}") from None


def check_fields(mapping: Mapping[Any, Any], what: str) -> None:
    """Check a mapping of named values (a message, metadata): str keys, policy values."""
    for name, item in mapping.items():
        if type(name) is not str:
            raise InvalidEventError(f"{what} keys must be str, not {name!r}")
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        check_value(item, f"{what} field {name!r}")


_decode = msgspec.json.Decoder().decode
_ENCODE_ERRORS: Final = (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError)


def encode_checked(mapping: Mapping[str, Any], what: str) -> bytes:
    """``mapping`` as the log writes it, if it follows the policy (the hot path: messages).

    Cheaper than walking the value: encode, then check that the bytes decode back equal and do
    not nest too deep. Only a value that fails is walked, to name the field.
    """
    try:
        data = encode_json(mapping)
    except _ENCODE_ERRORS as exc:
        check_fields(mapping, what)
        for name, item in mapping.items():  # a lone surrogate: name the field it is in
            try:
                encode_json(item)
            except _ENCODE_ERRORS:
                raise InvalidEventError(f"{what} field {name!r}: {exc}") from None
        raise InvalidEventError(f"{what}: not JSON-serialisable: {exc}") from None
    for name, item in mapping.items():
        kind = type(item)
        if type(name) is not str or not (
            kind is str or kind is int or kind is bool or item is None
        ):
            break
    else:
        return data  # flat text and numbers (most messages): nothing can change on the way
    limit = MAX_DEPTH + 1  # the mapping itself is one level
    if (data.count(b"[") + data.count(b"{") > limit and nesting(data) > limit) or _decode(
        data
    ) != mapping:
        check_fields(mapping, what)
        raise InvalidEventError(
            f"{what}: a value does not read back as written"
        )  # pragma: no cover
    return data


def nesting(data: bytes) -> int:
    """The deepest container nesting in JSON text (brackets inside strings not counted)."""
    depth = deepest = 0
    in_string = False
    for match in _TOKEN.finditer(data):
        char = match.group()
        if in_string:
            if char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char == b"[" or char == b"{":
            depth += 1
            deepest = max(deepest, depth)
        elif char == b"]" or char == b"}":
            depth -= 1
    return deepest


def line_too_deep(line: bytes) -> bool:
    """Whether an event line nests deeper than :data:`LINE_MAX_DEPTH` (a cheap test first)."""
    if line.count(b"[") + line.count(b"{") <= LINE_MAX_DEPTH:
        return False
    return nesting(line) > LINE_MAX_DEPTH

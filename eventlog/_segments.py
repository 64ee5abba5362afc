"""Segments: the rules of a log that continues in a new file past a size (pure, no I/O).

This module owns the segment rules (docs/FORMAT.md, "Segments"); the file store's I/O for them
is :mod:`eventlog._segfiles`.

Invariants:
- A log is its segments end to end. The first segment is the log as it was created (its header
  says version 1, segment 0). Every later segment starts with a header that says version 2,
  ``segment`` n (2, 3, ...), ``seq`` and ``prev_h`` (the previous segment's last seq and hash),
  ``offset`` (where it starts in the whole log), and the session's ``key``, ``id`` and
  ``created_at``; its own hash chains from ``prev_h``. So the segments end to end are one valid
  chain in which a segment header is a link that does not advance ``seq``.
- A version-1 reader refuses both halves of that: the live segment alone fails at line 1 (its
  header does not chain from the zero hash), and the whole log fails at the first later header
  (a header is not an event).
- Closed segments are named ``<stem>.<n>.seg`` (``.seg.gz`` once compressed), a name no
  version-1 reader lists; the live one keeps ``<stem>.jsonl``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

from ._events import FORMAT_VERSION, Header

#: The version every later segment's header says.
SEGMENT_VERSION: Final = 2
assert SEGMENT_VERSION <= FORMAT_VERSION
SEGMENT_SUFFIX: Final = ".seg"
COMPRESSED_SUFFIX: Final = ".seg.gz"
#: Past this many bytes, the live segment is closed and the log continues in a new one.
DEFAULT_SEGMENT_BYTES: Final = 64 * 1024 * 1024
#: How a later segment's header line starts, after the newline that ends the line before it.
SEGMENT_HEADER_START: Final = b'\n{"type":"header"'
_NAME: Final = re.compile(r"^(?P<stem>[^./][^/]*?)\.(?P<n>[1-9][0-9]{0,8})\.seg(?P<gz>\.gz)?$")


def segment_number(header: Header) -> int:
    """The number of the segment ``header`` starts (1 for a log's first)."""
    return max(header.segment, 1)


def segment_name(stem: str, n: int, *, compressed: bool = False) -> str:
    """The file name of closed segment ``n`` of the log ``<stem>.jsonl``."""
    return f"{stem}.{n}{COMPRESSED_SUFFIX if compressed else SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> tuple[str, int, bool] | None:
    """``(stem, n, compressed)`` for a closed segment's file name, else None."""
    match = _NAME.match(name)
    if match is None:
        return None
    return match["stem"], int(match["n"]), match["gz"] is not None


def next_header(
    first: Header, *, segment: int, seq: int, prev_h: str, offset: int, ts: datetime
) -> Header:
    """The header of segment ``segment`` (2, 3, ...), chaining onto ``prev_h`` at ``seq``."""
    return Header(
        version=SEGMENT_VERSION,
        seq=seq,
        ts=ts,
        id=first.id,
        key=first.key,
        created_at=first.created_at,
        segment=segment,
        prev_h=prev_h,
        offset=offset,
        sealing=first.sealing,
    )


def check_next(
    header: Header,
    *,
    first: Header | None,
    segment: int,
    seq: int,
    head: str,
    offset: int | None,
) -> str | None:
    """Why ``header`` cannot start the segment after segment ``segment`` (0: not known), or None.

    ``seq`` and ``head`` are the last seq and hash before it, ``offset`` where it starts in the
    whole log (None: not known), ``first`` the log's first header (None: not known).
    """
    if header.version < SEGMENT_VERSION:
        return f"a header of version {header.version} in the middle of the log"
    if header.segment < 2 or (segment and header.segment != segment + 1):
        expected = f"segment {segment + 1}" if segment else "a segment number of at least 2"
        return f"segment header says segment {header.segment} where {expected} was expected"
    if header.seq != seq:
        return f"segment {header.segment} starts after seq {header.seq} where {seq} was expected"
    if header.prev_h != head:
        return f"segment {header.segment} does not chain onto the previous segment's last hash"
    if offset is not None and header.offset != offset:
        return f"segment {header.segment} says it starts at byte {header.offset}, not {offset}"
    if first is not None and (header.key, header.id) != (first.key, first.id):
        return f"segment {header.segment} names another session ({header.key!r})"
    return None


def segment_starts(data: bytes) -> list[int]:
    """The offsets at which later segments start in a whole log's bytes (lines never hold a raw
    newline, so a newline followed by a header's opening is always a line that is a header)."""
    out: list[int] = []
    pos = data.find(SEGMENT_HEADER_START)
    while pos >= 0:
        out.append(pos + 1)
        pos = data.find(SEGMENT_HEADER_START, pos + 1)
    return out

"""What a nanobot-style save must append: the change from the saved messages to the current ones.

The caller of the nanobot drop-in mutates ``session.messages`` freely (appends, slices, element
replacement, ``del``, ``clear()``) and then saves. :func:`diff_messages` compares the list as it
was last saved with the list as it is now and returns a :class:`MessageDiff` that the events
``cleared`` / ``trimmed`` / ``retracted`` / ``message`` express. Pure: no I/O.

Invariants:
- Applying the diff to ``saved`` gives a list equal (``==``) to ``current``: first ``clear``, or
  drop the oldest ``trim`` and then the newest ``retract`` of what remains; what remains equals
  ``current[:keep]``; then ``current[keep:]`` is appended.
- The common case (only appends) is one C-level list comparison: elements compare by identity
  first, so an unchanged prefix of 10,000 messages costs a few tens of microseconds.
- A replaced element in the middle is found by value: everything from the first differing
  message to the end is retracted and appended again (one ``retracted`` event plus the
  re-appended messages). A list whose first message is not among the saved ones (a rewrite from
  the front) is ``cleared`` and appended again in full. Both are correct, only larger.
- Messages are compared by value (``==``), so an equal copy of a saved message counts as
  unchanged: the log's content, not object identity, is what must match.
- The newest :data:`TAIL_CHECK` saved messages are also compared against copies taken when they
  were saved, so an in-place edit of a recent message dict (``msgs[-1]["content"] = ...``) is
  found too. In-place edits of older message dicts are not detected: replace the element.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

#: How many of the newest saved messages are compared by value against copies on each save.
TAIL_CHECK: Final = 8
#: How many occurrences of the current first message are tried as the start of a kept run.
MAX_CANDIDATES: Final = 16

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class MessageDiff:
    """The edit from the saved messages to the current ones, in event terms."""

    #: Drop every saved message first (then ``trim`` and ``retract`` are 0).
    clear: bool = False
    #: Drop this many of the oldest saved messages.
    trim: int = 0
    #: Then withdraw this many of the newest remaining ones.
    retract: int = 0
    #: How many current messages are the saved ones that stay; ``current[keep:]`` is appended.
    keep: int = 0

    def unchanged(self, current_length: int) -> bool:
        """True when nothing is dropped and nothing is appended."""
        return not (self.clear or self.trim or self.retract) and self.keep == current_length


def _common_prefix(saved: Sequence[Message], start: int, current: Sequence[Message]) -> int:
    """How many messages ``saved[start:]`` and ``current`` share from their fronts."""
    limit = min(len(saved) - start, len(current))
    i = 0
    while i < limit:
        a = saved[start + i]
        b = current[i]
        if a is not b and a != b:
            break
        i += 1
    return i


def _edited_tail(
    saved: Sequence[Message],
    current: Sequence[Message],
    tail: Sequence[Message],
    shift: int = 0,
) -> int | None:
    """The saved index of the oldest recent message that differs from its logged copy, if any.

    ``current[i - shift]`` stands where ``saved[i]`` was. It is compared with the copy taken when
    ``saved[i]`` was saved, not with ``saved[i]`` itself, which may have been edited in place.
    """
    start = len(saved) - len(tail)
    for offset, copy in enumerate(tail):
        i = start + offset
        j = i - shift
        if 0 <= j < len(current) and current[j] != copy:
            return i
    return None


def diff_messages(
    saved: Sequence[Message],
    current: Sequence[Message],
    tail: Sequence[Message] = (),
) -> MessageDiff:
    """Return the edit turning ``saved`` into ``current``.

    ``tail`` holds value copies of the newest ``len(tail)`` saved messages, taken when they were
    saved; a saved message whose dict was since edited in place counts as replaced.
    """
    n = len(saved)
    m = len(current)
    if n == 0:
        return MessageDiff(keep=0)
    if m >= n and (current if m == n else current[:n]) == saved:
        edited = _edited_tail(saved, current, tail) if tail else None
        if edited is None:
            return MessageDiff(keep=n)
        return _rebuild_from(n, edited)
    if m == 0:
        return MessageDiff(clear=True)
    best: tuple[int, int] | None = None  # (start in saved, shared run length)
    first = current[0]
    k = -1
    for _ in range(MAX_CANDIDATES):
        try:
            k = _index(saved, first, k + 1)
        except ValueError:
            break
        rest = n - k
        if m >= rest and current[:rest] == saved[k:]:
            best = (k, rest)
            break
        run = _common_prefix(saved, k, current)
        if best is None or run > best[1]:
            best = (k, run)
    if best is None:
        return MessageDiff(clear=True)
    k, run = best
    if tail:
        # An in-place edit inside the kept run shortens it.
        edited = _edited_tail(saved, current[:run], tail, shift=k)
        if edited is not None and edited < k + run:
            run = edited - k
            if run <= 0:
                return MessageDiff(clear=True) if k == 0 else MessageDiff(trim=k, retract=n - k)
    return MessageDiff(trim=k, retract=n - k - run, keep=run)


def _rebuild_from(n: int, index: int) -> MessageDiff:
    """Withdraw everything from ``index`` on and append it again (``clear`` when from 0)."""
    if index == 0:
        return MessageDiff(clear=True)
    return MessageDiff(retract=n - index, keep=index)


def _index(seq: Sequence[Message], value: Message, start: int) -> int:
    """``seq.index(value, start)`` (by identity, then value) for any sequence."""
    if isinstance(seq, list):
        return seq.index(value, start)
    for i in range(start, len(seq)):
        if seq[i] is value or seq[i] == value:
            return i
    raise ValueError("not found")

"""Redaction: mask the fields a caller names before a session is shown or exported (pure).

A field is named as one of:
- ``FIELD``: that key of every message (``content``, ``tool_calls``, ``reasoning_content``...);
- ``ROLE.FIELD``: that key of the messages of one role only (``tool.content``);
- ``metadata.KEY``: that metadata key, in the header and in every metadata event;
- ``summary``: the text of compaction summaries.

A masked value becomes the string :data:`MASK`, whatever it was (its length is not shown).
A key the message does not have stays absent. Nothing here changes a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ._errors import RedactionError

MASK: Final = "[redacted]"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


@dataclass(frozen=True, slots=True)
class Redaction:
    """Which fields to mask; build one with :meth:`parse`."""

    #: Message keys masked in every message.
    fields: frozenset[str] = frozenset()
    #: (role, key) pairs masked in the messages of that role.
    role_fields: frozenset[tuple[str, str]] = frozenset()
    #: Metadata keys masked.
    metadata: frozenset[str] = frozenset()
    #: Whether compaction summaries are masked.
    summary: bool = False

    @classmethod
    def parse(cls, names: Iterable[str]) -> Redaction:
        """Read field names (``content``, ``tool.content``, ``metadata.email``, ``summary``).

        Raises:
            RedactionError: a name is not of one of those forms.
        """
        fields: set[str] = set()
        role_fields: set[tuple[str, str]] = set()
        metadata: set[str] = set()
        summary = False
        for raw in names:
            name = raw.strip()
            parts = name.split(".")
            if len(parts) > 2 or not all(_NAME.fullmatch(p) for p in parts):
                raise RedactionError(
                    f"cannot redact {raw!r}: name a message field (content), a role's field "
                    "(tool.content), a metadata key (metadata.email) or summary"
                )
            if parts[0] == "metadata" and len(parts) == 2:
                metadata.add(parts[1])
            elif len(parts) == 2:
                role_fields.add((parts[0], parts[1]))
            elif name == "summary":
                summary = True
            else:
                fields.add(name)
        return cls(frozenset(fields), frozenset(role_fields), frozenset(metadata), summary)

    def __bool__(self) -> bool:
        return bool(self.fields or self.role_fields or self.metadata or self.summary)

    def message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``message`` with the named fields masked (the same dict when none apply)."""
        role = message.get("role")
        out: dict[str, Any] | None = None
        for key in message:
            if key in self.fields or (role, key) in self.role_fields:
                if out is None:
                    out = dict(message)
                out[key] = MASK
        return out if out is not None else dict(message)

    def meta(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``metadata`` with the named keys masked."""
        return {k: (MASK if k in self.metadata else v) for k, v in metadata.items()}

    def keys(self, keys: Iterable[str]) -> list[str]:
        """Metadata keys, unchanged (names are shown; only values are masked)."""
        return list(keys)

    def text(self, summary: str) -> str:
        """A compaction summary, masked when asked."""
        return MASK if self.summary else summary

    def describe(self) -> list[str]:
        """The field names, sorted, as a caller would give them."""
        names = list(self.fields)
        names += [f"{r}.{k}" for r, k in self.role_fields]
        names += [f"metadata.{k}" for k in self.metadata]
        if self.summary:
            names.append("summary")
        return sorted(names)


NO_REDACTION: Final = Redaction()

"""What every importer shares: building a log from foreign data, installing it, the report.

Invariants:
- An import is a pure function of the source: the header id, every event id and every event
  time derive from the source's content, so importing the same source twice builds the same
  bytes, and the second import is a no-op (``unchanged``).
- An import never overwrites: a session of the same key holding different content is a
  ``clash``, reported and left alone. A stored log that is a prefix of the new one is extended.
- Bad input found before anything is written (a file that is not the format at all) raises
  :class:`ForeignFormatError` naming the file; nothing is imported.
- Lines salvaged around (corrupt or not a message) go to the new session's quarantine, counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from hashlib import blake2b
from pathlib import Path
from typing import Any, Literal

import msgspec

from sessionledger.eventlog import (
    BaseStore,
    Consolidated,
    Header,
    KnownEvent,
    MessageAppended,
    StorageError,
    UnsafePathError,
)
from sessionledger.eventlog.backend import read_regular_file
from sessionledger.eventlog.codec import encode_lines

from ._errors import ForeignFormatError

Outcome = Literal["created", "unchanged", "extended", "clash"]
#: A line kept out of the log: (reason, 1-based line, byte offset, bytes).
Rejected = tuple[str, int, int, bytes]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class SessionImport:
    """One session imported (or not): where from, what happened, what was salvaged."""

    key: str
    source: str
    outcome: Outcome
    messages: int = 0
    #: Lines (or entries) that could not be imported; kept in the session's quarantine.
    bad_lines: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ImportReport:
    """What an import did, session by session."""

    sessions: list[SessionImport] = field(default_factory=list)

    def _with(self, outcome: str) -> list[SessionImport]:
        return [s for s in self.sessions if s.outcome == outcome]

    @property
    def created(self) -> list[SessionImport]:
        """Sessions new to the store."""
        return self._with("created")

    @property
    def unchanged(self) -> list[SessionImport]:
        """Sessions already imported with the same content (no-ops)."""
        return self._with("unchanged")

    @property
    def extended(self) -> list[SessionImport]:
        """Sessions whose stored log was a prefix of the source; the rest was appended."""
        return self._with("extended")

    @property
    def clashes(self) -> list[SessionImport]:
        """Sessions not imported because the store holds different content under that key."""
        return self._with("clash")

    @property
    def bad_lines(self) -> int:
        """Source lines kept in quarantine instead of imported."""
        return sum(s.bad_lines for s in self.sessions)

    @property
    def ok(self) -> bool:
        """True when nothing clashed and no line was salvaged around."""
        return not self.clashes and not self.bad_lines


def derive_id(*parts: str | bytes) -> str:
    """A deterministic event id (32 hex) from the parts of a source that identify it."""
    h = blake2b(digest_size=16, person=b"sessionlog-imp")
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def canonical(value: Any) -> bytes:
    """Canonical JSON of ``value`` (sorted keys), for ids derived from content."""
    return msgspec.json.encode(value, order="sorted")


def parse_time(value: object) -> datetime | None:
    """An ISO time from a foreign file as aware UTC (a naive time is local); None if unusable."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, OSError, ValueError):
        return None


def build_session(
    store: BaseStore,
    *,
    key: str,
    origin: str,
    created_at: datetime,
    metadata: dict[str, Any],
    messages: Sequence[tuple[dict[str, Any], datetime]],
    last_consolidated: int = 0,
) -> bytes:
    """The log bytes for a foreign session: header, one event per message, the cursor.

    The ``consolidated`` event follows message number ``last_consolidated``, so a source that
    only grew since an earlier import builds a log that extends the stored one.
    """
    header = Header(
        seq=0,
        ts=created_at,
        id=derive_id(origin, "header", key, created_at.isoformat()),
        key=key,
        created_at=created_at,
        metadata=metadata,
    )
    events: list[Header | KnownEvent] = [header]
    seq = 0
    count = store.token_counter
    for index, (message, ts) in enumerate(messages):
        seq += 1
        events.append(
            MessageAppended.of(
                seq=seq,
                ts=ts,
                id=derive_id(origin, key, str(index), canonical(message)),
                message=message,
                tokens=int(count(message)),
            )
        )
        if last_consolidated and index + 1 == last_consolidated:
            seq += 1
            events.append(
                Consolidated(
                    seq=seq,
                    ts=ts,
                    id=derive_id(origin, key, "consolidated", str(last_consolidated)),
                    upto=last_consolidated,
                )
            )
    data, _ = encode_lines(events, key=store.hash_key)
    return data


def install(
    store: BaseStore,
    key: str,
    data: bytes,
    *,
    source: str,
    messages: int,
    rejected: Sequence[Rejected] = (),
    notes: Sequence[str] = (),
) -> SessionImport:
    """Put a built log into ``store`` (never overwriting) and say what happened."""
    outcome: Outcome = store.import_bytes(key, data, rejected=rejected)  # type: ignore[assignment]
    result = SessionImport(
        key=key,
        source=source,
        outcome=outcome,
        messages=messages,
        bad_lines=len(rejected),
        notes=list(notes),
    )
    if outcome == "clash":
        result.notes.append(
            f"the store already holds different content for {key!r}; left it as it is"
        )
    return result


def monotonic(times: Sequence[datetime | None], start: datetime) -> list[datetime]:
    """Event times that never go backwards: unusable or earlier times take the previous one."""
    out: list[datetime] = []
    last = start
    for t in times:
        if t is not None and t > last:
            last = t
        out.append(last)
    return out


def read_source(path: Path) -> bytes:
    """Read a foreign file, translating OS errors into :class:`ForeignFormatError`."""
    try:
        data = read_regular_file(path)
    except UnsafePathError as exc:
        raise ForeignFormatError(str(path), exc.reason + "; not followed") from exc
    except StorageError as exc:
        raise ForeignFormatError(str(path), exc.cause) from exc
    if data is None:
        raise ForeignFormatError(str(path), "no such file or directory")
    return data


def source_files(path: Path, suffix: str) -> list[Path]:
    """``path`` itself, or the ``suffix`` files directly in the directory ``path``, sorted."""
    if not path.exists():
        raise ForeignFormatError(str(path), "no such file or directory")
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.name.endswith(suffix) and p.is_file())
    return [path]

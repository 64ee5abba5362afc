"""Reports of verify and recover: per session and for the whole store.

Invariants:
- A report's ``.ok`` is True exactly when its ``.problems`` list is empty.
- Every problem is a :class:`Finding` ``(file, line, what)``: the log file (or store description)
  it is about, the 1-based line it concerns (0 when it is about the file as a whole), and a
  sentence saying what is wrong. A store report's problems are its sessions' problems, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from sessionledger.eventlog import portable
from sessionledger.eventlog.codec import ZERO_HASH


class Finding(NamedTuple):
    """One problem: the file, the 1-based line (0: the whole file), and what is wrong."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        where = f"line {self.line} of {self.file}" if self.line else self.file
        return f"{where}: {self.what}"


@portable("ok")
@dataclass(slots=True)
class SessionVerify:
    """What verifying one session's log found."""

    key: str
    path: str
    #: Lines read (header included) and bytes in the log.
    lines: int = 0
    bytes: int = 0
    #: The last valid event's seq and chain hash.
    seq: int = 0
    head: str = ZERO_HASH
    #: The snapshot or catalog records a later point than the log holds: whole lines are gone.
    truncated: bool = False
    #: Bytes of an unfinished last line (a crash mid-append; ``recover`` cuts it).
    torn_bytes: int = 0
    problems: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong with this session."""
        return not self.problems


@portable("ok")
@dataclass(slots=True)
class SessionRecover:
    """What recovering one session did and found."""

    key: str
    path: str
    #: Bytes of a torn tail cut into quarantine (0: none), and where they went.
    tail_cut: int = 0
    quarantine: str | None = None
    snapshot_rebuilt: bool = False
    #: True when the session was skipped because a live writer holds it.
    locked: bool = False
    problems: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is left wrong with this session."""
        return not self.problems


_S = TypeVar("_S", "SessionVerify", "SessionRecover")


@dataclass(slots=True)
class _StoreReport(Generic[_S]):
    """What a check of a whole store found: per session, and for the store itself."""

    sessions: list[_S] = field(default_factory=list)
    #: Problems not tied to one session (e.g. the catalog).
    store_problems: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when nothing is wrong with the store or any session."""
        return not self.store_problems and all(s.ok for s in self.sessions)

    @property
    def problems(self) -> list[Finding]:
        """Every problem found, the store's first, then session by session."""
        out = list(self.store_problems)
        for s in self.sessions:
            out.extend(s.problems)
        return out

    @property
    def checked(self) -> int:
        """Sessions checked."""
        return len(self.sessions)

    def session(self, key: str) -> _S:
        """The report of one session (KeyError if it was not checked)."""
        for s in self.sessions:
            if s.key == key:
                return s
        raise KeyError(key)


@portable("ok")
@dataclass(slots=True)
class VerifyReport(_StoreReport["SessionVerify"]):
    """What :func:`replay.verify` found, per session and for the whole store."""

    @property
    def bytes(self) -> int:
        """Log bytes read."""
        return sum(s.bytes for s in self.sessions)


@portable("ok")
@dataclass(slots=True)
class RecoverReport(_StoreReport["SessionRecover"]):
    """What :func:`replay.recover` did, per session and for the whole store."""

    catalog_rebuilt: bool = False
    #: What crashed processes had left and recover removed or completed (temporaries of view
    #: writes, trash moves), one sentence each.
    leftovers: list[str] = field(default_factory=list)

    @property
    def tails_cut(self) -> list[tuple[str, int]]:
        """(key, bytes) of every torn tail cut into quarantine."""
        return [(s.key, s.tail_cut) for s in self.sessions if s.tail_cut]

    @property
    def snapshots_rebuilt(self) -> list[str]:
        """Keys whose snapshot was stale, missing or corrupt and was rebuilt."""
        return [s.key for s in self.sessions if s.snapshot_rebuilt]

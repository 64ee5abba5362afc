"""Moving sessions between stores (files to PostgreSQL and back), verified by hashes.

Invariants:
- A session is copied as its exact log bytes through the destination's ``import_bytes``, which
  checks every line (hash chain, seq, header key) and never overwrites a different log: a key
  that already holds another log is reported as a clash and left alone.
- After copying, the destination's bytes are read back and must equal the source's, with the
  same chain head; anything else is a problem in the report, never silent.
- Both stores must use the same ``hash_key`` (the chain is keyed with it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ._codec import verify_chain
from ._errors import EventLogError
from ._store import BaseStore


@dataclass(frozen=True, slots=True)
class CopiedSession:
    """One session copied: ``outcome`` is created, extended, unchanged or clash."""

    key: str
    outcome: str
    head: str
    bytes: int


@dataclass(slots=True)
class CopyReport:
    """What :func:`copy_store` did; ``ok`` when every session arrived byte for byte."""

    sessions: list[CopiedSession] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing clashed or failed to verify."""
        return not self.problems


def copy_store(src: BaseStore, dst: BaseStore, *, keys: Iterable[str] | None = None) -> CopyReport:
    """Copy every session (or ``keys``) of ``src`` into ``dst`` and verify each by its hashes.

    Re-running it is safe: sessions already copied are ``unchanged``; ones that grew in
    ``src`` since are ``extended``.
    """
    report = CopyReport()
    if src.hash_key != dst.hash_key:
        report.problems.append("the stores use different hash keys: the chains cannot verify")
        return report
    for key in src.keys() if keys is None else keys:
        try:
            data = src.read_bytes(key)
            outcome = dst.import_bytes(key, data)
            if outcome == "clash":
                report.problems.append(f"session {key!r}: the destination holds another log")
                report.sessions.append(CopiedSession(key, outcome, "", 0))
                continue
            back = dst.read_bytes(key)
            want = verify_chain(data, key=src.hash_key)
            got = verify_chain(back, key=dst.hash_key)
            if back != data or got.problems or got.head != want.head:
                report.problems.append(
                    f"session {key!r}: the copy does not match (heads {want.head} / {got.head})"
                )
            report.sessions.append(CopiedSession(key, outcome, got.head, len(back)))
        except EventLogError as exc:
            report.problems.append(f"session {key!r}: {exc}")
    return report

"""Errors of the replay functions: subclasses of eventlog's root, saying what and where."""

from __future__ import annotations

from sessionledger.eventlog import EventLogError, LockedError


class ForeignFormatError(EventLogError, ValueError):
    """A file given to an import cannot be parsed at all; nothing was imported from it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot import {path}: {reason}; nothing was imported")
        self.path = path
        self.reason = reason


class RecoverRefusedError(LockedError):
    """``recover`` refused to run: live writers hold these sessions' locks; nothing changed."""

    def __init__(self, keys: list[str], paths: list[str]) -> None:
        EventLogError.__init__(
            self,
            f"recover refused: {len(keys)} session(s) locked by a live writer "
            f"({', '.join(paths[:3])}{' ...' if len(paths) > 3 else ''}); stop that process, or "
            "pass skip_locked=True to recover the others; nothing was changed",
        )
        self.key = keys[0]
        self.path = paths[0]
        self.keys = keys
        self.paths = paths


class PointNotFoundError(EventLogError, ValueError):
    """A time-travel point (seq or time) lies outside a session's log."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path


class RedactionError(EventLogError, ValueError):
    """A field named for redaction is not one the redaction rules know how to find."""

"""The library's errors: one root, a few subclasses carrying what a caller needs.

Messages say what and where, e.g. ``line 17 of telegram_3a42.jsonl: hash mismatch``. OS and
decode errors are translated at the store with ``raise ... from exc``.
"""

from __future__ import annotations


class EventLogError(Exception):
    """Root of every error this library raises on purpose."""


class InvalidEventError(EventLogError, ValueError):
    """The caller's input cannot become an event (bad role, unserialisable value, empty key)."""


class ConflictError(EventLogError):
    """An append's ``expected_seq`` did not match the session's last seq; nothing was written."""

    def __init__(self, key: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {key!r}: expected last seq {expected}, but the log is at seq {actual}; "
            "nothing was written"
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class CorruptLogError(EventLogError):
    """A line in the middle of a log is unreadable or fails its hash; ``line`` is 1-based."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"line {line} of {path}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class NotALogError(EventLogError):
    """A file where a session log was expected is not one; it was left untouched."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} is not a session log: {reason}; left untouched")
        self.path = path
        self.reason = reason


class NewerFormatError(EventLogError):
    """A log was written in a newer format version than this library writes: it can be read
    (unknown events pass through) but not appended to; nothing was changed."""

    def __init__(self, path: str, version: int, known: int) -> None:
        super().__init__(
            f"{path}: format version {version} is newer than this library writes ({known}); "
            "it can be read but not appended to (nothing was written)"
        )
        self.path = path
        self.version = version
        self.known = known


class SessionNotFoundError(EventLogError, KeyError):
    """No session with that key exists in the store."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"no session with key {self.key!r}"


class LockedError(EventLogError):
    """Another writer (in this or another process) holds the session's lock."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__(f"session {key!r} is locked by another writer ({path})")
        self.key = key
        self.path = path


class StorageError(EventLogError):
    """The storage refused a write or a sync (disk full, I/O error); the log is left valid."""

    def __init__(
        self, path: str, action: str, cause: str, *, durable_unknown: bool = False
    ) -> None:
        super().__init__(f"{action} failed on {path}: {cause}")
        self.path = path
        self.action = action
        self.cause = cause
        #: True when lines were written but could not be confirmed durable (an fsync failed
        #: after other appends were already acknowledged as written).
        self.durable_unknown = durable_unknown


class UnsafePathError(EventLogError):
    """A path the store would use is a symlink or otherwise unsafe; it was not followed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"refusing {path}: {reason}")
        self.path = path
        self.reason = reason


class StoreClosedError(EventLogError):
    """The store or writer was used after ``close()``."""


class KeyUnavailableError(EventLogError):
    """Encrypted content cannot be opened: no key provider, a wrong key, or a missing key record.

    Nothing is changed when this is raised; the log and the key store stay as they were.
    """

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.what = what
        self.reason = reason

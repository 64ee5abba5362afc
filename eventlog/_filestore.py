"""The embedded file store: one JSONL log per session in one directory.

What moves the bytes (and its invariants: permissions, symlinks, locks, descriptors, the change
table) is the file backend, :mod:`eventlog._filebackend`; this class holds it and adds what an
application sees of the files: their paths, the descriptor budget, leftovers of crashed
processes. Everything else is the shared store (:class:`BaseStore`).
"""

from __future__ import annotations

import os
import stat
import weakref
from pathlib import Path
from typing import TypedDict

from ._codec import normalize_key
from ._errors import (
    InvalidEventError,
    NotALogError,
    SessionNotFoundError,
    UnsafePathError,
)
from ._filebackend import FileBackend
from ._fileio import read_log_file
from ._keystore import FileKeyStore, KeyProvider, KeyStore
from ._names import check_key, key_to_stem
from ._safeio import fsync_dir, storage_error, sweep_temps
from ._segfiles import clean_rolls, compress_closed, read_live_start, stray_segments
from ._segments import DEFAULT_SEGMENT_BYTES
from ._store import BaseStore
from ._store_types import CutReport
from ._tokens import TokenCounter
from ._writer import Durability, check_durability

#: The key store of an encrypted file store, in the store root.
KEYS_DIR = ".keys"
#: Descriptors a store keeps open for its writers by default (least recently used out).
DEFAULT_MAX_OPEN_FILES = 128
_PATH = type(Path())


class FileStoreArgs(TypedDict, total=False):
    """The keyword arguments of :class:`FileStore`, which its async twin passes on."""

    durability: Durability | str
    hash_key: bytes | str | None
    token_counter: TokenCounter | None
    lock_timeout: float
    batch_window: float
    key_provider: KeyProvider | None
    key_store: KeyStore | None
    max_open_files: int
    segment_bytes: int


class FileStore(BaseStore):
    """Sessions as JSONL files in ``root`` (created 0700 if missing).

    Args:
        root: the store's directory (``~`` is expanded).
        durability: ``"always"`` (fsync before each append returns), ``"batch"`` (group
            commit: one fsync covers the appends that arrive together; each append returns
            after its fsync), or ``"none"`` (page cache only; a power loss can lose the tail).
        hash_key: a secret to key the hash chain with; only key holders can forge a valid log.
        token_counter: counts a message's tokens at write time (default: a byte heuristic).
        lock_timeout: seconds a write waits for the log's lock (held by another writer for
            one write at a time) before :class:`LockedError`.
        batch_window: seconds a group-commit leader waits for more appends before its fsync.
        key_provider: encrypt the sessions this store creates, with data keys wrapped by this
            provider's master key (e.g. :class:`LocalKeyFile`); see docs/privacy.md.
        key_store: where the wrapped data keys live (default: ``root/.keys``).
        max_open_files: most log descriptors kept open for writers, and never more than half
            the process's limit (least recently used are closed, and reopened on next append).
        segment_bytes: a log whose live segment reaches this many bytes continues in a new
            segment file (docs/FORMAT.md, "Segments"); 0 never starts one.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durability: Durability | str = "batch",
        hash_key: bytes | str | None = None,
        token_counter: TokenCounter | None = None,
        lock_timeout: float = 10.0,
        batch_window: float = 0.0,
        key_provider: KeyProvider | None = None,
        key_store: KeyStore | None = None,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int):
            raise InvalidEventError(f"segment_bytes must be an int, not {segment_bytes!r}")
        if segment_bytes < 0:
            raise InvalidEventError(f"segment_bytes must not be negative, not {segment_bytes}")
        self.segment_bytes = segment_bytes
        if isinstance(max_open_files, bool) or not isinstance(max_open_files, int):
            raise InvalidEventError(f"max_open_files must be an int, not {max_open_files!r}")
        if max_open_files < 1:
            raise InvalidEventError(f"max_open_files must be at least 1, not {max_open_files}")
        durable = check_durability(durability) != "none"
        # A Path is taken as it is (building one again parses it again; it is immutable).
        self.root = (root if type(root) is _PATH else Path(root)).expanduser()
        self.lock_timeout = lock_timeout
        _ensure_root(self.root, durable)
        self._files = FileBackend(
            self.root,
            durable=durable,
            lock_timeout=lock_timeout,
            max_open_files=max_open_files,
            hash_key=normalize_key(hash_key),
            segment_bytes=segment_bytes,
        )
        # A store dropped without close(): its descriptors go with it.
        self._finalizer = weakref.finalize(self, self._files.close)
        super().__init__(
            self._files,
            durability=durability,
            hash_key=hash_key,
            token_counter=token_counter,
            batch_window=batch_window,
        )
        if key_provider is not None and key_store is None:
            key_store = FileKeyStore(self.root / KEYS_DIR, durable=durable)
        self._privacy.use_keys(key_provider, key_store)

    def __repr__(self) -> str:
        return f"FileStore({str(self.root)!r}, durability={self.durability!r})"

    def close(self) -> None:
        """Sync and close every open writer, then unmap the change table."""
        try:
            super().close()
        finally:
            self._finalizer()

    @property
    def max_open_files(self) -> int:
        """Most log descriptors this store keeps open for its writers."""
        return self._files.pool.limit

    def open_files(self) -> int:
        """Log descriptors open for writers right now."""
        return len(self._files.pool)

    def path_for(self, key: str) -> Path:
        """The log file of ``key`` (it may not exist yet)."""
        return self._files.path_for(key)

    def quarantine_path(self, key: str) -> Path:
        """Where bytes cut from ``key``'s log are kept."""
        return self._files.quarantine_path(key)

    def snapshot_path(self, key: str) -> Path:
        """Where ``key``'s snapshot is kept."""
        return self._files.snapshot_path(key)

    def compress_segments(self, key: str) -> list[Path]:
        """Gzip the closed segments of ``key``'s log (``<stem>.<n>.seg.gz``); readers and
        ``verify`` read them as before. Returns the files written. The live segment is left
        alone; a crash leaves both forms of one segment, and the next call finishes."""
        stem = key_to_stem(check_key(key))
        done = compress_closed(str(self.root), stem, sync=self.durability != "none")
        return [Path(p) for p in done]

    def stray_segments(self) -> list[tuple[Path, str]]:
        """Closed-segment files that no log reads (of no session, or numbered at or past its
        live segment), each with why; nothing is changed (``clean_leftovers`` removes those a
        crashed roll left)."""
        return [(Path(p), why) for p, why in stray_segments(str(self.root))]

    def cut(
        self, key: str, offset: int, *, reason: str, expect_length: int | None = None
    ) -> CutReport | None:
        """See :meth:`BaseStore.cut`; a closed segment is never cut (InvalidEventError)."""
        key = check_key(key)
        path = str(self.path_for(key))
        live = read_log_file(path, read_live_start)
        if live is None:
            raise SessionNotFoundError(key)
        if 0 <= offset < live.base:
            raise InvalidEventError(
                f"byte {offset} of {path} is in a closed segment (segment {live.segment} starts "
                f"at {live.base}): closed segments are never cut; restore the segment from a copy"
            )
        return super().cut(key, offset, reason=reason, expect_length=expect_length)

    def clean_leftovers(self) -> list[str]:
        """Remove what crashed processes left (view temporaries, half-done trash moves).

        Temporaries of live processes are left alone. Returns what was done, one sentence each.
        """
        done = [f"removed the temporary {path}" for path in sweep_temps(str(self.root))]
        done += clean_rolls(str(self.root))
        trash = self.root / ".trash"
        if trash.is_dir() and not trash.is_symlink():
            lock = self._files.trash().lock()
            with lock:
                done += lock.settled
        return done


def _ensure_root(root: Path, durable: bool) -> None:
    """Create the store directory 0700 (refusing a symlink or a file in its place).

    A directory already there (every open but the first) costs one ``lstat``; anything else
    (missing, a symlink, a file, a path that cannot be looked at) takes the full checks."""
    path = str(root)
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return
    except OSError:
        pass
    except ValueError as exc:  # a NUL byte, a lone surrogate: no file has such a name
        raise InvalidEventError(
            f"the store directory {path!r} is not a usable path: {exc}"
        ) from None
    if os.path.islink(path):
        raise UnsafePathError(path, "the store directory is a symlink")
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotALogError(path, "it is a file, not a store directory")
    created = not os.path.exists(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if created:
            os.chmod(path, 0o700)
    except OSError as exc:
        raise storage_error(path, "create the store directory", exc) from exc
    if created and durable:
        fsync_dir(str(root.parent))

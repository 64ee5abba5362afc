"""Where keys live: the master key provider, and the key store of wrapped session keys.

A :class:`KeyProvider` holds the master key and wraps and unwraps data keys with it;
:class:`LocalKeyFile` is the embedded default (a 0600 file of AES-256 keys), and a KMS can
implement the same small protocol. A :class:`KeyStore` keeps one record per encrypted session:
that session's key tree (see ``_keytree``), wrapped by the provider. :class:`FileKeyStore` keeps
them as files (by default in ``<store root>/.keys``), :class:`MemoryKeyStore` in memory.

Invariants (the file implementations):
- A file is replaced whole: written to a temporary name (``O_EXCL | O_NOFOLLOW``, 0600),
  fsynced, renamed over the old one, and the directory fsynced. A crash leaves the old record or
  the new one, never a mix and never neither; a key is never half-deleted.
- Read-modify-write of records (create, puncture, rotate, remove) happens under
  :meth:`KeyStore.locked`, an exclusive ``flock`` across processes, so two processes redacting
  at once cannot resurrect each other's destroyed keys.
- A record is bound to its session id (the wrap's context), so a record copied to another name
  does not open.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import msgspec

from ._errors import KeyUnavailableError, UnsafePathError
from ._safeio import fsync_dir, storage_error, write_temp_beside

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_WRAP_MAGIC: Final = b"SLW1"
_ID_LEN: Final = 8
_NONCE: Final = 12
_RECORD_SUFFIX: Final = ".key"
_SESSION_ID: Final = re.compile(r"[0-9a-f]{8,64}")
_KEYFILE_FORMAT: Final = "sessionledger-master-keys"


_AEAD: list[type[AESGCM]] = []


def _aead() -> type[AESGCM]:
    """The AES-GCM class (imported once: ``cryptography`` is the optional ``crypto`` extra)."""
    if _AEAD:
        return _AEAD[0]
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - the [crypto] extra is missing
        raise KeyUnavailableError(
            "encryption",
            "the cryptography package is not installed (pip install 'sessionledger[crypto]')",
        ) from exc
    _AEAD.append(AESGCM)
    return AESGCM


def check_session_id(session_id: str) -> str:
    """Return ``session_id`` if it can name a key record (hex); raise otherwise."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise KeyUnavailableError(f"session id {session_id!r}", "not a session id a key can have")
    return session_id


@runtime_checkable
class KeyProvider(Protocol):
    """Holds the master key: wraps and unwraps data keys (a local key file, or a KMS)."""

    def wrap(self, key: bytes, context: bytes) -> bytes:
        """``key`` encrypted under the current master key, bound to ``context``."""
        ...

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """The key in ``wrapped``; raise :class:`KeyUnavailableError` if it does not open."""
        ...

    def is_current(self, wrapped: bytes) -> bool:
        """Whether ``wrapped`` was wrapped under the current master key."""
        ...

    def rotate(self) -> None:
        """Make a new master key current; older ones still unwrap until :meth:`retire`."""
        ...

    def retire(self) -> None:
        """Forget every master key but the current one."""
        ...


class _MasterKey(msgspec.Struct):
    id: str
    key: str
    created: str


class _KeyFile(msgspec.Struct):
    format: str
    version: int
    keys: list[_MasterKey]


def write_replace(directory: str, name: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``directory/name`` by ``data`` crash-safely: temp file, fsync, rename, dir fsync.

    Raises :class:`StorageError` naming the file when the disk refuses (nothing is left).
    """
    path = os.path.join(directory, name)
    try:
        tmp = write_temp_beside(Path(path), data, durable=durable)
        try:
            _rename(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise storage_error(path, "write", exc) from exc
    if durable:
        fsync_dir(directory)


# An indirection the crash tests patch.
_rename = os.rename


def read_private(path: str) -> bytes | None:
    """A regular file's bytes (None if absent); refuse a symlink or a file others can read."""
    try:
        # O_NONBLOCK: a FIFO planted as a key file must not block the open; fstat refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(path, "it is a symlink") from exc
        raise KeyUnavailableError(path, f"cannot open it: {os.strerror(exc.errno or 0)}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(path, "not a regular file")
        if st.st_mode & 0o077:
            raise UnsafePathError(path, f"its mode is {st.st_mode & 0o777:o}; keys must be 0600")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class LocalKeyFile:
    """The embedded key provider: AES-256 master keys in one 0600 file (created if missing).

    The file is JSON (a list of keys; the last is current). It is replaced crash-safely, and
    re-read when another process changed it (a rotation elsewhere).
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.RLock()
        self._stamp: tuple[int, int, int] | None = None
        self._keys: list[tuple[bytes, bytes]] = []
        with self._lock:
            if not self._load() and create:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._save([(os.urandom(_ID_LEN), _aead().generate_key(bit_length=256))])
            if not self._keys:
                raise KeyUnavailableError(str(self.path), "no master key file")

    def __repr__(self) -> str:
        return f"LocalKeyFile({str(self.path)!r})"

    def _load(self) -> bool:
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return True
        data = read_private(str(self.path))
        if data is None:
            return False
        try:
            parsed = msgspec.json.decode(data, type=_KeyFile)
            if parsed.format != _KEYFILE_FORMAT or not parsed.keys:
                raise ValueError("not a master key file")
            keys = [(bytes.fromhex(k.id), base64.b64decode(k.key)) for k in parsed.keys]
        except (msgspec.DecodeError, ValueError) as exc:
            raise KeyUnavailableError(str(self.path), f"unreadable master key file: {exc}") from exc
        if any(len(i) != _ID_LEN or len(k) != 32 for i, k in keys):
            raise KeyUnavailableError(str(self.path), "a master key has the wrong length")
        self._keys = keys
        self._stamp = stamp
        return True

    def _save(self, keys: list[tuple[bytes, bytes]]) -> None:
        now = datetime.now(UTC).isoformat()
        doc = _KeyFile(
            _KEYFILE_FORMAT,
            1,
            [_MasterKey(i.hex(), base64.b64encode(k).decode("ascii"), now) for i, k in keys],
        )
        write_replace(str(self.path.parent), self.path.name, msgspec.json.encode(doc))
        self._stamp = None
        self._keys = keys
        self._load()

    def wrap(self, key: bytes, context: bytes) -> bytes:
        """``key`` encrypted under the current master key (AES-256-GCM), bound to ``context``."""
        with self._lock:
            self._load()
            key_id, master = self._keys[-1]
        nonce = os.urandom(_NONCE)
        sealed = _aead()(master).encrypt(nonce, key, _WRAP_MAGIC + key_id + context)
        return _WRAP_MAGIC + key_id + nonce + sealed

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """The key in ``wrapped``; :class:`KeyUnavailableError` for a wrong or unknown key."""
        head = len(_WRAP_MAGIC) + _ID_LEN
        if len(wrapped) < head + _NONCE + 16 or not wrapped.startswith(_WRAP_MAGIC):
            raise KeyUnavailableError("a key record", "not a wrapped key")
        key_id = wrapped[len(_WRAP_MAGIC) : head]
        master = self._find(key_id)
        if master is None:
            raise KeyUnavailableError(
                "a key record", f"wrapped by master key {key_id.hex()}, which {self.path} lacks"
            )
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(
                _aead()(master).decrypt(
                    wrapped[head : head + _NONCE],
                    wrapped[head + _NONCE :],
                    _WRAP_MAGIC + key_id + context,
                )
            )
        except InvalidTag as exc:
            raise KeyUnavailableError(
                "a key record", "it does not open with the master key (wrong key or damaged)"
            ) from exc

    def _find(self, key_id: bytes) -> bytes | None:
        with self._lock:
            for attempt in range(2):
                for i, k in self._keys:
                    if i == key_id:
                        return k
                if attempt == 0:
                    self._stamp = None  # another process may have rotated: re-read
                    self._load()
        return None

    def is_current(self, wrapped: bytes) -> bool:
        """Whether ``wrapped`` names the current master key."""
        with self._lock:
            self._load()
            return wrapped[len(_WRAP_MAGIC) : len(_WRAP_MAGIC) + _ID_LEN] == self._keys[-1][0]

    def rotate(self) -> None:
        """Append a new master key and make it current (the old ones still unwrap)."""
        with self._lock:
            self._stamp = None
            self._load()
            fresh = (os.urandom(_ID_LEN), _aead().generate_key(bit_length=256))
            self._save([*self._keys, fresh])

    def retire(self) -> None:
        """Keep only the current master key (and remove what a process killed while it
        replaced the file left beside it: such a temporary holds the keys retired here)."""
        with self._lock:
            self._stamp = None
            self._load()
            if len(self._keys) > 1:
                self._save(self._keys[-1:])
            _remove_dead_temporaries(self.path)

    def key_ids(self) -> list[str]:
        """The ids of the master keys held, oldest first (the last is current)."""
        with self._lock:
            self._load()
            return [i.hex() for i, _ in self._keys]


def _remove_dead_temporaries(path: Path) -> None:
    """Remove the temporaries of ``path`` (``.<name>.<pid>.<random>.tmp``, see
    ``write_temp_beside``) whose writing process is gone: one killed between writing its
    temporary and renaming it. A live process's (its replace may be in flight) is left."""
    prefix = f".{path.name}."
    removed = False
    try:
        entries = list(os.scandir(path.parent))
    except FileNotFoundError:
        return
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix) :].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
            removed = True
    if removed:
        fsync_dir(str(path.parent))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@runtime_checkable
class KeyStore(Protocol):
    """Where the wrapped key records of sessions live (outside the logs)."""

    def get(self, session_id: str) -> bytes | None:
        """The record of ``session_id`` (None if there is none)."""
        ...

    def put(self, session_id: str, record: bytes) -> None:
        """Replace the record of ``session_id`` atomically and durably."""
        ...

    def remove(self, session_id: str) -> None:
        """Remove the record of ``session_id`` (durably) if it exists."""
        ...

    def ids(self) -> list[str]:
        """The session ids that have a record."""
        ...

    def locked(self) -> AbstractContextManager[None]:
        """Hold the store's exclusive lock (across processes) for a read-modify-write."""
        ...


class MemoryKeyStore:
    """Key records in memory (the default of :class:`MemoryStore`)."""

    def __init__(self) -> None:
        self._records: dict[str, bytes] = {}
        self._lock = threading.RLock()

    def get(self, session_id: str) -> bytes | None:
        """The record of ``session_id``."""
        return self._records.get(session_id)

    def put(self, session_id: str, record: bytes) -> None:
        """Replace the record of ``session_id``."""
        self._records[check_session_id(session_id)] = bytes(record)

    def remove(self, session_id: str) -> None:
        """Remove the record of ``session_id``."""
        self._records.pop(session_id, None)

    def ids(self) -> list[str]:
        """Every session id with a record."""
        return sorted(self._records)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The store's lock (in-process)."""
        with self._lock:
            yield


class FileKeyStore:
    """Key records as ``<session id>.key`` files in ``directory`` (0700, created on first write)."""

    def __init__(self, directory: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.directory = Path(directory).expanduser()
        self.durable = durable
        self._lock = threading.RLock()
        if os.path.islink(str(self.directory)):
            raise UnsafePathError(str(self.directory), "the key directory is a symlink")

    def _ensure(self) -> None:
        path = str(self.directory)
        if os.path.islink(path):
            raise UnsafePathError(path, "the key directory is a symlink")
        if not os.path.isdir(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)
            if self.durable:
                fsync_dir(str(self.directory.parent))

    def __repr__(self) -> str:
        return f"FileKeyStore({str(self.directory)!r})"

    def _path(self, session_id: str) -> str:
        return str(self.directory / (check_session_id(session_id) + _RECORD_SUFFIX))

    def get(self, session_id: str) -> bytes | None:
        """The record file of ``session_id``."""
        return read_private(self._path(session_id))

    def put(self, session_id: str, record: bytes) -> None:
        """Replace the record file crash-safely."""
        check_session_id(session_id)
        self._ensure()
        write_replace(
            str(self.directory), session_id + _RECORD_SUFFIX, record, durable=self.durable
        )

    def remove(self, session_id: str) -> None:
        """Unlink the record file (and fsync the directory)."""
        try:
            os.unlink(self._path(session_id))
        except FileNotFoundError:
            return
        if self.durable:
            fsync_dir(str(self.directory))

    def ids(self) -> list[str]:
        """Every session id with a record file."""
        out: list[str] = []
        if not self.directory.is_dir():
            return out
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(_RECORD_SUFFIX) and entry.is_file(follow_symlinks=False):
                stem = name[: -len(_RECORD_SUFFIX)]
                if _SESSION_ID.fullmatch(stem):
                    out.append(stem)
        return sorted(out)

    def _clean_temporaries(self) -> None:
        for entry in os.scandir(self.directory):
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """``flock`` on ``.lock`` in the directory; stale temporaries are removed under it."""
        with self._lock:
            self._ensure()
            fd = os.open(
                str(self.directory / ".lock"),
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                0o600,
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._clean_temporaries()
                yield
            finally:
                os.close(fd)

"""The file store's trash: ``<root>/.trash/<entry id>/`` holds a trashed session's files.

Each entry directory (0700) holds the log, its snapshot and quarantine as they were, and
``entry.json`` naming the key, when and why. Moves are renames within one filesystem, so a
session is either in the store or in the trash, never half in each.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from datetime import datetime
from pathlib import Path

import msgspec

from ._errors import UnsafePathError
from ._filestore import read_file
from ._lifecycle import TrashEntry
from ._safeio import fsync_dir

TRASH_DIR = ".trash"
ENTRY_FILE = "entry.json"


class _EntryRecord(msgspec.Struct, frozen=True):
    key: str
    deleted_at: datetime
    reason: str
    files: list[str]


def trash_root(root: Path) -> Path:
    """The trash folder of a store root."""
    return root / TRASH_DIR


def move_to_trash(
    root: Path, key: str, files: list[Path], entry_id: str, reason: str, deleted_at: datetime
) -> str:
    """Move ``files`` (those that exist) into a new trash entry; return its directory."""
    base = trash_root(root)
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    if not stat.S_ISDIR(os.lstat(base).st_mode):  # a symlink there must not carry files away
        raise UnsafePathError(str(base), "the trash is not a directory of this store")
    entry_dir = base / entry_id
    os.mkdir(entry_dir, 0o700)
    present = [f for f in files if os.path.lexists(f)]
    record = _EntryRecord(
        key=key, deleted_at=deleted_at, reason=reason, files=[f.name for f in present]
    )
    fd = os.open(
        entry_dir / ENTRY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
    )
    try:
        os.write(fd, msgspec.json.encode(record))
        os.fsync(fd)
    finally:
        os.close(fd)
    for f in present:
        os.rename(f, entry_dir / f.name)
    fsync_dir(str(entry_dir))
    fsync_dir(str(root))
    return str(entry_dir)


def list_entries(root: Path) -> list[TrashEntry]:
    """Every readable trash entry."""
    base = trash_root(root)
    if not base.is_dir() or base.is_symlink():
        return []
    out = []
    for entry in os.scandir(base):
        if not entry.is_dir(follow_symlinks=False):
            continue
        data = read_file(os.path.join(entry.path, ENTRY_FILE))
        if data is None:
            continue
        try:
            record = msgspec.json.decode(data, type=_EntryRecord)
        except msgspec.DecodeError:
            continue
        out.append(TrashEntry(entry.name, record.key, record.deleted_at, record.reason, entry.path))
    return out


def restore_entry(root: Path, entry: TrashEntry) -> None:
    """Move an entry's files back into the store and remove the entry."""
    entry_dir = Path(entry.location)
    data = read_file(str(entry_dir / ENTRY_FILE))
    assert data is not None
    record = msgspec.json.decode(data, type=_EntryRecord)
    for name in record.files:
        target = root / name
        if os.path.lexists(target):
            raise FileExistsError(f"{target} exists; not overwriting it with the trashed copy")
    for name in record.files:
        os.rename(entry_dir / name, root / name)
    fsync_dir(str(root))
    shutil.rmtree(entry_dir)


def purge_entry(entry: TrashEntry) -> None:
    """Remove a trash entry for good (rmtree never follows symlinks)."""
    shutil.rmtree(entry.location)

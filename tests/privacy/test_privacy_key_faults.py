"""A key record or master key file the disk refuses to write: a library error naming the file,
the old record kept, no temporary left, and the store works once the disk is back."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessionledger.eventlog import FileKeyStore, FileStore, LocalKeyFile, StorageError, _safeio


def failing(code: int) -> Callable[..., Any]:
    def fail(*_args: object, **_kwargs: object) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


SID = "0123456789abcdef0123456789abcdef"


def temporaries(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EDQUOT])
def test_a_key_record_the_disk_refuses_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    keys = FileKeyStore(tmp_path / "keys")
    keys.put(SID, b"old record")
    monkeypatch.setattr(_safeio, "_write", failing(code))
    with pytest.raises(StorageError) as info:
        keys.put(SID, b"new record")
    assert info.value.path == str(tmp_path / "keys" / (SID + ".key"))
    assert os.strerror(code) in str(info.value)
    assert keys.get(SID) == b"old record"
    assert temporaries(tmp_path / "keys") == []
    monkeypatch.undo()
    keys.put(SID, b"new record")
    assert keys.get(SID) == b"new record"
    assert oct((tmp_path / "keys" / (SID + ".key")).stat().st_mode & 0o777) == "0o600"


def test_a_new_encrypted_session_on_a_full_disk_fails_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "s", key_provider=LocalKeyFile(tmp_path / "m" / "master.key"))
    with store.session("k") as w:  # the master key file and the key folder exist now
        w.append_message("user", "hello")
    monkeypatch.setattr(_safeio, "_write", failing(errno.ENOSPC))
    with pytest.raises(StorageError):
        store.session("other")
    monkeypatch.undo()
    assert temporaries(tmp_path / "s" / ".keys") == []
    assert not (tmp_path / "s" / "other.jsonl").exists()  # no log without a header is left
    assert sorted(store.keys()) == ["k"] and not store.exists("other")
    with store.session("other") as w:
        w.append_message("user", "the disk is back")
    assert store.load("other").state.messages[0].message["content"] == "the disk is back"

"""The safe reads of whole files: one ``fstat`` each, and what they return when the file
grows while it is read (:mod:`eventlog._safeio`, :func:`eventlog._segfiles.read_whole`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sessionledger.eventlog import FileStore, UnsafePathError
from sessionledger.eventlog._fileio import read_log_file
from sessionledger.eventlog._safeio import (
    open_regular,
    open_regular_stat,
    read_fd,
    read_regular,
)
from sessionledger.eventlog._segfiles import read_whole


@pytest.fixture
def fstats(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every ``os.fstat`` made while the test runs (by descriptor)."""
    calls: list[int] = []
    real = os.fstat

    def counting(fd: int) -> os.stat_result:
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "fstat", counting)
    yield calls


def test_read_regular_makes_one_fstat(tmp_path: Path, fstats: list[int]) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    fstats.clear()  # open() makes its own
    assert read_regular(str(path)) == (10, b"0123456789")
    assert read_regular(str(path), offset=4) == (10, b"456789")
    assert read_regular(str(path), offset=12) == (12, b"")
    assert len(fstats) == 3
    assert read_regular(str(tmp_path / "missing")) is None


def test_open_regular_stat_is_the_fstat_of_what_it_opened(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    fd, st = open_regular_stat(str(path), os.O_RDONLY, action="read")
    try:
        assert (st.st_ino, st.st_size) == (os.fstat(fd).st_ino, 3)
    finally:
        os.close(fd)
    os.symlink(path, tmp_path / "link")
    for opener in (open_regular, open_regular_stat):
        with pytest.raises(UnsafePathError):
            opener(str(tmp_path / "link"), os.O_RDONLY, action="read")
        with pytest.raises(UnsafePathError, match="a directory"):
            opener(str(tmp_path), os.O_RDONLY, action="read")


def test_read_fd_reads_what_was_appended_after_the_size_was_taken(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        with open(path, "ab") as f:
            f.write(b"y" * (1 << 17))
        assert read_fd(fd, 0, size) == b"x" * 10 + b"y" * (1 << 17)
        assert read_fd(fd, 5, size) == b"x" * 5 + b"y" * (1 << 17)
        assert read_fd(fd, 5) == b"x" * 5 + b"y" * (1 << 17)
    finally:
        os.close(fd)


def _read(path: Path, read: Callable[[int], tuple[int, bytes]]) -> tuple[int, bytes] | None:
    return read_log_file(str(path), read)


def test_read_whole_makes_one_fstat_after_the_open(tmp_path: Path, fstats: list[int]) -> None:
    store = FileStore(tmp_path / "s", durability="none", segment_bytes=0)
    with store.session("k") as w:
        w.append_message("user", "x")
    data = store.read_bytes("k")
    path = store.path_for("k")
    root, stem = str(store.root), path.name[: -len(".jsonl")]
    fstats.clear()
    assert _read(path, lambda fd: read_whole(root, stem, fd)) == (len(data), data)
    assert len(fstats) == 2  # the open's (a regular file?) and read_whole's (its size)
    assert _read(path, lambda fd: read_whole(root, stem, fd, 5)) == (len(data), data[5:])
    over = len(data) + 3
    assert _read(path, lambda fd: read_whole(root, stem, fd, over)) == (len(data), b"")
    store.close()

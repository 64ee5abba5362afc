"""A message kept from a read does not keep the whole log buffer alive (bodies own their bytes)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionledger import replay
from sessionledger.eventlog import Event, FileStore, SessionState, decode_log


def _store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "s", durability="none")
    writer = store.session("k")
    for _ in range(400):
        writer.append_message("user", "x" * 5000)  # a 2 MB log
    store.close()
    return FileStore(tmp_path / "s", durability="none")


def _last_of_decode(store: FileStore) -> object:
    events: list[Event] = decode_log(store.read_bytes("k")).events
    return events[-1]


def _last_of(read: Callable[[FileStore], SessionState]) -> Callable[[FileStore], object]:
    return lambda store: read(store).messages[-1]


@pytest.mark.parametrize(
    "keep",
    [
        _last_of_decode,
        _last_of(lambda store: store.load("k", snapshot=False).state),
        _last_of(lambda store: replay.state_at(store, "k", seq=300)),
    ],
    ids=["decode_log", "load", "state_at"],
)
def test_one_kept_message_keeps_only_its_own_bytes(
    tmp_path: Path, keep: Callable[[FileStore], object]
) -> None:
    store = _store(tmp_path)
    tracemalloc.start()
    try:
        kept = keep(store)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept is not None
    assert held < 200_000, f"one message keeps {held} bytes alive (the log is 2 MB)"

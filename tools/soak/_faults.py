"""I/O faults: ENOSPC and EIO at write and at fsync, short writes, on a real file store.

Faults are injected by swapping the two indirections ``eventlog._fileio`` exposes for this
purpose (``_write`` and ``_fsync``), and ``eventlog._safeio._write`` for side files. What each
fault must do (the store's documented contract):

- a failed write, or a short write followed by a failure, raises ``StorageError`` (action
  ``append``); the log is byte for byte what it was (the partial line is cut back), the writer's
  seq did not move, and retrying the same event once the disk is back writes it once;
- a short write that the next ``write`` call completes is not an error: the line is whole;
- a failed fsync under ``"always"`` raises ``StorageError`` (action ``fsync``), cuts the line
  back and leaves the writer usable;
- a failed fsync under ``"batch"`` (and a failed ``flush()`` under any mode) poisons the writer:
  this append and every later one raise ``StorageError(durable_unknown=True)``, because the
  kernel may have dropped the dirty pages. The line stays in the file; closing releases the lock
  (raising the same error) and reopening continues from what is on disk, where retrying the
  event's id is a no-op returning its seq.

After every fault the log decodes with no bad line and no torn tail.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessionledger.eventlog import (
    FileStore,
    SessionWriter,
    StorageError,
    _fileio,
    _safeio,
    decode_log,
)

from ._checks import ClaimFailed, check_acknowledged, claim

WriteFn = Callable[..., int]
SyncFn = Callable[..., None]

WRITE_FAULTS = ("enospc-write", "eio-write", "short-then-enospc", "zero-write", "short-resumes")
SYNC_FAULTS = ("enospc-fsync", "eio-fsync")
FAULTS = WRITE_FAULTS + SYNC_FAULTS


@contextlib.contextmanager
def inject(*, write: WriteFn | None = None, fsync: SyncFn | None = None) -> Iterator[None]:
    """Replace the file store's ``write``/``fsync`` for the duration (process-wide)."""
    saved = (_fileio._write, _fileio._fsync)
    if write is not None:
        setattr(_fileio, "_write", write)  # noqa: B010 - the module's own indirection
    if fsync is not None:
        setattr(_fileio, "_fsync", fsync)  # noqa: B010
    try:
        yield
    finally:
        setattr(_fileio, "_write", saved[0])  # noqa: B010
        setattr(_fileio, "_fsync", saved[1])  # noqa: B010


@contextlib.contextmanager
def inject_side(write: WriteFn) -> Iterator[None]:
    """Replace the ``write`` of side files (quarantine, trash entries, snapshots, catalog)."""
    saved = _safeio._write
    setattr(_safeio, "_write", write)  # noqa: B010 - the module's own indirection
    try:
        yield
    finally:
        setattr(_safeio, "_write", saved)  # noqa: B010


def failing(code: int) -> Callable[..., Any]:
    """A write or fsync that fails with ``code``."""

    def fail(*_args: object) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


def short_write(then: int | None) -> WriteFn:
    """Write half of the first buffer; then fail with ``then`` (or, if None, write normally)."""
    calls = [0]

    def write(fd: int, data: memoryview) -> int:
        calls[0] += 1
        if calls[0] == 1:
            return os.write(fd, data[: max(1, len(data) // 2)])
        if then is not None:
            raise OSError(then, os.strerror(then))
        return os.write(fd, data)

    return write


def fault_functions(kind: str) -> tuple[WriteFn | None, SyncFn | None]:
    """The ``write`` and ``fsync`` replacements for a fault kind in :data:`FAULTS`."""
    table: dict[str, tuple[WriteFn | None, SyncFn | None]] = {
        "enospc-write": (failing(errno.ENOSPC), None),
        "eio-write": (failing(errno.EIO), None),
        "short-then-enospc": (short_write(errno.ENOSPC), None),
        "zero-write": (lambda _fd, _data: 0, None),
        "short-resumes": (short_write(None), None),
        "enospc-fsync": (None, failing(errno.ENOSPC)),
        "eio-fsync": (None, failing(errno.EIO)),
    }
    return table[kind]


@dataclass(slots=True)
class FaultFigures:
    """What the fault rounds did."""

    injected: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    refused_cleanly: int = 0
    poisoned_and_reopened: int = 0
    retried_ok: int = 0
    lost: int = 0
    seconds: float = 0.0


def _clean(store: FileStore, key: str) -> bytes:
    data = store.read_bytes(key)
    decoded = decode_log(data, key=store.hash_key)
    claim(
        decoded.bad is None and decoded.torn is None,
        f"{key}: the log is not clean: {decoded.bad or decoded.torn}",
    )
    claim(data.endswith(b"\n"), f"{key}: the log ends in a partial line")
    return data


def fault_round(
    store: FileStore, writer: SessionWriter, kind: str, event_id: str, figures: FaultFigures
) -> SessionWriter:
    """Inject ``kind`` into one append by ``writer``, check the contract; return the writer to
    use next (a reopened one when the fault poisoned this one)."""
    key, mode = writer.key, store.durability
    before, seq = _clean(store, key), writer.seq
    write, fsync = fault_functions(kind)
    figures.injected += 1
    figures.by_kind[kind] = figures.by_kind.get(kind, 0) + 1
    flush = kind in SYNC_FAULTS and mode == "none"  # "none" syncs only on flush()
    raised: StorageError | None = None
    with inject(write=write, fsync=fsync):
        try:
            got = writer.append_message("user", f"fault {kind}", id=event_id)
            if flush:
                writer.flush()
        except StorageError as exc:
            raised = exc
    if kind == "short-resumes":
        claim(raised is None and got == seq + 1, f"{key}: a resumed short write failed: {raised}")
        _clean(store, key)
        figures.retried_ok += 1
        return writer
    claim(raised is not None, f"{key}: {kind} under {mode!r} raised nothing")
    assert raised is not None
    poisons = kind in SYNC_FAULTS and mode != "always"
    if not poisons:
        claim(
            raised.action in ("append", "fsync") and not raised.durable_unknown,
            f"{key}: {kind}: {raised!r}",
        )
        claim(store.read_bytes(key) == before, f"{key}: {kind} under {mode!r} changed the log")
        claim(writer.seq == seq, f"{key}: {kind}: the writer's seq moved to {writer.seq}")
        figures.refused_cleanly += 1
    else:
        claim(
            raised.durable_unknown,
            f"{key}: a failed fsync under {mode!r} did not poison: {raised!r}",
        )
        with contextlib.suppress(StorageError):
            writer.append_message("user", "after a failed fsync")
            raise ClaimFailed(f"{key}: a poisoned writer accepted an append")
        with contextlib.suppress(StorageError):
            writer.close()  # raises the same error, but releases the lock
        claim(writer.closed, f"{key}: close of a poisoned writer did not release it")
        _clean(store, key)
        writer = store.session(key)
        claim(writer.seq == seq + 1, f"{key}: reopened at seq {writer.seq}, not {seq + 1}")
        figures.poisoned_and_reopened += 1
    again = writer.append_message("user", f"fault {kind}", id=event_id)
    claim(again == seq + 1, f"{key}: the retry after {kind} got seq {again}, not {seq + 1}")
    _clean(store, key)
    figures.retried_ok += 1
    return writer


def run_faults(root: Path, count: int, *, seed: int = 0) -> FaultFigures:
    """``count`` injected faults spread over the three durability modes and fault kinds."""
    rng = random.Random(seed)
    figures = FaultFigures()
    started = time.perf_counter()
    stores = {m: FileStore(root, durability=m) for m in ("always", "batch", "none")}
    writers = {m: s.session(f"faults:{m}:{seed}") for m, s in stores.items()}
    acked: dict[str, dict[str, int]] = {m: {} for m in stores}
    for n in range(count):
        mode = rng.choice(tuple(stores))
        kind = FAULTS[n % len(FAULTS)] if n < len(FAULTS) * 3 else rng.choice(FAULTS)
        writer = writers[mode] = fault_round(
            stores[mode], writers[mode], kind, f"{seed}.{n}", figures
        )
        acked[mode][f"{seed}.{n}"] = writer.seq
        for i in range(rng.randrange(3)):
            acked[mode][f"{seed}.{n}.{i}"] = writer.append_message(
                "assistant", "between faults", id=f"{seed}.{n}.{i}"
            )
    for mode, writer in writers.items():
        writer.close()
        check_acknowledged(stores[mode], writer.key, acked[mode])
        stores[mode].close()
    figures.seconds = time.perf_counter() - started
    return figures

"""Hostile files and values: non-regular files at every path, values JSON cannot carry, a full
disk while writing side files, forged lines in a keyed store.

Claims checked:

- a FIFO, directory, socket or symlink at a log, snapshot, quarantine, catalog, trash entry or
  staging path never hangs an operation, and every error is the library's own;
- a value is either refused with ``InvalidEventError`` (and nothing written) or read back equal:
  the live state equals the state reopened from disk;
- ``ENOSPC`` while quarantining, trashing (cleanup) or writing a snapshot gives a
  ``StorageError`` (or a cleanup problem), leaves no empty or temporary file, and the same
  operation succeeds once the disk is back, losing nothing;
- in a keyed store, forged lines after a genuine header never reach the catalog's title or
  preview nor a loaded state (``load`` refuses them, or reports one forged last line as a
  torn tail), and ``verify`` reports them.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from sessionledger import projections, replay
from sessionledger.eventlog import (
    CorruptLogError,
    EventLogError,
    FileStore,
    InvalidEventError,
    MessageAppended,
    StorageError,
)
from sessionledger.eventlog.codec import encode_lines

from ._checks import claim
from ._faults import failing, inject_side

KINDS = ("fifo", "directory", "socket", "symlink")


@dataclass(slots=True)
class HostileFigures:
    """What the hostile scenarios did."""

    files_planted: int = 0
    operations: int = 0
    refused_cleanly: int = 0
    values_tried: int = 0
    values_refused: int = 0
    values_read_back_equal: int = 0
    disk_full: dict[str, int] = field(default_factory=dict)
    forged_logs: int = 0
    forged_caught: int = 0
    seconds: float = 0.0


def _deadline(op: Callable[[], object], what: str, seconds: float = 10.0) -> BaseException | None:
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            op()
            outcome.append(None)
        except BaseException as exc:  # handed to the claim below
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    claim(not thread.is_alive(), f"{what} hangs")
    error = outcome[0]
    claim(
        error is None or isinstance(error, EventLogError),
        f"{what} raised {type(error).__name__}: {error}",
    )
    return error


def _plant(path: Path, kind: str, sockets: list[socket.socket]) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        return
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sockets.append(sock)
        short = tempfile.mkdtemp(prefix="sl")
        sock.bind(os.path.join(short, "s"))
        os.rename(os.path.join(short, "s"), path)
        os.rmdir(short)
    else:
        target = path.with_name(path.name + ".elsewhere")
        os.mkfifo(target)
        path.symlink_to(target)


def _files_round(root: Path, rng: random.Random, figures: HostileFigures) -> None:
    store = FileStore(root, durability="none")
    for key in ("a", "b", "c"):
        with store.session(key) as w:
            w.append_message("user", f"hello {key}")
    store.cleanup(0, state="idle")  # nothing is idle: no-op, but creates the trash lock
    with store.session("t") as w:
        w.append_message("user", "to trash")
    store.cleanup(0, state="active", now=datetime(2100, 1, 1, tzinfo=UTC))
    entries = list((root / ".trash").glob("*/entry.json"))
    with open(store.path_for("b"), "ab") as f:
        f.write(b'{"torn')
    targets = [
        store.path_for("a"),
        store.path_for("new"),
        store.snapshot_path("b"),
        store.quarantine_path("b"),
        root / ".catalog",
        *entries,
    ]
    sockets: list[socket.socket] = []
    try:
        for path in rng.sample(targets, k=min(3, len(targets))):
            _plant(path, rng.choice(KINDS), sockets)
            figures.files_planted += 1
        ops: list[tuple[str, Callable[[], object]]] = [
            ("keys", store.keys),
            ("exists", lambda: store.exists("a")),
            ("load", lambda: store.load("a")),
            ("session", lambda: store.session("b")),
            ("new session", lambda: store.session("new")),
            ("list_sessions", lambda: projections.list_sessions(store)),
            ("verify", lambda: replay.verify(store)),
            ("recover", lambda: replay.recover(store)),
            ("trash", store.trash),
            ("restore", lambda: [store.restore(e.id) for e in store.trash()]),
            ("mark_idle", lambda: store.mark_idle(0)),
            ("latest_session", lambda: store.latest_session("")),
            ("snapshot", lambda: projections.write_snapshot(store, "c")),
            ("cleanup", lambda: store.cleanup(0)),
        ]
        for name, op in ops:
            figures.operations += 1
            if _deadline(op, f"{name} with non-regular files at {root}") is not None:
                figures.refused_cleanly += 1
    finally:
        store.close()
        for sock in sockets:
            sock.close()


def _value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth > 0 and roll < 0.25:
        return [_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if depth > 0 and roll < 0.45:
        return {rng.choice(["a", "b", "ключ", ""]): _value(rng, depth - 1) for _ in range(2)}
    choices: list[Any] = [
        None,
        True,
        rng.randint(-(2**70), 2**70),
        rng.random() * 1e300,
        -0.0,
        "text \u2028 \x00 \U0001f338",
        b"bytes",
        {1, 2},
        (1, 2),
        math.nan,
        math.inf,
        {3: "int key"},
        datetime.now(UTC),
        "\ud800",
    ]
    return rng.choice(choices)


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _values_round(root: Path, rng: random.Random, figures: HostileFigures, writes: int) -> None:
    store = FileStore(root, durability="none")
    writer = store.session("v")
    refused = 0
    for _ in range(writes):
        value = _deep(rng.choice([1, 63, 64, 65, 990, 5000])) if rng.random() < 0.2 else None
        if value is None:
            value = _value(rng, rng.randint(0, 4))
        before = store.read_bytes("v")
        figures.values_tried += 1
        try:
            if rng.random() < 0.5:
                writer.append_message("user", value)
            else:
                writer.update_metadata(set={"field": value})
        except InvalidEventError:
            refused += 1
            claim(store.read_bytes("v") == before, "a refused value wrote something")
    live = writer.state.copy()
    store.close()
    reopened = FileStore(root, durability="none").load("v", snapshot=False).state
    claim(
        msgspec.json.encode(reopened.message_dicts) == msgspec.json.encode(live.message_dicts)
        and reopened.message_dicts == live.message_dicts
        and reopened.metadata == live.metadata,
        f"{root}: the live state differs from the state reopened from disk",
    )
    figures.values_refused += refused
    figures.values_read_back_equal += writes - refused


def _leftovers(root: Path) -> list[str]:
    bad = [
        str(p)
        for p in root.rglob("*")
        if p.is_file() and ((p.stat().st_size == 0 and p.name != ".lock") or p.suffix == ".tmp")
    ]
    trash = root / ".trash"
    if trash.is_dir():
        bad += [str(d) for d in trash.iterdir() if d.is_dir() and not (d / "entry.json").exists()]
    return bad


def _disk_full_round(root: Path, rng: random.Random, figures: HostileFigures) -> None:
    store = FileStore(root, durability="none")
    with store.session("k") as w:
        for i in range(5):
            w.append_message("user", f"m{i}")
    kind = rng.choice(["quarantine", "cleanup", "snapshot"])
    figures.disk_full[kind] = figures.disk_full.get(kind, 0) + 1
    code = rng.choice([errno.ENOSPC, errno.EIO])
    if kind == "quarantine":
        with open(store.path_for("k"), "ab") as f:
            f.write(b'{"torn tail')
        with inject_side(failing(code)):
            try:
                store.session("k")
                claim(False, "a quarantine on a full disk succeeded")
            except StorageError:
                pass
        claim(not _leftovers(root), f"quarantine on a full disk left {_leftovers(root)}")
        writer = store.session("k")  # the disk is back
        claim(len(writer.state.messages) == 5, "a message was lost after a full disk")
        writer.close()
    elif kind == "cleanup":
        with inject_side(failing(code)):
            report = store.cleanup(0)
        claim(report.trashed == [] and "k" in report.problems, "cleanup hid a full disk")
        claim(not _leftovers(root), f"cleanup on a full disk left {_leftovers(root)}")
        claim(len(store.load("k").state.messages) == 5, "cleanup on a full disk lost messages")
        claim(store.cleanup(0).trashed == ["k"], "cleanup failed once the disk was back")
        (entry,) = store.trash()
        store.restore(entry.id)
    else:
        with inject_side(failing(code)):
            try:
                projections.write_snapshot(store, "k")
                claim(False, "a snapshot on a full disk succeeded")
            except StorageError:
                pass
        claim(not _leftovers(root), f"a snapshot on a full disk left {_leftovers(root)}")
        projections.write_snapshot(store, "k")
    claim(len(store.load("k").state.messages) == 5, f"{kind} on a full disk lost messages")
    store.close()


def _forged_round(root: Path, rng: random.Random, figures: HostileFigures) -> None:
    secret = "soak-secret"
    store = FileStore(root, durability="none", hash_key=secret)
    with store.session("k", metadata={"title": "genuine"}) as w:
        for i in range(rng.randint(0, 4)):
            w.append_message("user", f"genuine {i}")
    projections.list_sessions(store)
    data = store.read_bytes("k")
    lines = data.splitlines(keepends=True)
    keep = rng.randint(1, len(lines))
    prev = msgspec.json.decode(lines[keep - 1])["h"]
    now = datetime.now(UTC)
    forged = [
        MessageAppended.of(
            seq=keep + i, ts=now, id=f"f{i}", message={"role": "user", "content": "FORGED"}
        )
        for i in range(rng.randint(1, 3))
    ]
    tail, _ = encode_lines(forged, prev_h=prev, key=rng.choice([b"", b"a guess"]))
    store.path_for("k").write_bytes(b"".join(lines[:keep]) + tail)
    figures.forged_logs += 1
    fresh = FileStore(root, durability="none", hash_key=secret)
    for candidate in (store, fresh):
        for row in projections.list_sessions(candidate):
            claim("FORGED" not in row.preview + row.title, "the catalog lists forged content")
    try:  # one bad last line is a torn tail: reported, and left out of the state
        loaded = fresh.load("k")
        claim(loaded.torn is not None, "load read forged lines without a word")
        claim(
            all(m.get("content") != "FORGED" for m in loaded.state.message_dicts),
            "load folded forged lines",
        )
    except CorruptLogError:
        pass
    claim(not replay.verify(fresh).ok, "verify missed forged lines")
    figures.forged_caught += 1


def run_hostile(root: Path, rounds: int, *, seed: int = 0) -> HostileFigures:
    """``rounds`` of each hostile scenario."""
    logging.getLogger("sessionledger").setLevel(logging.ERROR)
    started = time.perf_counter()
    figures = HostileFigures()
    for n in range(rounds):
        rng = random.Random(seed + n)
        _files_round(root / f"files-{n}", rng, figures)
        _values_round(root / f"values-{n}", rng, figures, writes=40)
        _disk_full_round(root / f"full-{n}", rng, figures)
        _forged_round(root / f"forged-{n}", rng, figures)
    figures.seconds = round(time.perf_counter() - started, 2)
    return figures

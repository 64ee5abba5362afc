"""Dying as kill -9 would, at a chosen point, for the crash tests (run in a forked child).

Each function arms the child: the store's own indirections (``_safeio._write``,
``_segfiles._step``) are replaced so that the process kills itself with SIGKILL there, leaving
on disk exactly what a real kill at that point leaves.
"""

from __future__ import annotations

import os
import signal
from typing import Any, NoReturn

from sessionledger.eventlog import _safeio, _segfiles


def die() -> NoReturn:
    """Kill this process with SIGKILL (no cleanup, no atexit, no flush)."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def die_half_way_through_a_write() -> None:
    """The next side-file write (a view, the catalog, a snapshot) writes half its bytes, then
    this process dies."""

    def half_then_die(fd: int, data: Any) -> int:
        os.write(fd, bytes(data[: max(1, len(data) // 2)]))
        die()

    _safeio._write = half_then_die


def die_at_roll_step(step: str) -> None:
    """The next segment roll kills this process at ``step`` (a name ``_segfiles`` reports)."""

    def at(name: str) -> None:
        if name == step:
            die()

    _segfiles._step = at

"""The agent loop the adapter benchmark times: add a message, save; ours and nanobot's.

A session is filled to the size and saved (not timed), then the loop
``session.add_message(...); manager.save(session)`` (optionally ``save(session, fsync=True)``)
runs for a number of iterations; a run's figure is the mean time per message. The "adapter"
benchmark of ``python -m sessionledger.tools.bench`` alternates ours and nanobot's run by run.
"""

from __future__ import annotations

import gc
import importlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "agents",
    "plan",
    "trips",
    "to",
    "kyoto",
]


def content(i: int, size: int = 1_400) -> str:
    """About ``size`` characters of text, different for every ``i`` (a typical chat message)."""
    words: list[str] = []
    total = 0
    j = i
    while total < size:
        word = _WORDS[j % len(_WORDS)]
        words.append(word)
        total += len(word) + 1
        j = j * 31 + 7
    return f"#{i} " + " ".join(words)


def filled(n: int) -> list[dict[str, Any]]:
    """``n`` messages, alternating user and assistant, with nanobot-style timestamps."""
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": content(i),
            "timestamp": f"2026-11-25T10:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i:06d}",
        }
        for i in range(n)
    ]


class _SessionLike(Protocol):
    messages: list[dict[str, Any]]

    def add_message(self, role: str, content: str, **kwargs: Any) -> None: ...


class _ManagerLike(Protocol):
    def get_or_create(self, key: str) -> Any: ...

    def save(self, session: Any, *, fsync: bool = False) -> None: ...


@dataclass(slots=True)
class Side:
    """One implementation: how to make a manager in a workspace, and how to tidy it."""

    name: str
    make: Callable[[Path], _ManagerLike]
    close: Callable[[_ManagerLike], None]


def run_once(side: Side, root: Path, size: int, iterations: int, fsync: bool) -> float:
    """Seconds per message for ``iterations`` add+save at a session of ``size`` messages."""
    workspace = Path(tempfile.mkdtemp(prefix=f"{side.name}-", dir=root))
    manager = side.make(workspace)
    try:
        session = manager.get_or_create("telegram:42")
        session.messages.extend(filled(size))
        manager.save(session, fsync=True)
        texts = [content(size + i) for i in range(iterations)]
        gc.collect()
        start = time.perf_counter()
        for i, text in enumerate(texts):
            session.add_message("user" if i % 2 == 0 else "assistant", text)
            manager.save(session, fsync=fsync)
        elapsed = time.perf_counter() - start
    finally:
        side.close(manager)
        shutil.rmtree(workspace, ignore_errors=True)
    return elapsed / iterations


def ours(*, views: bool = True) -> Side:
    """This library's drop-in (with or without its nanobot-format views)."""
    from sessionledger.tools.nanobot import SessionManager

    def make(workspace: Path) -> _ManagerLike:
        return SessionManager(workspace, views=views)

    def close(manager: _ManagerLike) -> None:
        assert isinstance(manager, SessionManager)
        manager.close()

    return Side("ours" if views else "ours-noviews", make, close)


def nanobot() -> Side | None:
    """nanobot-ai's SessionManager, or None when it is not installed in this interpreter."""
    try:
        from nanobot.session.manager import SessionManager

        loguru = importlib.import_module("loguru")
    except ImportError:
        return None
    loguru.logger.remove()  # its per-save log lines would be timed too

    def make(workspace: Path) -> _ManagerLike:
        return SessionManager(workspace)  # type: ignore[no-any-return]

    return Side("nanobot", make, lambda manager: None)


def fsync_floor(root: Path, iterations: int = 200) -> float:
    """Median seconds of one raw ``write`` + ``fdatasync`` of a 1.5 KB line on this disk."""
    fd, name = tempfile.mkstemp(dir=root)
    line = b"x" * 1_500 + b"\n"
    times: list[float] = []
    try:
        for _ in range(iterations):
            start = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(name)
    return statistics.median(times)

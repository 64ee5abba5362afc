"""A real headless browser (the system's Chromium, driven by Playwright) and a real viewer server.

Tests that need a browser skip, saying how to install one, when none is found.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessionledger.tools.web.measure import serving

INSTALL = (
    "no Chromium found for the browser tests: install one with "
    "`apt-get update && apt-get install -y chromium` (Debian/Ubuntu), or set "
    "SESSIONLEDGER_CHROMIUM to a Chromium/Chrome executable; and pip install '.[test]' for playwright"
)


def chromium_path() -> str | None:
    """The Chromium executable to drive, or None."""
    named = os.environ.get("SESSIONLEDGER_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def viewer(store: Path, *extra: str) -> Iterator[str]:
    """Run ``sessionledger serve`` on ``store`` in its own process; yield its base URL."""
    with serving(store, free_port(), *extra, stderr=subprocess.PIPE, patience=20) as url:
        yield url


def require_browser() -> str:
    """The Chromium path, or skip the test saying how to get one."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip(INSTALL)
    path = chromium_path()
    if path is None:
        pytest.skip(INSTALL)
    return path

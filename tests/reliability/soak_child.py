"""Runs ``python -m sessionledger.tools.soak`` in a child process for the reliability tests (not a test module).

Scenarios that fork (crash, load) run in a fresh single-threaded interpreter: forking the
pytest process, which may hold threads of earlier tests, is not safe. The child forks its own
writers from a warm interpreter, so each kill costs a fork, not an interpreter start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def start_soak(*args: str) -> subprocess.Popen[str]:
    """Start ``python -m sessionledger.tools.soak <args> --json`` in the repository root."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "sessionledger.tools.soak", *args, "--json"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_soak(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """Wait for a soak child; return its figures, failing with its stderr if a claim broke."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"soak child exited {proc.returncode}:\n{err[-4000:]}")
    figures: dict[str, Any] = json.loads(out)
    return figures

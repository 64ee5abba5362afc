"""The SIGTERM example in docs/async.md runs, exits cleanly, and loses no acknowledged append."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessionledger.eventlog import FileStore, decode_log, verify_chain

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "async_sigterm.py"


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_example_flushes_everything(tmp_path: Path, backend: str) -> None:
    root = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), str(root), backend],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    # Signal once every agent has an acknowledged append (its second line is being written
    # only after its first append returned); a fixed sleep was too short on a loaded machine.
    paths = [FileStore(root).path_for(f"chat:{n}") for n in range(4)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(_lines(p) >= 3 for p in paths):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    acked: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    assert sorted(acked) == [f"chat:{n}" for n in range(4)] and min(acked.values()) > 0
    store = FileStore(root)
    for key, seq in acked.items():
        data = store.read_bytes(key)
        decoded = decode_log(data)
        assert decoded.bad is None and decoded.torn is None
        assert verify_chain(data).problems == []
        # Every acknowledged append is in the log; at most the ones in flight follow it.
        assert decoded.events[-1].seq >= seq
        assert [e.seq for e in decoded.events] == list(range(1, decoded.events[-1].seq + 1))

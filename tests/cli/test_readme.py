"""The README's commands and examples work as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.DOTALL)


def test_first_two_commands_are_demo_then_tests() -> None:
    commands = [line for line in _blocks("bash")[0].splitlines() if line.strip()]
    assert commands[0].endswith("sessionledger demo")
    assert "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci, ".ci/run must run the README's test command verbatim"


def test_demo_command_runs(tmp_path: Path) -> None:
    exe = shutil.which("sessionledger", path=os.path.dirname(sys.executable))
    command = [exe, "demo"] if exe else [sys.executable, "-m", "sessionledger.tools", "demo"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "reopened" in done.stdout
    logs = list((tmp_path / "sessions").glob("*.jsonl"))
    assert len(logs) == 1
    assert logs[0].read_bytes().startswith(b'{"type":"header"')


def test_python_examples_run() -> None:
    """Every ```python block runs (```py marks one that needs a server)."""
    for block in _blocks("python"):
        exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})

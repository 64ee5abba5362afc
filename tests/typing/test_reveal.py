"""mypy infers what ``write_api_cases.py`` pins with ``# revealed:`` comments (msgspec's habit).

Each pin is a comment on the line above the ``reveal_type`` call it pins.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")

CASES = Path(__file__).with_name("write_api_cases.py")
_REVEALED = re.compile(r'(\d+): note: Revealed type is "(.*)"')


def _pinned() -> dict[int, str]:
    pins: dict[int, str] = {}
    for number, line in enumerate(CASES.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip().startswith("# revealed: "):
            pins[number + 1] = line.split("# revealed: ", 1)[1].strip()
    return pins


def test_pins_are_present() -> None:
    assert len(_pinned()) >= 10


def test_revealed_types_match_the_pins(tmp_path: Path) -> None:
    stdout, stderr, _ = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path),
            "--hide-error-context",
            "--no-error-summary",
            str(CASES),
        ]
    )
    revealed = {int(m.group(1)): m.group(2).replace("?", "") for m in _REVEALED.finditer(stdout)}
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert errors == [], stdout + stderr
    assert revealed == _pinned()

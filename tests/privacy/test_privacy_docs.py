"""The example in docs/privacy.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"


def test_privacy_doc_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {"__name__": "privacy_doc"})
    assert (tmp_path / "keys" / "master.key").stat().st_mode & 0o777 == 0o600

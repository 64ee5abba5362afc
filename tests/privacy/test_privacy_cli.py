"""The CLI on an encrypted store: show and history mark withheld content, verify needs no key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionledger.eventlog import FileStore, LocalKeyFile
from sessionledger.tools.cli import main


@pytest.fixture
def sealed_store(tmp_path: Path) -> tuple[Path, Path]:
    key_file = tmp_path / "master.key"
    root = tmp_path / "s"
    store = FileStore(root, durability="none", key_provider=LocalKeyFile(key_file))
    s = store.session("telegram:42", metadata={"title": "Trip"})
    s.append_message("user", "hello visible")
    s.append_message("assistant", "Secret-Answer-42")
    s.append_message("user", "bye visible")
    s.close()
    store.redact("telegram:42", 2, by="ops", reason="asked")
    store.close()
    return root, key_file


def test_show_and_history_mark_withheld_content(
    sealed_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, key_file = sealed_store
    assert main(["show", "telegram:42", "--store", str(root), "--key-file", str(key_file)]) == 0
    out = capsys.readouterr().out
    assert "hello visible" in out and "[redacted]" in out
    assert "Secret-Answer-42" not in out
    assert "redacted (key destroyed) by ops:" in out
    assert main(["history", "telegram:42", "--store", str(root), "--key-file", str(key_file)]) == 0
    out = capsys.readouterr().out
    assert "hello visible" in out and "bye visible" in out and "Secret-Answer-42" not in out


def test_verify_without_a_key_and_show_without_one(
    sealed_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = sealed_store
    assert main(["verify", "--store", str(root)]) == 0
    capsys.readouterr()
    assert main(["show", "telegram:42", "--store", str(root)]) == 2
    err = capsys.readouterr().err
    assert "encrypted" in err and "key_provider" in err
    assert main(["show", "telegram:42", "--store", str(root), "--key-file", "/nonexistent"]) == 2
    assert "no master key file" in capsys.readouterr().err


def test_ls_opens_titles_with_the_key_and_marks_them_sealed_without(
    sealed_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, key_file = sealed_store
    assert main(["ls", "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert "telegram:42" in out and "[sealed]" in out and "Trip" not in out
    assert main(["ls", "--store", str(root), "--key-file", str(key_file)]) == 0
    out = capsys.readouterr().out
    assert "Trip" in out and "hello visible" in out and "[sealed]" not in out

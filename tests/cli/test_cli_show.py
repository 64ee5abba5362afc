"""``sessionledger show`` and ``tail``: text, JSON, errors, and no colour in pipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionledger.eventlog import FileStore
from sessionledger.tools.cli import main
from sessionledger.tools.cli._demo import write_conversation

KEY = "telegram:42"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with FileStore(root, durability="none") as store:
        write_conversation(store.session(KEY))
    return root


def test_show_pairs_tool_calls_and_cuts_long_content(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", KEY, "--store", str(store_dir)]) == 0
    out = capsys.readouterr().out
    assert "Kyoto trip" in out
    assert "call web_search(" in out
    assert "└ #5 result" in out  # the tool result is folded under its call
    assert "chars)" in out  # long content is cut with a marker
    assert "last_consolidated -> 2" in out
    assert "\x1b[" not in out  # captured output is not a terminal: no colour codes


def test_show_since_until_by_seq(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["show", KEY, "--store", str(store_dir), "--since", "6", "--until", "8", "--json"])
        == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["seq"] for e in lines] == [6, 7, 8]
    assert lines[0]["type"] == "message"
    assert all(len(e["h"]) == 32 for e in lines)


def test_tail_json(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail", KEY, "--store", str(store_dir), "-n", "2", "--json"]) == 0
    seqs = [json.loads(line)["seq"] for line in capsys.readouterr().out.splitlines()]
    assert seqs == [14, 15]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "nope"], "no session 'nope'"),
        (["show", KEY, "--since", "2026-13"], "--since: '2026-13' is neither a seq"),
        (["tail", KEY, "-n", "-1"], "--lines must be >= 0"),
    ],
)
def test_bad_input_is_one_line_on_stderr(
    store_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    before = {p.name: p.read_bytes() for p in store_dir.iterdir()}
    assert main([*argv, "--store", str(store_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    assert {p.name: p.read_bytes() for p in store_dir.iterdir()} == before


def test_missing_store_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["show", KEY, "--store", str(missing)]) == 2
    assert "no store at" in capsys.readouterr().err
    assert not missing.exists()


def test_a_file_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "f.txt"
    file.write_text("hello")
    assert main(["show", KEY, "--store", str(file)]) == 2
    assert "is not a store" in capsys.readouterr().err
    assert file.read_text() == "hello"

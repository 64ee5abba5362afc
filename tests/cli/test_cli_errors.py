"""Every CLI error is one line on stderr and exit code 2: bad arguments, a store that is a file or
a FIFO, a key file that is a FIFO, a DSN nobody answers. Never a traceback, never a hang."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sessionledger.eventlog import FileStore
from sessionledger.tools.cli import main


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse exits
        code = exc.code  # type: ignore[assignment]
    _, err = capsys.readouterr()
    assert code == 2, (argv, code, err)
    assert err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert "Traceback" not in err and "error:" in err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["ls", "--bogus"],
        ["show"],
        [],
        ["diff", "k", "a", "b"],
        ["export", "--all", "--format", "pdf"],
        ["ls", "--state", "bogus"],
        ["no-such-command"],
    ],
)
def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    err = one_line_error(capsys, *argv)
    assert "--help" in err  # where the usage is


def test_a_store_that_is_a_file_or_a_fifo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    for name in ("file", "fifo"):
        for command in (["ls"], ["verify"], ["show", "k"], ["search", "q"]):
            err = one_line_error(capsys, *command, "--store", str(tmp_path / name))
            assert "is not a store" in err


def test_a_key_file_that_is_a_fifo_does_not_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    FileStore(tmp_path / "s").session("k").append_message("user", "hi")
    os.mkfifo(tmp_path / "master.key", 0o600)
    err = one_line_error(
        capsys,
        "show",
        "k",
        "--store",
        str(tmp_path / "s"),
        "--key-file",
        str(tmp_path / "master.key"),
    )
    assert "not a regular file" in err


def test_a_dsn_nobody_answers(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    err = one_line_error(capsys, "ls", "--store", "postgresql://nobody@127.0.0.1:1/x")
    assert "127.0.0.1:1" in err


def test_serve_on_a_taken_port_is_one_line_before_announcing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("uvicorn", reason="the viewer needs the web extra: pip install '.[web]'")
    FileStore(tmp_path / "s").session("k").append_message("user", "hi")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        err = one_line_error(capsys, "serve", "--store", str(tmp_path / "s"), "--port", str(port))
    assert f"cannot listen on 127.0.0.1:{port}" in err and "viewer" not in err

"""Two nanobot ``SessionManager`` objects on one workspace, in one process and in two.

nanobot 0.2.2 itself does this (its gateway and its CLI commands each make a manager). Both
can get_or_create, save, read_session_file, delete and flush_all every session; a save appends
that manager's changes after the other's events, so neither side is lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sessionledger.tools.nanobot import SessionManager

ROOT = Path(__file__).resolve().parents[2]
KEY = "cli:direct"


def contents(manager: SessionManager, key: str = KEY) -> list[str]:
    data = manager.read_session_file(key)
    assert data is not None
    return [m["content"] for m in data["messages"]]


def test_two_managers_in_one_process(tmp_path: Path) -> None:
    gateway, cli = SessionManager(tmp_path), SessionManager(tmp_path)
    a = gateway.get_or_create(KEY)
    a.add_message("user", "from the gateway")
    gateway.save(a)
    b = cli.get_or_create(KEY)  # sees what the gateway saved
    assert [m["content"] for m in b.messages] == ["from the gateway"]
    b.add_message("user", "from the cli")
    cli.save(b, fsync=True)
    a.add_message("assistant", "gateway reply")
    gateway.save(a)  # appends after the cli's message: nothing of either side is lost
    expected = ["from the gateway", "from the cli", "gateway reply"]
    assert contents(gateway) == contents(cli) == expected
    assert gateway.flush_all() == 1 and cli.flush_all() == 1
    other = cli.get_or_create("cli:other")
    other.add_message("user", "x")
    cli.save(other)
    assert {row["key"] for row in gateway.list_sessions()} == {KEY, "cli:other"}
    assert cli.delete_session(KEY)
    assert gateway.read_session_file(KEY) is None
    a.add_message("user", "the gateway saves after the cli deleted it")
    gateway.save(a)  # like nanobot: the save writes the session again
    assert contents(cli)[-1] == "the gateway saves after the cli deleted it"
    gateway.close()
    cli.close()


CHILD = textwrap.dedent(
    """
    import sys
    from sessionledger.tools.nanobot import SessionManager
    manager = SessionManager(sys.argv[1])
    for i in range(40):
        session = manager.get_or_create("cli:direct")
        session.add_message("user", f"child {i}")
        manager.save(session, fsync=i % 10 == 0)
        assert manager.read_session_file("cli:direct") is not None
    assert manager.flush_all() == 1
    manager.close()
    """
)


def test_two_managers_in_two_processes(tmp_path: Path) -> None:
    manager = SessionManager(tmp_path)
    first = manager.get_or_create(KEY)
    first.add_message("user", "before")
    manager.save(first)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stderr=subprocess.PIPE,
        text=True,
    )
    for i in range(40):
        session = manager.get_or_create(KEY)
        session.add_message("user", f"parent {i}")
        manager.save(session, fsync=i % 10 == 0)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert manager.flush_all() == 1
    fresh = SessionManager(tmp_path)
    got = contents(fresh)
    assert got[0] == "before" and len(got) == 81
    assert [c for c in got if c.startswith("child")] == [f"child {i}" for i in range(40)]
    assert [c for c in got if c.startswith("parent")] == [f"parent {i}" for i in range(40)]
    manager.close()
    fresh.close()

"""Every ``sessionledger`` command through its entry point: text, ``--json`` and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessionledger.eventlog import FileStore
from sessionledger.tools.cli import main
from sessionledger.tools.cli._demo import write_conversation

KEY = "agent:telegram:42"


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with FileStore(root, durability="none") as store:
        write_conversation(store.session(KEY))
        other = store.session("agent:slack:7")
        other.append_message("user", "hello from slack")
        other.append_message("assistant", "hi!")
        store.archive("agent:slack:7")
    return root


def run(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--store", str(store)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ls_table_filters_and_json(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, store_dir, "ls")
    assert code == 0
    assert KEY in out and "Kyoto trip" in out and "2 sessions" in out
    code, out, _ = run(capsys, store_dir, "ls", "--channel", "slack", "--json")
    rows = json.loads(out)
    assert [r["key"] for r in rows] == ["agent:slack:7"]
    assert rows[0]["state"] == "archived"
    code, out, _ = run(capsys, store_dir, "ls", "--state", "active", "--json")
    assert [r["key"] for r in json.loads(out)] == [KEY]


def test_history_with_time_travel(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, store_dir, "history", KEY, "--json")
    now = json.loads(out)
    assert code == 0 and now["seq"] == 15
    assert now["messages"][-1]["content"].startswith("Done: Gion Yoshiima")
    assert now["tokens"] > 0
    code, out, _ = run(capsys, store_dir, "history", KEY, "--at", "5", "--json")
    then = json.loads(out)
    assert then["seq"] == 5
    assert then["messages"][-1]["role"] == "tool"
    code, out, _ = run(capsys, store_dir, "history", KEY, "--timestamps")
    assert "[Message Time:" in out and "tokens" in out


def test_verify_ok_then_tampered(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, store_dir, "verify")
    assert code == 0 and "all verified" in out
    with FileStore(store_dir) as store:
        path = store.path_for(KEY)
    data = path.read_bytes()
    path.write_bytes(data.replace(b"Kyoto in April", b"Osaka in April", 1))
    code, out, _ = run(capsys, store_dir, "verify", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert any("hash" in p["what"] for p in report["problems"])


def test_recover_and_repair(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FileStore(store_dir) as store:
        path = store.path_for(KEY)
    with path.open("ab") as f:
        f.write(b'{"type":"message","seq":16,"ts":"2026')  # a torn tail
    code, out, _ = run(capsys, store_dir, "recover", "--json")
    report = json.loads(out)
    assert code == 0 and report["tails_cut"] == [[KEY, 37]]
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b"Cherry", b"Cheery")
    path.write_bytes(b"".join(lines))
    code, out, _ = run(capsys, store_dir, "repair", KEY)
    assert code == 1 and "line 6" in out and "quarantine" in out
    code, _, _ = run(capsys, store_dir, "verify", KEY)
    assert code == 0


def test_timeline_and_diff(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, store_dir, "timeline", KEY, "--since", "12", "--json")
    entries = json.loads(out)
    assert [e["seq"] for e in entries] == [12, 13, 14, 15]
    assert entries[1]["consolidated"] == [0, 2]
    code, out, _ = run(capsys, store_dir, "diff", KEY, "3", "13")
    assert code == 0 and "+ #5 tool" in out and "last_consolidated 0 -> 2" in out


def test_export_then_import_round_trip(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "exported"
    code, out, _ = run(capsys, store_dir, "export", "--all", "--to", str(out_dir))
    assert code == 0 and "2 sessions" in out
    fresh = tmp_path / "fresh"
    code, out, _ = run(capsys, fresh, "import", str(out_dir))
    assert code == 0 and "2 created" in out
    code, out, _ = run(capsys, fresh, "import", str(out_dir))
    assert code == 0 and "2 unchanged" in out  # importing twice is a no-op
    with FileStore(store_dir) as a, FileStore(fresh) as b:
        assert a.read_bytes(KEY) == b.read_bytes(KEY)


def test_stats(store_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _code, out, _ = run(capsys, store_dir, "stats", "--json")
    stats = json.loads(out)
    assert (stats["total_sessions"], stats["archived_sessions"]) == (2, 1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "--to", "x"], "give one KEY or --all"),
        (["import", "/no/such/path"], "no such file or directory"),
        (["history", KEY, "--at", "noon"], "--at: 'noon' is neither"),
        (["diff", KEY, "3", "99"], "99"),
        (["stats", "--budget", "0"], "--budget must be > 0"),
        (["verify", "nobody"], "no session 'nobody'"),
    ],
)
def test_bad_input(
    store_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    before = {p.name: p.read_bytes() for p in store_dir.iterdir() if p.is_file()}
    code, _out, err = run(capsys, store_dir, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err
    after = {p.name: p.read_bytes() for p in store_dir.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if not k.startswith(".")} == {
        k: v for k, v in before.items() if not k.startswith(".")
    }


def test_tail_follow_sees_another_process(store_dir: Path) -> None:
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools",
            "tail",
            "-f",
            KEY,
            "-n",
            "1",
            "--json",
            "--idle-exit",
            "5",
            "--store",
            str(store_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from eventlog import FileStore\n"
            f"with FileStore({str(store_dir)!r}) as s:\n"
            f"    s.session({KEY!r}).append_message('user', 'live from elsewhere')\n",
        ],
        check=True,
        timeout=30,
    )
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    # -n 1 prints seq 15 when the follower starts first, else the new line already: either
    # way the line appended by the other process is printed once, last.
    events = [json.loads(line) for line in out.splitlines()]
    assert events, f"the follower printed nothing; stderr: {err!r}"
    assert events[-1]["message"]["content"] == "live from elsewhere"
    assert [e["seq"] for e in events] in ([15, 16], [16])


def test_pipe_gets_no_colour(store_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sessionledger.tools", "ls", "--store", str(store_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "\x1b[" not in done.stdout and KEY in done.stdout


def test_bench_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    assert "reopen" in capsys.readouterr().out


def test_commands_on_a_postgres_dsn(
    dsn: str, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from sessionledger.eventlog import PostgresStore

    with PostgresStore(dsn, schema=schema) as store:
        write_conversation(store.session(KEY))
    where = ["--store", dsn, "--schema", schema]
    assert main(["ls", "--json", *where]) == 0
    assert [r["key"] for r in json.loads(capsys.readouterr().out)] == [KEY]
    assert main(["verify", *where]) == 0
    assert "all verified" in capsys.readouterr().out
    assert main(["history", KEY, "--json", *where]) == 0
    assert json.loads(capsys.readouterr().out)["seq"] == 15
    assert main(["show", KEY, *where]) == 0
    assert "└ #5 result" in capsys.readouterr().out


def test_a_dsn_that_does_not_connect(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ls", "--store", "postgresql://nobody@127.0.0.1:1/none"])
    err = capsys.readouterr().err
    assert code == 2 and "127.0.0.1" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_search_and_conversations_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from sessionledger.eventlog import FileStore
    from sessionledger.tools.cli import main

    root = tmp_path / "s"
    with FileStore(root, durability="none") as store:
        s = store.session("agent:telegram:42")
        s.append_message("user", "Plan a trip to Kyoto")
        store.new_session("agent:telegram:42")
        store.session("agent:slack:1").append_message("user", "kyoto too")
    assert main(["search", "kyoto", "--store", str(root), "--channel", "telegram", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert [(h["key"], h["seq"], h["conversation"]) for h in hits] == [("agent:telegram:42", 1, 0)]
    assert main(["search", "kyoto", "--store", str(root), "--since", "2999-01-01"]) == 0
    assert "0 hits" in capsys.readouterr().out
    assert main(["search", "kyoto", "--store", str(root)]) == 0
    assert "2 hits" in capsys.readouterr().out
    assert main(["conversations", "agent:telegram:42", "--store", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["current"], r["preview"]) for r in rows] == [
        (True, ""),
        (False, "Plan a trip to Kyoto"),
    ]

"""The benchmark suite's pure parts: the seeded workload, ratios, targets and rendering."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from sessionledger.tools.bench._core import Row
from sessionledger.tools.bench._report import markdown, table
from sessionledger.tools.bench._workload import conversation, describe


def test_workload_is_seeded_and_realistic() -> None:
    a = conversation(600)
    assert a == conversation(600)
    assert a != conversation(600, seed=2)
    facts = describe(a)
    assert 150 <= facts["median_content_chars"] <= 500
    assert facts["big_tool_outputs"] > 0
    assert not describe(conversation(600, big_tools=False))["big_tool_outputs"]


def test_every_tool_result_answers_a_declared_call() -> None:
    declared: set[str] = set()
    for m in conversation(2_000):
        for call in m.get("tool_calls") or ():
            declared.add(call["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in declared


def test_ratio_and_target_follow_the_unit() -> None:
    rate = Row("g", "rate", "events/s", 200.0, 50.0, target=100.0)
    assert rate.ratio == 4.0 and rate.meets is True
    time_row = Row("g", "time", "ms", 10.0, 40.0, target=5.0)
    assert time_row.ratio == 4.0 and time_row.meets is False
    assert Row("g", "none", "ms", 1.0).ratio is None


def test_tables_render_missing_nanobot() -> None:
    rows = [Row("g", "open", "ms", 12.5, None, target=60.0, nanobot_what="load")]
    out = io.StringIO()
    Console(file=out, width=120).print(table(rows, title="t", nanobot_missing="not installed"))
    assert "nanobot: not installed" in out.getvalue()
    assert "| open | 12.5 ms | nanobot: not installed | - | <= 60.0 ms | yes | load |" in markdown(
        rows, nanobot_missing="not installed"
    )


def test_a_child_benchmark_hands_its_rows_back_and_a_failure_hands_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sessionledger.tools.bench import _child
    from sessionledger.tools.bench._core import REGISTRY, Context, Entry

    rows = [Row("g", "open", "ms", 1.5, 2.0, target=3.0, nanobot_what="x", note="n", rival="r")]
    assert _child.decode_rows("noise\n" + _child.encode_rows(rows) + "\n") == rows
    assert _child.decode_rows("no rows here\n") is None

    def fine(ctx: Context) -> list[Row]:
        print("a line of its own")
        return rows

    def broken(ctx: Context) -> list[Row]:
        raise RuntimeError("boom")

    REGISTRY["test-fine"] = Entry("test-fine", 0, "t", fine)
    REGISTRY["test-broken"] = Entry("test-broken", 0, "t", broken)
    try:
        args = ["--root", str(tmp_path), "--runs", "1", "--no-nanobot"]
        assert _child.main(["test-fine", *args]) == 0
        out = capsys.readouterr().out
        assert out.startswith("a line of its own\n") and _child.decode_rows(out) == rows
        assert _child.main(["test-broken", *args]) == 1
        captured = capsys.readouterr()
        assert _child.decode_rows(captured.out) is None and "boom" in captured.err
    finally:
        del REGISTRY["test-fine"], REGISTRY["test-broken"]


def test_a_benchmark_named_twice_runs_twice_and_output_without_a_newline_keeps_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--only x,x`` runs x twice (each child gets a directory of its own), and a benchmark
    whose own output does not end in a newline still hands its rows back, its output shown."""
    import subprocess

    from sessionledger.tools.bench import _child, _main
    from sessionledger.tools.bench._core import REGISTRY, Context, Entry

    rows = [Row("g", "open", "ms", 1.5)]
    roots: list[str] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        roots.append(command[command.index("--root") + 1])
        assert _child.main(command[command.index("-m") + 2 :]) == 0
        return subprocess.CompletedProcess(command, 0, capsys.readouterr().out, None)

    def partial(ctx: Context) -> list[Row]:
        print("no newline after this", end="")
        return rows

    REGISTRY["test-partial"] = Entry("test-partial", 0, "t", partial)
    monkeypatch.setattr(subprocess, "run", fake_run)
    try:
        out = _main.run(
            ["test-partial", "test-partial"],
            parent=tmp_path,
            use_nanobot=False,
            console=Console(file=io.StringIO()),
        )
    finally:
        del REGISTRY["test-partial"]
    assert out == rows + rows
    assert len(set(roots)) == 2
    assert capsys.readouterr().out == "no newline after this\n" * 2

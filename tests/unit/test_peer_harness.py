"""The peer harness's own logic (the runs themselves are a command, not part of the suite)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

from sessionledger.tools.peer._run import Outcomes, parse_junit, regressions, select
from sessionledger.tools.peer._swap import swap

JUNIT = """<?xml version="1.0"?>
<testsuites><testsuite>
<testcase classname="tests.test_a" name="test_ok"/>
<testcase classname="tests.test_a" name="test_bad"><failure message="x"/></testcase>
<testcase classname="tests.test_a" name="test_skip"><skipped/></testcase>
<testcase classname="tests.test_a" name="test_teardown"/>
<testcase classname="tests.test_a" name="test_teardown"><error message="td"/></testcase>
</testsuite></testsuites>
"""


def test_junit_outcomes_count_teardown_errors_as_failures(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    path.write_text(JUNIT)
    outcomes = parse_junit(path)
    assert outcomes.results == {
        "tests.test_a::test_ok": "passed",
        "tests.test_a::test_bad": "failed",
        "tests.test_a::test_skip": "skipped",
        "tests.test_a::test_teardown": "failed",
    }


def test_regressions_are_passes_that_did_not_pass_with_ours() -> None:
    theirs = Outcomes({"a": "passed", "b": "passed", "c": "failed", "d": "passed"})
    ours = Outcomes({"a": "passed", "b": "failed", "c": "failed"})
    assert regressions(theirs, ours) == ["b", "d"]


def test_select_takes_the_files_that_name_the_session_classes(tmp_path: Path) -> None:
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "test_x.py").write_text("s = SQLiteSession('a')\n")
    (tmp_path / "tests" / "sub" / "test_y.py").write_text("pass\n")
    assert select(tmp_path, "agents", False) == ["tests/test_x.py"]
    assert select(tmp_path, "agents", True) == ["tests/sub/test_y.py", "tests/test_x.py"]


def test_swap_rebinds_every_module_attribute() -> None:
    class Original: ...

    class Replacement: ...

    module = types.ModuleType("peer_swap_probe")
    module.__dict__["A"] = Original
    module.__dict__["B"] = Original
    sys.modules[module.__name__] = module
    try:
        assert swap(Original, Replacement) == 2
        assert module.__dict__["A"] is Replacement and module.__dict__["B"] is Replacement
    finally:
        del sys.modules[module.__name__]

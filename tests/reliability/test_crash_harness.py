"""Crash harness: writers SIGKILLed at random moments lose no acknowledged event.

The scenario is ``tools.soak._crash`` (see its docstring for the exact checks per kill); here it
runs with CI counts (at least 200 kills across the durability modes, plus keyed logs), each
mode in its own child process so the modes run in parallel. ``python -m sessionledger.tools.soak`` runs the
same rounds 5,000 times.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from soak_child import finish_soak, start_soak

from sessionledger import replay
from sessionledger.eventlog import FileStore

KILLS = {"always": 70, "batch": 70, "none": 70}


def test_sigkilled_writers_lose_no_acknowledged_event(tmp_path: Path) -> None:
    runs = {
        mode: start_soak(
            "--only",
            "crash",
            "--modes",
            mode,
            "--kills",
            str(kills),
            "--root",
            str(tmp_path / mode),
            "--seed",
            "7",
        )
        for mode, kills in KILLS.items()
    }
    runs["keyed"] = start_soak(
        "--only",
        "crash",
        "--modes",
        "batch",
        "--kills",
        "30",
        "--hash-key",
        "s3cret",
        "--root",
        str(tmp_path / "keyed"),
        "--seed",
        "8",
    )
    results = {name: finish_soak(proc) for name, proc in runs.items()}
    total = 0
    for name, result in results.items():
        (figures,) = result["crash"]
        expected = KILLS.get(name, 30)
        assert figures["kills"] == expected, name
        total += figures["kills"]
        # Not vacuous: most kills came after acknowledged appends, and every one was checked.
        assert figures["acknowledged"] > expected, (name, figures)
        assert figures["killed_before_first_ack"] < expected * 0.6, (name, figures)
        assert figures["lost"] == 0
    assert total >= 200
    # A kill can land between a line's write and its acknowledgement: under "always" and
    # "batch" (the fsync in between) that happens often; the harness checked each such line is
    # the only unacknowledged one and that it verifies.
    assert results["always"]["crash"][0]["unacknowledged_kept"] > 0


@pytest.mark.parametrize("content", [b"", b"{", b'{"type":"hea', b'{"type":"header","seq":0'])
def test_a_crash_before_the_header_was_written_recovers(tmp_path: Path, content: bytes) -> None:
    """A kill between creating a log and finishing its header line leaves 0..n header bytes;
    recover treats all of them like opening does (found by the crash harness: an empty file was
    reported as "not a session log")."""
    store = FileStore(tmp_path, durability="none")
    store.path_for("new:1").write_bytes(content)
    report = replay.recover(store)
    assert report.ok, report.problems
    assert store.load("new:1").state.seq == 0
    assert replay.verify(store).ok
    writer = store.session("new:1")
    assert writer.append_message("user", "first") == 1
    writer.close()

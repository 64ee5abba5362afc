"""The adversary's soak scenarios at test size: restore/cleanup races across processes with a
SIGKILL and planted entries, then hostile files, values, full disks and forged keyed logs.

``python -m sessionledger.tools.soak --only trash,hostile`` runs them at soak size.
"""

from __future__ import annotations

from pathlib import Path

from sessionledger.tools.soak._hostile import run_hostile
from sessionledger.tools.soak._trashrace import run_trash_race


def test_trash_races_lose_nothing(tmp_path: Path) -> None:
    figures = run_trash_race(tmp_path, 3, seed=11)
    assert figures.rounds == 3 and figures.kills <= 1
    assert figures.planted == figures.planted_refused == 3
    assert figures.restores > 0 and figures.cleanups > 0
    assert figures.conversations_checked >= 18


def test_hostile_rounds_hold(tmp_path: Path) -> None:
    figures = run_hostile(tmp_path, 8, seed=5)
    assert figures.files_planted == 24 and figures.operations == 8 * 14
    assert 0 < figures.values_refused < figures.values_tried
    assert figures.values_read_back_equal == figures.values_tried - figures.values_refused
    assert sum(figures.disk_full.values()) == 8
    assert figures.forged_logs == figures.forged_caught == 8

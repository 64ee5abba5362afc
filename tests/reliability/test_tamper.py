"""Tampering is caught by ``replay.verify``: bytes, deleted and swapped lines, truncation, forgery.

The scenario is ``tools.soak._tamper`` (every line deletion, every swap of two lines, every
truncation by whole lines, a consistent rewrite; bytes every ``byte_step``-th here, all of them
in the soak). Every single-byte change of a log is also checked exhaustively, on the pure
checker, in tests/unit/test_replay_verify.py.
"""

from __future__ import annotations

from pathlib import Path

from sessionledger import projections, replay
from sessionledger.eventlog import FileStore
from sessionledger.tools.soak._fuzz import rechain
from sessionledger.tools.soak._tamper import KEY, build, run_tamper


def test_every_tampering_of_an_unkeyed_log(tmp_path: Path) -> None:
    figures = run_tamper(tmp_path, events=12, seed=1, byte_step=9)
    lines = 13
    assert figures.checked["delete line"] == lines
    assert figures.checked["swap lines"] == lines * (lines - 1) // 2
    assert figures.checked["truncate"] == lines  # to 0..12 whole lines: all caught
    assert figures.checked["rewrite before the snapshot"] == 1
    assert figures.checked["byte"] > 250


def test_every_tampering_of_a_keyed_log(tmp_path: Path) -> None:
    figures = run_tamper(tmp_path, events=10, seed=2, hash_key="s3cret", byte_step=13)
    assert figures.checked["rewrite without the key"] == 1
    assert figures.checked["rewrite with a wrong key"] == 1
    assert figures.checked["truncate"] == 11


def test_what_is_not_promised_without_a_key(tmp_path: Path) -> None:
    """Without a secret, someone who can write the directory can rewrite the log consistently
    AND drop the snapshot: verify cannot tell. This documents the limit in GUARANTEES.md."""
    store = build(tmp_path, events=6, seed=3, hash_key=None)
    path = store.path_for(KEY)
    lines = path.read_bytes().splitlines(keepends=True)
    store.put_snapshot(KEY, None)
    path.write_bytes(b"".join(lines[:-2]))  # truncated by whole lines
    assert replay.verify(store, KEY).ok
    path.write_bytes(rechain(b"".join(lines).replace(b'"content":"', b'"content":"X', 1)))
    assert replay.verify(store, KEY).ok


def test_with_a_key_a_forger_cannot_hide_behind_a_missing_snapshot(tmp_path: Path) -> None:
    store = build(tmp_path, events=6, seed=4, hash_key="s3cret")
    path = store.path_for(KEY)
    data = path.read_bytes()
    store.put_snapshot(KEY, None)
    for key in (b"", b"guess"):
        path.write_bytes(rechain(data.replace(b'"content":"', b'"content":"X', 1), key))
        report = replay.verify(store, KEY)
        assert not report.ok and report.problems[0].line == 1
    # Truncation by whole lines still chains under the key: only a recorded head catches it.
    path.write_bytes(data)
    projections.write_snapshot(store, KEY)
    path.write_bytes(b"".join(data.splitlines(keepends=True)[:-1]))
    assert replay.verify(store, KEY).session(KEY).truncated
    assert not replay.verify(FileStore(tmp_path, hash_key="s3cret"), KEY).ok

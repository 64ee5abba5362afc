"""Hostile import files: the importers return a report or raise the library's own errors.

Nanobot session files, seed-001 session JSON and our own logs (``import_path`` sniffs which),
mutated and generated; every file goes through the real import into a file store, under a time
bound. Whatever is imported must verify. The mutation fuzzer over the same importers runs in
``tools.soak._fuzz`` (soak: tens of thousands of files).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionledger import replay
from sessionledger.eventlog import FileStore
from sessionledger.tools.soak._fuzz import (
    check_import_input,
    deep,
    mutate,
    only_library_errors,
    sample_log,
    sample_nanobot,
    sample_session_json,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SOURCES = {"nanobot": sample_nanobot(), "json": sample_session_json(), "log": sample_log()}
SUFFIX = {"nanobot": ".jsonl", "json": ".json", "log": ".jsonl"}


def import_file(tmp: Path, data: bytes, suffix: str) -> None:
    """Import one file through the sniffing entry point; whatever was imported verifies."""
    source = tmp / f"src-{random.randrange(1 << 30)}{suffix}"
    source.write_bytes(data)
    store = FileStore(tmp / "store", durability="none")
    only_library_errors("import_path", lambda: replay.import_path(store, source))
    report = replay.verify(store)
    assert report.ok, report.problems
    store.close()


@SETTINGS
@given(st.sampled_from(sorted(SOURCES)), st.integers(0, 2**32), st.integers(1, 6))
def test_mutated_import_files(tmp_path: Path, kind: str, seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    data = SOURCES[kind]
    for _ in range(rounds):
        data = mutate(data, rng)
    import_file(tmp_path, data, SUFFIX[kind])
    if kind != "log":
        check_import_input(data, kind)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(st.lists(json_values, max_size=6), st.booleans())
def test_generated_nanobot_lines(tmp_path: Path, lines: list[Any], with_meta: bool) -> None:
    """Any JSON values as lines (messages with odd fields, lists, numbers, nested junk)."""
    meta = [{"_type": "metadata", "key": "gen:1", "last_consolidated": 3}] if with_meta else []
    rows = [*meta, *({"role": "user", "content": v} if i % 2 else v for i, v in enumerate(lines))]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    import_file(tmp_path, data, ".jsonl")
    check_import_input(data, "nanobot")


HOSTILE_LINES = [
    b'{"role":"user","content":' + b"1" * 5000 + b"}",  # past Python's int digit limit
    b'{"role":"user","content":"\\ud800"}',  # a lone surrogate escape
    b'{"role":"user","content":' + deep(100_000) + b"}",
    b'{"role":"user","content":"nul \\u0000 and raw \x00"}',
    b'{"role":"user","content":"\xff\xfe not utf-8"}',
    b'{"role":"user","content":"raw \xe2\x80\xa8 separator"}',
    b'{"role":"user","content":NaN}',
    b'{"role":"user","content":"' + b"z" * 2_000_000 + b'"}',
    b'{"role":' + b"[" * 50 + b"}",
]


@pytest.mark.parametrize("line", HOSTILE_LINES, ids=range(len(HOSTILE_LINES)))
def test_hostile_nanobot_lines_are_kept_in_quarantine_or_imported(
    tmp_path: Path, line: bytes
) -> None:
    """Regressions: a 5000-digit number raised ValueError and a lone surrogate escape raised
    UnicodeEncodeError out of the nanobot importer; each such line is now salvaged around."""
    meta = b'{"_type":"metadata","key":"hostile:1","created_at":"2026-01-01T00:00:00"}\n'
    good = b'{"role":"user","content":"fine"}\n'
    data = meta + good + line + b"\n" + good
    session = replay.parse_nanobot(data, "x.jsonl")
    assert len(session.messages) + len(session.rejected) == 3
    import_file(tmp_path, data, ".jsonl")


@pytest.mark.parametrize(
    "doc",
    [
        b"",
        b"[]",
        deep(100_000),
        b'{"session_id":"a","created_at":"x","updated_at":"y","messages":[' + deep(3000) + b"]}",
        b'{"session_id":"a","created_at":"x","updated_at":"y","messages":[{"role":"user","content":'
        + b"9" * 5000
        + b"}]}",
        b'{"session_id":"\\ud800","created_at":"x","updated_at":"y"}',
        b'{"session_id":"a\\u0000/../b","created_at":"x","updated_at":"y"}',
        sample_session_json().replace(b'"hi"', b'"\\udfff"'),
    ],
)
def test_hostile_session_json(tmp_path: Path, doc: bytes) -> None:
    import_file(tmp_path, doc, ".json")
    check_import_input(doc, "json")

"""Random access to a log: pages decode only their lines, and agree with decoding it whole."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from sessionledger import replay
from sessionledger.eventlog import BaseStore, FileStore, MemoryStore, UnsafePathError, decode_log
from sessionledger.tools.web._logindex import LogCache

KEY = "long:1"


def _fill(store: BaseStore, n: int = 1500) -> None:
    rng = random.Random(7)
    with store.session(KEY) as s:
        for i in range(n):
            size = rng.choice((20, 200, 2_000, 90_000 if i % 97 == 0 else 500))
            s.append_message("user" if i % 2 else "assistant", f"{i}:" + "x" * size)
            if i % 300 == 0:
                s.update_metadata(set={"n": i})


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_pages_agree_with_the_whole_log(tmp_path: Path, kind: str) -> None:
    store: BaseStore = FileStore(tmp_path / "s") if kind == "file" else MemoryStore()
    with store:
        _fill(store)
        whole = decode_log(store.read_bytes(KEY))
        by_seq = {e.seq: e for e in whole.events}
        index = LogCache(store).get(KEY, KEY)
        assert (index.last_seq, index.head) == (whole.last_seq, whole.head)
        rng = random.Random(3)
        spans = [(1, 1), (1, 50), (whole.last_seq - 99, whole.last_seq), (whole.last_seq, 10**9)]
        for _ in range(40):
            a, b = sorted(rng.sample(range(1, whole.last_seq + 1), 2))
            spans.append((a, b))
        for lo, hi in spans:
            events, bad = index.events(lo, hi, store.hash_key)
            assert not bad
            want = [by_seq[s] for s in range(lo, min(hi, whole.last_seq) + 1)]
            assert [(e.seq, e.h) for e in events] == [(e.seq, e.h) for e in want], (lo, hi)


def test_a_tampered_line_is_reported_and_the_page_goes_on(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        _fill(store, 300)
        path = store.path_for(KEY)
        data = path.read_bytes()
        at = data.index(b'"150:') + 2
        line = data.count(b"\n", 0, at) + 1
        path.write_bytes(data[:at] + b"9" + data[at + 1 :])
        index = LogCache(store).get(KEY, KEY)
        events, bad = index.events(140, 160, b"")
        assert [(b.seq, b.line) for b in bad] == [(line - 1, line)]
        assert "hash" in bad[0].reason
        assert [e.seq for e in events] == [s for s in range(140, 161) if s != line - 1]


def test_the_follower_starts_where_the_index_is(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        _fill(store, 200)
        cache = LogCache(store)
        index = cache.get(KEY, KEY)
        last = index.last_seq
        store.session(KEY).append_message("user", "new one")
        point = index.point_after(last - 1)
        with replay.follow(store, KEY, last - 1, idle_timeout=0.5, start=point) as f:
            got = [e.seq for e in f]
        assert got == [last, last + 1]


def test_a_planted_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s") as store:
        _fill(store, 10)
        path = store.path_for(KEY)
        path.unlink()
        os.mkfifo(path)
        with pytest.raises(UnsafePathError, match="not a regular file"):
            LogCache(store).get(KEY, KEY)

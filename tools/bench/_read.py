"""Read-side benchmarks: reopen + fold, LLM history and the session list.

Each reads logs written once per run (untimed) and nanobot session files holding the same
messages. Benchmarks of projections that have not landed yet report "not available" instead of
failing, so the suite runs at every commit.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ._core import Context, Row, benchmark, medians, ms, timed
from ._write import _messages, write_log, write_many, write_nanobot

KEY_10K = "bench:10k"


def _log_10k(ctx: Context) -> Any:
    return write_log(ctx, "log10k", _messages(ctx), KEY_10K)


def _nanobot_10k(ctx: Context) -> Any:
    return write_nanobot(ctx, "nanobot10k", _messages(ctx), KEY_10K)


def _snapshot_copy(ctx: Context) -> Path:
    """A copy of the 10k log with a snapshot at its end (for opening from the snapshot)."""
    from sessionledger.eventlog import FileStore

    root = ctx.root / "log10k-snap"
    if not root.exists():
        shutil.copytree(_log_10k(ctx), root)
        FileStore(root).write_snapshot(KEY_10K)
    return root


@benchmark("reopen", 2, "Reopen + fold of the 10,000-message log vs nanobot's load")
def bench_reopen(ctx: Context) -> list[Row]:
    """Open the 10k log (lock, read, check every hash, decode, fold), also read-only."""
    from sessionledger.eventlog import FileStore

    root = _log_10k(ctx)
    snap = FileStore(root).snapshot_path(KEY_10K)
    snap.unlink(missing_ok=True)  # the whole log is folded, not a snapshot
    nb_root = _nanobot_10k(ctx) if ctx.nanobot is not None else None
    size_mb = FileStore(root).path_for(KEY_10K).stat().st_size / 1e6

    def ours_open() -> float:
        store = FileStore(root)
        store.snapshot_every = 0
        seconds = timed(lambda: store.session(KEY_10K))
        assert store.session(KEY_10K).state.total_messages == 10_000
        store.close()
        return seconds

    def ours_load() -> float:
        store = FileStore(root)
        return timed(lambda: store.load(KEY_10K, snapshot=False))

    def nanobot_load() -> float:
        nb = ctx.nanobot
        assert nb is not None and nb_root is not None
        return timed(lambda: nb.SessionManager(nb_root).get_or_create(KEY_10K))

    theirs = nanobot_load if nb_root is not None else None
    opened, nb = medians(ctx.runs, ours_open, theirs)
    loaded, _ = medians(ctx.runs, ours_load)
    assert not snap.exists()
    what = "SessionManager(...).get_or_create (fresh)"
    return [
        Row(
            "reopen",
            f"store.session(key): open 10k log ({size_mb:.1f} MB), check every hash, fold",
            "ms",
            ms(opened),
            ms(nb) if nb is not None else None,
            target=60,
            nanobot_what=what,
        ),
        Row(
            "reopen",
            "store.load(key, snapshot=False): read-only, no lock",
            "ms",
            ms(loaded),
            ms(nb) if nb is not None else None,
            target=60,
            nanobot_what=what,
        ),
    ]


@benchmark("history", 3, "history(max_messages=500, max_tokens=128_000) on 10k vs get_history")
def bench_history(ctx: Context) -> list[Row]:
    """The LLM history window of the 10k session, ours from the folded state."""
    from sessionledger import projections

    history = projections.history
    from sessionledger.eventlog import FileStore

    root = _log_10k(ctx)
    state = FileStore(root).load(KEY_10K).state
    session = None
    if ctx.nanobot is not None:
        session = ctx.nanobot.SessionManager(_nanobot_10k(ctx)).get_or_create(KEY_10K)
    reps = 20

    def ours() -> float:
        return (
            timed(
                lambda: [history(state, max_messages=500, max_tokens=128_000) for _ in range(reps)]
            )
            / reps
        )

    def theirs() -> float:
        assert session is not None
        return timed(lambda: session.get_history(max_messages=500, max_tokens=128_000))

    t_ours, t_nb = medians(ctx.runs, ours, theirs if session is not None else None)
    ours_len = len(history(state, max_messages=500, max_tokens=128_000))
    note = ""
    if session is not None:
        nb_len = len(session.get_history(max_messages=500, max_tokens=128_000))
        note = f"{ours_len} vs {nb_len} messages returned"
    return [
        Row(
            "history",
            "history(state, max_messages=500, max_tokens=128_000) on 10k",
            "ms",
            ms(t_ours),
            ms(t_nb) if t_nb is not None else None,
            target=1,
            nanobot_what="Session.get_history(500, max_tokens=128_000)",
            note=note,
        )
    ]


@benchmark("snapshot", 3, "Open the 10k session from its snapshot and compute the history")
def bench_snapshot(ctx: Context) -> list[Row]:
    """Read-only open from a snapshot at the end of the log, then the LLM history window."""
    from sessionledger import projections
    from sessionledger.eventlog import FileStore

    root = _snapshot_copy(ctx)
    nb_root = _nanobot_10k(ctx) if ctx.nanobot is not None else None

    def ours() -> float:
        store = FileStore(root)

        def work() -> None:
            loaded = store.load(KEY_10K)
            assert loaded.snapshot_seq == loaded.state.seq
            projections.history(loaded.state, max_messages=500, max_tokens=128_000)

        return timed(work)

    def theirs() -> float:
        nb = ctx.nanobot
        assert nb is not None and nb_root is not None

        def work() -> None:
            session = nb.SessionManager(nb_root).get_or_create(KEY_10K)
            session.get_history(max_messages=500, max_tokens=128_000)

        return timed(work)

    t_ours, t_nb = medians(ctx.runs, ours, theirs if nb_root is not None else None)
    return [
        Row(
            "snapshot",
            "load(key) from its snapshot + history(500 msgs, 128k tokens)",
            "ms",
            ms(t_ours),
            ms(t_nb) if t_nb is not None else None,
            target=10,
            nanobot_what="fresh get_or_create + get_history",
        )
    ]


@benchmark("list", 3, "Session list: 1,000 (and 10,000) sessions of 200 messages")
def bench_list(ctx: Context) -> list[Row]:
    """``list_sessions`` with the catalog current, and rebuilt from the logs, vs nanobot's."""
    from sessionledger import projections
    from sessionledger.eventlog import FileStore

    rows: list[Row] = []
    sizes = [(1_000, 5.0, 200.0)] + ([] if ctx.quick else [(10_000, 25.0, 2_000.0)])
    for count, target_current, target_rebuilt in sizes:
        root, nb_root, _ = write_many(ctx, f"many{count}", count)
        runs = ctx.runs if count <= 1_000 else max(2, ctx.runs // 2)
        store = FileStore(root)
        first = projections.list_sessions(store)  # brings the catalog up to date (untimed)
        assert len(first) == count

        def current(store: Any = store) -> float:
            return timed(lambda: projections.list_sessions(store))

        def rebuilt(root: Path = root) -> float:
            (root / ".catalog").unlink(missing_ok=True)
            store = FileStore(root)
            return timed(lambda: projections.list_sessions(store))

        def theirs(nb_root: Any = nb_root) -> float:
            nb = ctx.nanobot
            assert nb is not None
            manager = nb.SessionManager(nb_root)
            return timed(manager.list_sessions)

        def fresh(root: Path = root) -> float:
            # A new store object reads the catalog file as a fresh process does.
            return timed(lambda: projections.list_sessions(FileStore(root)))

        def first_page(store: Any = store) -> float:
            return timed(lambda: projections.list_sessions(store, limit=20))

        t_cur, t_nb = medians(runs, current, theirs if nb_root is not None else None)
        t_fresh, _ = medians(runs, fresh)
        t_page, _ = medians(runs, first_page)
        t_reb, _ = medians(runs, rebuilt)
        projections.list_sessions(FileStore(root))  # leave it current for later benchmarks
        nb_ms = ms(t_nb) if t_nb is not None else None
        rows.append(
            Row(
                "list",
                f"list_sessions, {count:,} sessions, catalog current",
                "ms",
                ms(t_cur),
                nb_ms,
                target=target_current,
                nanobot_what="list_sessions()",
            )
        )
        rows.append(
            Row("list", f"list_sessions, {count:,} sessions, new store object", "ms", ms(t_fresh))
        )
        rows.append(Row("list", f"list_sessions(limit=20), {count:,} sessions", "ms", ms(t_page)))
        rows.append(
            Row(
                "list",
                f"list_sessions, {count:,} sessions, catalog rebuilt from the logs",
                "ms",
                ms(t_reb),
                nb_ms,
                target=target_rebuilt,
                nanobot_what="list_sessions()",
            )
        )
    return rows

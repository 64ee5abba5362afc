"""Read-side benchmarks: reopen + fold (issue 2), LLM history and the session list (issue 3).

Each reads logs written once per run (untimed) and nanobot session files holding the same
messages. Benchmarks of projections that have not landed yet report "not available" instead of
failing, so the suite runs at every commit.
"""

from __future__ import annotations

from typing import Any

from ._core import Context, Row, benchmark, medians, ms, timed
from ._write import _messages, write_log, write_nanobot

KEY_10K = "bench:10k"


def _log_10k(ctx: Context) -> Any:
    return write_log(ctx, "log10k", _messages(ctx), KEY_10K)


def _nanobot_10k(ctx: Context) -> Any:
    return write_nanobot(ctx, "nanobot10k", _messages(ctx), KEY_10K)


@benchmark("reopen", 2, "Reopen + fold of the 10,000-message log vs nanobot's load")
def bench_reopen(ctx: Context) -> list[Row]:
    """Open the 10k log for writing (lock, read, check every hash, decode, fold) and read-only."""
    from eventlog import FileStore

    root = _log_10k(ctx)
    nb_root = _nanobot_10k(ctx) if ctx.nanobot is not None else None
    size_mb = (
        root / next(p.name for p in root.iterdir() if p.suffix == ".jsonl")
    ).stat().st_size / 1e6

    def ours_open() -> float:
        store = FileStore(root)
        seconds = timed(lambda: store.session(KEY_10K))
        assert store.session(KEY_10K).state.total_messages == 10_000
        store.close()
        return seconds

    def ours_load() -> float:
        store = FileStore(root)
        return timed(lambda: store.load(KEY_10K))

    def nanobot_load() -> float:
        nb = ctx.nanobot
        assert nb is not None and nb_root is not None
        return timed(lambda: nb.SessionManager(nb_root).get_or_create(KEY_10K))

    theirs = nanobot_load if nb_root is not None else None
    opened, nb = medians(ctx.runs, ours_open, theirs)
    loaded, _ = medians(ctx.runs, ours_load)
    what = "SessionManager(...).get_or_create (fresh)"
    return [
        Row(
            "reopen",
            f"store.session(key): open 10k log ({size_mb:.1f} MB), verify, fold",
            "ms",
            ms(opened),
            ms(nb) if nb is not None else None,
            target=60,
            nanobot_what=what,
        ),
        Row(
            "reopen",
            "store.load(key): read-only, no lock",
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
    import projections

    history = getattr(projections, "history", None)
    if history is None:
        return [
            Row(
                "history",
                "history(500 msgs, 128k tokens) on 10k",
                "ms",
                None,
                note="projections.history not landed yet",
            )
        ]
    from eventlog import FileStore

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

"""Replay benchmarks: verify and recover over many sessions, verify MB/s, state_at.

nanobot has no verify, recover or time travel: these rows carry our figure and the target
only (its nearest work, loading every session, is what the list benchmark already times).
"""

from __future__ import annotations

from ._core import Context, Row, benchmark, medians, ms, timed
from ._read import KEY_10K, _log_10k
from ._write import write_many


@benchmark("replay", 4, "verify / recover over 1,000 sessions; verify 10k log; state_at")
def bench_replay(ctx: Context) -> list[Row]:
    """Whole-store verify and recover, one big log's verify throughput, and time travel."""
    from sessionledger import replay
    from sessionledger.eventlog import FileStore

    root, _, keys = write_many(ctx, "many1000", 1_000)
    big = _log_10k(ctx)
    big_bytes = FileStore(big).path_for(KEY_10K).stat().st_size

    def verify_all() -> float:
        store = FileStore(root)
        report: list[bool] = []
        seconds = timed(lambda: report.append(replay.verify(store).ok))
        assert report == [True]
        return seconds

    def recover_all() -> float:
        store = FileStore(root)
        report: list[bool] = []
        seconds = timed(lambda: report.append(replay.recover(store).ok))
        assert report == [True]
        return seconds

    def verify_big() -> float:
        store = FileStore(big)
        return timed(lambda: replay.verify(store, KEY_10K))

    def state_mid() -> float:
        store = FileStore(big)
        return timed(lambda: replay.state_at(store, KEY_10K, seq=5_000))

    runs = 2 if ctx.quick else ctx.runs  # each run reads all 1,000 logs
    t_verify, _ = medians(runs, verify_all)
    t_recover, _ = medians(runs, recover_all)
    t_big, _ = medians(ctx.runs, verify_big)
    t_state, _ = medians(ctx.runs, state_mid)
    n = len(keys)
    return [
        Row(
            "replay",
            f"replay.verify(store): {n:,} sessions x 200 msgs",
            "ms",
            ms(t_verify),
            target=2_000,
        ),
        Row(
            "replay",
            f"replay.recover(store): {n:,} sessions x 200 msgs",
            "ms",
            ms(t_recover),
            target=2_000,
        ),
        Row(
            "replay",
            f"replay.verify(store, key): 10k log ({big_bytes / 1e6:.1f} MB)",
            "MB/s",
            big_bytes / 1e6 / t_big,
            target=200,
        ),
        Row(
            "replay",
            "replay.state_at(store, key, seq=5_000) on the 10k log",
            "ms",
            ms(t_state),
            target=60,
        ),
    ]

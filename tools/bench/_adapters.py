"""The drop-in benchmark: nanobot's agent loop on ``sessionledger.tools.nanobot`` and on nanobot.

``session.add_message(...); manager.save(session)`` (and with ``fsync=True``) at sessions of
1,000 and 10,000 messages, ours and nanobot's own ``SessionManager`` alternating run by run.
"""

from __future__ import annotations

from ._core import Context, Row, benchmark, medians


@benchmark("adapter", 8, "Drop-in tools.nanobot vs nanobot: add_message + save per message")
def bench_adapter(ctx: Context) -> list[Row]:
    """Seconds per message of the agent loop, as messages/s, ours through the drop-in."""
    from . import _nanobot_loop as script

    ours_side = script.ours()
    bare_side = script.ours(views=False)
    theirs_side = script.nanobot() if ctx.nanobot is not None else None
    iterations = 20 if ctx.quick else 50
    rows: list[Row] = []
    sizes = (1_000,) if ctx.quick else (1_000, 10_000)
    for size, fsync in [(size, fsync) for size in sizes for fsync in (False, True)]:
        nb_iters = max(3, iterations // (10 if size >= 10_000 else 1))

        def one_ours(size: int = size, fsync: bool = fsync) -> float:
            with ctx.scratch("adapter") as root:
                return 1.0 / script.run_once(ours_side, root, size, iterations, fsync)

        def one_theirs(size: int = size, n: int = nb_iters, fsync: bool = fsync) -> float:
            assert theirs_side is not None
            with ctx.scratch("adapter-nb") as root:
                return 1.0 / script.run_once(theirs_side, root, size, n, fsync)

        runs = max(2, ctx.runs - 1)
        rate, nb = medians(runs, one_ours, one_theirs if theirs_side is not None else None)
        rows.append(
            Row(
                "adapter",
                f"tools.nanobot add_message+save{'(fsync=True)' if fsync else ''}, "
                f"session of {size:,}",
                "events/s",
                rate,
                nb,
                nanobot_what=f"add_message+save{'(fsync=True)' if fsync else ''} at {size:,} msgs",
            )
        )
    for size in sizes:
        # What the nanobot-format views cost: the same loop without them, alternating.
        def with_views(size: int = size) -> float:
            with ctx.scratch("adapter") as root:
                return 1.0 / script.run_once(ours_side, root, size, iterations, False)

        def without_views(size: int = size) -> float:
            with ctx.scratch("adapter-bare") as root:
                return 1.0 / script.run_once(bare_side, root, size, iterations, False)

        rate, bare = medians(max(2, ctx.runs - 1), without_views, with_views)
        rows.append(
            Row(
                "adapter",
                f"tools.nanobot add_message+save without views (vs with), session of {size:,}",
                "events/s",
                rate,
                bare,
                nanobot_what=f"the same loop with views at {size:,} msgs",
            )
        )
    return rows

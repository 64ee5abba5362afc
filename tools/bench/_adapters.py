"""Benchmarks folded in from the helpers' scripts: the nanobot drop-in and the async writer.

- ``adapter`` (issue 8, from ``tools/bench_adapter.py``): nanobot's agent loop,
  ``session.add_message(...); manager.save(session)``, on our drop-in ``tools.nanobot`` and on
  nanobot's own ``SessionManager``, at sessions of 1,000 and 10,000 messages.
- ``async`` (from ``tools/bench_async.py``): group commit from asyncio tasks sharing one
  session (no thread hop per append; one fsync in a worker thread per batch).
"""

from __future__ import annotations

import time
from typing import Any

from ._core import Context, Row, benchmark, medians
from ._write import _messages


@benchmark("adapter", 8, "Drop-in tools.nanobot vs nanobot: add_message + save per message")
def bench_adapter(ctx: Context) -> list[Row]:
    """Seconds per message of the agent loop, as messages/s, ours through the drop-in."""
    from . import nanobot_loop as script

    ours_side = script.ours()
    theirs_side = script.nanobot() if ctx.nanobot is not None else None
    iterations = 20 if ctx.quick else 50
    rows: list[Row] = []
    for size in (1_000,) if ctx.quick else (1_000, 10_000):
        nb_iters = max(3, iterations // (10 if size >= 10_000 else 1))

        def one_ours(size: int = size) -> float:
            with ctx.scratch("adapter") as root:
                return 1.0 / script.run_once(ours_side, root, size, iterations, False)

        def one_theirs(size: int = size, n: int = nb_iters) -> float:
            assert theirs_side is not None
            with ctx.scratch("adapter-nb") as root:
                return 1.0 / script.run_once(theirs_side, root, size, n, False)

        runs = max(2, ctx.runs - 1)
        rate, nb = medians(runs, one_ours, one_theirs if theirs_side is not None else None)
        rows.append(
            Row(
                "adapter",
                f"tools.nanobot add_message+save, session of {size:,}",
                "events/s",
                rate,
                nb,
                nanobot_what=f"add_message+save at {size:,} msgs",
            )
        )
    return rows


async def _tasks_rate(root: str, messages: list[dict[str, Any]], tasks: int) -> float:
    import anyio

    from sessionledger.eventlog import AsyncFileStore

    async with AsyncFileStore(root, durability="batch") as store:
        writer = await store.session("bench:async")
        per = len(messages) // tasks

        async def work(i: int) -> None:
            for m in messages[i * per : (i + 1) * per]:
                await writer.append_message_dict(m)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(tasks):
                tg.start_soon(work, i)
        return per * tasks / (time.perf_counter() - start)


@benchmark("async", 2, 'Group commit from async tasks (durability="batch", one session)')
def bench_async(ctx: Context) -> list[Row]:
    """asyncio tasks appending to one session with group commit."""
    import anyio

    msgs = _messages(ctx)[: 2_000 if ctx.quick else 8_000]
    rows: list[Row] = []
    for tasks in (8, 64):

        def one(tasks: int = tasks) -> float:
            with ctx.scratch("async") as root:

                async def go() -> float:
                    return await _tasks_rate(str(root / "store"), msgs, tasks)

                rate: float = anyio.run(go)
                return rate

        rate, _ = medians(ctx.runs, one)
        rows.append(
            Row(
                "async",
                f'AsyncFileStore durability="batch", {tasks} asyncio tasks, one session',
                "events/s",
                rate,
                target=50_000,
            )
        )
    return rows

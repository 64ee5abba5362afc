"""Async write benchmarks: tasks appending through ``AsyncFileStore``, on asyncio and trio.

Each case is (durability, tasks, sessions, event loop); the figure is durable (for ``"none"``:
written) events per second, the median of the runs, each in a fresh store on the project's disk.
"""

from __future__ import annotations

import time
from typing import Any

from ._core import Context, Row, benchmark, medians
from ._write import _messages

#: (durability, tasks, sessions, backend, target events/s or None)
CASES: tuple[tuple[str, int, int, str, float | None], ...] = (
    ("none", 1, 1, "asyncio", 50_000),
    ("always", 1, 1, "asyncio", 2_000),
    ("always", 8, 8, "asyncio", 2_000),
    ("batch", 8, 1, "asyncio", 50_000),
    ("batch", 64, 1, "asyncio", 50_000),
    ("batch", 64, 8, "asyncio", 50_000),
    ("batch", 64, 1, "trio", 50_000),
)


async def _rate(
    root: str, durability: str, messages: list[dict[str, Any]], tasks: int, sessions: int
) -> float:
    import anyio

    from sessionledger.eventlog import AsyncFileStore

    async with AsyncFileStore(root, durability=durability) as store:
        writers = [await store.session(f"bench:async:{i}") for i in range(sessions)]
        per = len(messages) // tasks

        async def work(i: int) -> None:
            writer = writers[i % sessions]
            for m in messages[i * per : (i + 1) * per]:
                await writer.append_message_dict(m)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(tasks):
                tg.start_soon(work, i)
        return per * tasks / (time.perf_counter() - start)


@benchmark("async", 2, "Async tasks appending (none / always / batch), asyncio and trio")
def bench_async(ctx: Context) -> list[Row]:
    """Tasks appending to one or several sessions through the async store."""
    import anyio

    rows: list[Row] = []
    for durability, tasks, sessions, backend, target in CASES:
        count = 2_000 if ctx.quick else 8_000
        if durability == "always":
            count //= 4  # one fsync each: keep the run short
        msgs = _messages(ctx)[:count]

        def one(
            durability: str = durability,
            tasks: int = tasks,
            sessions: int = sessions,
            backend: str = backend,
            msgs: list[dict[str, Any]] = msgs,
        ) -> float:
            with ctx.scratch("async") as root:

                async def go() -> float:
                    return await _rate(str(root / "store"), durability, msgs, tasks, sessions)

                rate: float = anyio.run(go, backend=backend)
                return rate

        rate, _ = medians(ctx.runs, one)
        rows.append(
            Row(
                "async",
                f'AsyncFileStore durability="{durability}", {tasks} {backend} task(s), '
                f"{sessions} session(s)",
                "events/s",
                rate,
                target=target,
            )
        )
    return rows

"""PostgreSQL write benchmarks: the store's appends beside plain psycopg INSERT + COMMIT.

- ``pg-append``: one writer, appends one after another: durable latency (p50, interleaved with
  plain psycopg append by append) and throughput with ``synchronous_commit`` off.
- ``pg-writers``: 8 threads on 8 sessions, 8 threads sharing one session's writer (group
  commit), 8 stores on one session (each another "process": compare-and-set races), and 8
  asyncio tasks through ``AsyncPostgresStore``. Plain psycopg: 8 threads, 8 connections,
  INSERT + COMMIT.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from ._core import Context, Row, benchmark, medians, timed_threads
from ._pg_base import (
    RIVAL,
    PlainWriter,
    both,
    dsn,
    lines,
    message_fields,
    missing,
    plain_table,
    schema,
)
from ._write import _messages

PLAIN_WHAT = "INSERT of the same line + COMMIT, one connection each"


def _msgs(ctx: Context, count: int) -> list[dict[str, Any]]:
    msgs = _messages(ctx)
    return (msgs * (count // len(msgs) + 1))[:count]


def _latency(ctx: Context, server: str, name: str, count: int) -> tuple[float, float]:
    """p50 seconds of one durable append, ours and plain, interleaved append by append."""
    from sessionledger.eventlog import PostgresStore

    store = PostgresStore(server, schema=name, pool_size=2)
    table = plain_table(server, name)
    key = f"bench:lat:{uuid.uuid4().hex[:8]}"
    writer = store.session(key)
    plain = PlainWriter(server, table, key)
    ours_t: list[float] = []
    plain_t: list[float] = []
    for m, (event_id, line) in zip(_msgs(ctx, count), lines(ctx, count), strict=True):
        role, content, fields = message_fields(m)
        t0 = time.perf_counter()
        writer.append_message(role, content, **fields)
        t1 = time.perf_counter()
        plain.append(event_id, line)
        t2 = time.perf_counter()
        ours_t.append(t1 - t0)
        plain_t.append(t2 - t1)
    plain.close()
    store.close()
    return statistics.median(ours_t), statistics.median(plain_t)


def _rate_off(ctx: Context, server: str, name: str, count: int, ours: bool) -> float:
    """Appends/s of one writer with ``synchronous_commit`` off, ours or plain."""
    from sessionledger.eventlog import PostgresStore

    key = f"bench:off:{uuid.uuid4().hex[:8]}"
    if ours:
        store = PostgresStore(server, schema=name, durability="none", pool_size=2)
        writer = store.session(key)
        msgs = [message_fields(m) for m in _msgs(ctx, count)]
        t0 = time.perf_counter()
        for role, content, fields in msgs:
            writer.append_message(role, content, **fields)
        seconds = time.perf_counter() - t0
        store.close()
        return count / seconds
    plain = PlainWriter(server, plain_table(server, name), key, sync=False)
    todo = lines(ctx, count)
    t0 = time.perf_counter()
    for event_id, line in todo:
        plain.append(event_id, line)
    seconds = time.perf_counter() - t0
    plain.close()
    return count / seconds


@benchmark("pg-append", 18, "PostgreSQL: one writer's appends vs plain psycopg INSERT + COMMIT")
def bench_pg_append(ctx: Context) -> list[Row]:
    """Durable append latency and non-durable throughput of one writer."""
    server = dsn()
    if server is None:
        return missing("pg-append", "durable append p50")
    count = 200 if ctx.quick else 600
    with schema(server) as name:
        lat = [_latency(ctx, server, name, count) for _ in range(ctx.runs)]
        ours_p50 = statistics.median(a for a, _ in lat)
        plain_p50 = statistics.median(b for _, b in lat)
        off, plain_off = both(
            medians(
                ctx.runs,
                lambda: _rate_off(ctx, server, name, count * 2, True),
                lambda: _rate_off(ctx, server, name, count * 2, False),
            )
        )
    return [
        Row(
            "pg-append",
            "durable append p50, one writer (target: 1.2x plain)",
            "ms",
            ours_p50 * 1e3,
            plain_p50 * 1e3,
            target=plain_p50 * 1.2e3,
            nanobot_what=PLAIN_WHAT,
            rival=RIVAL,
        ),
        Row(
            "pg-append",
            'appends with synchronous_commit off (durability="none"), one writer',
            "events/s",
            off,
            plain_off,
            nanobot_what="INSERT + COMMIT, synchronous_commit off",
            rival=RIVAL,
        ),
    ]


def _ours_writers(ctx: Context, server: str, name: str, per: int, mode: str) -> float:
    """Durable appends/s of 8 threads: ``mode`` "sessions" (8 sessions), "shared" (one
    writer), "stores" (8 store objects on one session)."""
    from sessionledger.eventlog import PostgresStore

    tag = uuid.uuid4().hex[:8]
    stores = [PostgresStore(server, schema=name, pool_size=8)]
    if mode == "stores":
        stores += [PostgresStore(server, schema=name, pool_size=2) for _ in range(7)]
    keys = [f"bench:{mode}:{tag}:{i if mode == 'sessions' else 0}" for i in range(8)]
    writers = [stores[i % len(stores)].session(keys[i]) for i in range(8)]
    msgs = [message_fields(m) for m in _msgs(ctx, per)]

    def work(i: int) -> None:
        w = writers[i]
        for role, content, fields in msgs:
            w.append_message(role, content, **fields)

    seconds = timed_threads(work, 8)
    total = sum(stores[0].state(k).seq for k in set(keys))
    assert total == 8 * per, (total, 8 * per)
    for s in stores:
        s.close()
    return 8 * per / seconds


def _plain_writers(ctx: Context, server: str, name: str, per: int) -> float:
    table = plain_table(server, name)
    tag = uuid.uuid4().hex[:8]
    writers = [PlainWriter(server, table, f"plain:{tag}:{i}") for i in range(8)]
    todo = lines(ctx, per)

    def work(i: int) -> None:
        w = writers[i]
        for event_id, line in todo:
            w.append(event_id, line)

    seconds = timed_threads(work, 8)
    for w in writers:
        w.close()
    return 8 * per / seconds


def _commit_p50(ctx: Context, server: str, name: str) -> float:
    """Seconds of one durable INSERT + COMMIT (p50): what one group commit costs at least."""
    plain = PlainWriter(server, plain_table(server, name), f"plain:{uuid.uuid4().hex[:8]}")
    times = []
    for event_id, line in lines(ctx, 40):
        t0 = time.perf_counter()
        plain.append(event_id, line)
        times.append(time.perf_counter() - t0)
    plain.close()
    return statistics.median(times)


def _async_writers(ctx: Context, server: str, name: str, per: int) -> float:
    import asyncio

    from sessionledger.eventlog import AsyncPostgresStore

    msgs = [message_fields(m) for m in _msgs(ctx, per)]

    async def main() -> float:
        store = await AsyncPostgresStore.connect(server, schema=name, pool_size=8)
        tag = uuid.uuid4().hex[:8]
        writers = [await store.session(f"bench:async:{tag}:{n}") for n in range(8)]

        async def work(n: int) -> None:
            for role, content, fields in msgs:
                await writers[n].append_message(role, content, **fields)

        t0 = time.perf_counter()
        await asyncio.gather(*(work(n) for n in range(8)))
        seconds = time.perf_counter() - t0
        await store.close()
        return 8 * per / seconds

    return asyncio.run(main())


@benchmark("pg-writers", 18, "PostgreSQL: 8 writers, durable, vs plain psycopg")
def bench_pg_writers(ctx: Context) -> list[Row]:
    """8 concurrent writers: on 8 sessions, sharing one session, as 8 stores, as async tasks."""
    server = dsn()
    if server is None:
        return missing("pg-writers", "8 writers on 8 sessions")
    per = 60 if ctx.quick else 200
    runs = max(ctx.runs, 5)  # short runs, alternated: a shared machine's load drifts
    with schema(server) as name:
        eight, plain = both(
            medians(
                runs,
                lambda: _ours_writers(ctx, server, name, per, "sessions"),
                lambda: _plain_writers(ctx, server, name, per),
            )
        )
        shared, _ = medians(runs, lambda: _ours_writers(ctx, server, name, per, "shared"))
        stores, _ = medians(runs, lambda: _ours_writers(ctx, server, name, per // 2, "stores"))
        asynced, _ = medians(runs, lambda: _async_writers(ctx, server, name, per))
        commit = _commit_p50(ctx, server, name)
    what = "8 threads, 8 connections: " + PLAIN_WHAT
    return [
        Row(
            "pg-writers",
            "8 threads on 8 sessions (target: 0.9x plain)",
            "events/s",
            eight,
            plain,
            target=plain * 0.9,
            nanobot_what=what,
            rival=RIVAL,
        ),
        Row(
            "pg-writers",
            "8 threads on one session, one writer (group commit)",
            "events/s",
            shared,
            plain,
            target=4_000,
            note=f"bound here: 8 appends per commit of {commit * 1e3:.1f} ms = {8 / commit:,.0f}/s",
            nanobot_what=what + " (no session order to keep)",
            rival=RIVAL,
        ),
        Row(
            "pg-writers",
            "8 store objects on one session (other processes: compare-and-set races)",
            "events/s",
            stores,
            plain,
            nanobot_what=what + " (no session order to keep)",
            rival=RIVAL,
        ),
        Row(
            "pg-writers",
            "8 asyncio tasks on 8 sessions (AsyncPostgresStore)",
            "events/s",
            asynced,
            plain,
            nanobot_what=what,
            rival=RIVAL,
        ),
    ]

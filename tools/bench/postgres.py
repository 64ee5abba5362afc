"""Benchmark: the PostgreSQL store (``python -m sessionledger.tools.bench_postgres --dsn postgresql://...``).

Measures, in a throwaway schema (dropped at the end):
- appends from 8 concurrent writers (threads) on 8 sessions: single-event transactions and
  batches (``store.batch``), with ``durability="batch"`` (synchronous commit) and ``"none"``;
  the same from 8 asyncio tasks through ``AsyncPostgresStore``;
- ``projections.list_sessions`` over 100,000 sessions, one page of 20 (several filters);
- opening a 10,000-message session from its snapshot, against reading the whole log.
The DSN defaults to ``$SESSIONLEDGER_TEST_PG``. Medians of several runs; never run as a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import msgspec

from sessionledger.eventlog import (
    ZERO_HASH,
    AsyncPostgresStore,
    Header,
    LifecycleChanged,
    MessageAppended,
    PostgresStore,
    encode_line,
    estimate_tokens,
    fold,
)
from sessionledger.eventlog._pg_common import catalog_values, key_parts
from sessionledger.projections import list_sessions

TEXT = "Could you look into the deployment logs and tell me what went wrong overnight? "


def _median_ms(func: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench_appends(dsn: str, schema: str, durability: str, per_writer: int, batch: int) -> float:
    """Events/s from 8 threads on 8 sessions; ``batch`` events per transaction (1: single)."""
    store = PostgresStore(dsn, schema=schema, durability=durability, pool_size=8)
    keys = [f"bench:{durability}:{batch}:{n}" for n in range(8)]
    for key in keys:
        store.session(key)
    barrier = threading.Barrier(9)

    def work(key: str) -> None:
        writer = store.session(key)
        barrier.wait()
        done = 0
        while done < per_writer:
            if batch == 1:
                writer.append_message("user", TEXT)
                done += 1
            else:
                n = min(batch, per_writer - done)
                with store.batch(key) as w:
                    for _ in range(n):
                        w.append_message("user", TEXT)
                done += n

    threads = [threading.Thread(target=work, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for key in keys:
        assert store.state(key).seq == per_writer
    store.close()
    return 8 * per_writer / elapsed


def bench_async_appends(dsn: str, schema: str, per_writer: int) -> float:
    """Events/s from 8 asyncio tasks on 8 sessions through AsyncPostgresStore."""

    async def main() -> float:
        store = await AsyncPostgresStore.connect(dsn, schema=schema, pool_size=8)
        writers = [await store.session(f"bench:async:{n}") for n in range(8)]

        async def work(n: int) -> None:
            for _ in range(per_writer):
                await writers[n].append_message("user", TEXT)

        start = time.perf_counter()
        await asyncio.gather(*(work(n) for n in range(8)))
        elapsed = time.perf_counter() - start
        await store.close()
        return 8 * per_writer / elapsed

    return asyncio.run(main())


def populate(dsn: str, schema: str, sessions: int) -> None:
    """Create ``sessions`` sessions of 2 messages each with COPY (the rows the store writes)."""
    import psycopg
    from psycopg import sql

    PostgresStore(dsn, schema=schema).close()  # create the schema
    start = datetime(2026, 1, 1, tzinfo=UTC)
    channels = ["telegram", "slack", "discord", "web"]
    states = ["active", "idle", "archived"]
    s = sql.Identifier(schema)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with (
            cur.copy(
                sql.SQL(
                    "COPY {}.sessions (key, session_id, seq, head, size, created_at, updated_at, "
                    "agent, channel, peer, title, metadata, preview, messages, live_tokens, "
                    "total_messages, total_tokens, lifecycle) FROM STDIN"
                ).format(s)
            ) as sessions_copy,
        ):
            events: list[tuple[Any, ...]] = []
            for i in range(sessions):
                key = f"agent{i % 10}:{channels[i % 4]}:{i}"
                created = start + timedelta(seconds=i)
                header = Header(
                    seq=0, ts=created, id=os.urandom(16).hex(), key=key, created_at=created
                )
                line0, h = encode_line(header, ZERO_HASH)
                header = msgspec.structs.replace(header, h=h)
                evs = []
                lines = [line0]
                for seq in (1, 2):
                    msg = {"role": "user" if seq == 1 else "assistant", "content": TEXT}
                    ev = MessageAppended.of(
                        seq=seq,
                        ts=created + timedelta(seconds=seq),
                        id=os.urandom(16).hex(),
                        message=msg,
                        tokens=estimate_tokens(msg),
                    )
                    line, h = encode_line(ev, h)
                    evs.append(msgspec.structs.replace(ev, h=h))
                    lines.append(line)
                if states[i % 3] != "active":  # the log says it, so the catalog may
                    ev2 = LifecycleChanged(
                        seq=3,
                        ts=created + timedelta(seconds=3),
                        id=os.urandom(16).hex(),
                        state=states[i % 3],
                    )
                    line, h = encode_line(ev2, h)
                    evs.append(msgspec.structs.replace(ev2, h=h))  # type: ignore[arg-type]
                    lines.append(line)
                state = fold(header, evs)
                values = catalog_values(state)
                agent, channel, peer = key_parts(key)
                kb = key.encode()
                sessions_copy.write_row(
                    (
                        kb,
                        header.id,
                        state.seq,
                        state.head,
                        sum(map(len, lines)),
                        state.created_at,
                        state.updated_at,
                        (agent or "").encode(),
                        (channel or "").encode(),
                        (peer or "").encode(),
                        None,
                        values.metadata,
                        values.preview,
                        len(state.messages),
                        state.live_tokens,
                        state.total_messages,
                        state.total_tokens,
                        state.lifecycle,
                    )
                )
                pos = 0
                for seq, (line, eid) in enumerate(
                    zip(lines, [header.id] + [e.id for e in evs], strict=True)
                ):
                    events.append((kb, seq, pos, eid.encode(), line))
                    pos += len(line)
        with cur.copy(
            sql.SQL("COPY {}.events (key, seq, pos, id, line) FROM STDIN").format(s)
        ) as events_copy:
            for row in events:
                events_copy.write_row(row)
        conn.execute(sql.SQL("ANALYZE {}.sessions").format(s))
        conn.commit()


def bench_list(dsn: str, schema: str, runs: int) -> dict[str, float]:
    """Milliseconds for one page of 20 sessions, by filter."""
    store = PostgresStore(dsn, schema=schema, pool_size=2)
    cases: dict[str, dict[str, Any]] = {
        "newest 20": {},
        "channel=slack": {"channel": "slack"},
        "agent=agent3": {"agent": "agent3"},
        "state=archived": {"state": "archived"},
        "prefix agent7:web:": {"prefix": "agent7:web:"},
        "created range": {
            "created_after": datetime(2026, 1, 1, 0, 10, tzinfo=UTC),
            "created_before": datetime(2026, 1, 1, 0, 20, tzinfo=UTC),
        },
        "page 500 (offset 10,000)": {"offset": 10_000},
    }
    out = {}
    for name, kwargs in cases.items():
        assert len(list_sessions(store, limit=20, **kwargs)) == 20, name
        out[name] = _median_ms(partial(list_sessions, store, limit=20, **kwargs), runs)
    store.close()
    return out


def bench_open(dsn: str, schema: str, messages: int, runs: int) -> dict[str, float]:
    """Milliseconds to open a ``messages``-message session from its snapshot, and without."""
    store = PostgresStore(dsn, schema=schema, pool_size=2)
    key = "bench:open:1"
    done = 0
    while done < messages:
        with store.batch(key) as w:
            for _ in range(min(1000, messages - done)):
                w.append_message("user" if done % 2 else "assistant", TEXT * 3)
                done += 1
    store.close()
    reader = PostgresStore(dsn, schema=schema, pool_size=2)
    full = _median_ms(lambda: reader.load(key, snapshot=False), runs)
    reader.write_snapshot(key)
    with reader.batch(key) as w:  # a short tail after the snapshot, as in real use
        for _ in range(20):
            w.append_message("user", TEXT)
    reader.close()
    opener = PostgresStore(dsn, schema=schema, pool_size=2)

    def open_once() -> None:
        writer = opener.session(key)
        assert writer.seq == messages + 20
        writer.close()

    snap = _median_ms(open_once, runs)
    load = _median_ms(lambda: opener.load(key), runs)
    size = len(opener.read_bytes(key))
    opener.close()
    return {
        "open (snapshot + 20-event tail)": snap,
        "load (snapshot + tail)": load,
        "load without snapshot": full,
        "log MB": size / 1e6,
    }


def main() -> None:
    """Run every benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=os.environ.get("SESSIONLEDGER_TEST_PG"))
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--per-writer", type=int, default=500)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if not args.dsn:
        parser.error("give --dsn or set SESSIONLEDGER_TEST_PG")
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        print(f"PostgreSQL store benchmark ({schema}); 8 writers on 8 sessions")
        for durability in ("batch", "none"):
            single = bench_appends(args.dsn, schema, durability, args.per_writer, 1)
            batched = bench_appends(args.dsn, schema, durability, args.per_writer * 8, 64)
            print(
                f"  appends, durability={durability:5}: single {single:9,.0f} events/s   "
                f"batches of 64 {batched:9,.0f} events/s"
            )
        asynced = bench_async_appends(args.dsn, schema, args.per_writer)
        print(f"  appends, AsyncPostgresStore (asyncio, 8 tasks): {asynced:9,.0f} events/s")
        opened = bench_open(args.dsn, schema, args.messages, args.runs)
        print(f"  {args.messages:,}-message session ({opened.pop('log MB'):.1f} MB log):")
        for name, ms in opened.items():
            print(f"    {name:34} {ms:8.2f} ms")
        list_schema = schema + "_list"
        try:
            start = time.perf_counter()
            populate(args.dsn, list_schema, args.sessions)
            took = time.perf_counter() - start
            print(f"  list_sessions over {args.sessions:,} sessions (loaded in {took:.0f} s):")
            for name, ms in bench_list(args.dsn, list_schema, args.runs).items():
                print(f"    {name:34} {ms:8.2f} ms")
        finally:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{list_schema}" CASCADE')
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()

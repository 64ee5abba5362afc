"""PostgreSQL read benchmarks: opening a session and listing sessions, beside plain SELECTs.

- ``pg-open``: ``store.session(key)`` of a 10,000-message session (2,000 with ``--quick``)
  holding a snapshot and a 20-event tail, on a store object already built (its pool warm);
  plain psycopg: the same rows (snapshot and tail) by one ``SELECT``, fetched, not decoded.
  Also reading the whole log without a snapshot, against a plain ``SELECT`` of every line.
- ``pg-list``: ``projections.list_sessions`` over 100,000 sessions (10,000 with ``--quick``),
  one page of 20, several filters; plain psycopg: the same ``SELECT`` on an open connection.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from ._core import Context, Row, benchmark, medians
from ._pg_base import RIVAL, both, dsn, missing, schema
from ._write import _messages

TEXT = "Could you look into the deployment logs and tell me what went wrong overnight? "


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@benchmark("pg-open", 18, "PostgreSQL: open a long session vs a plain SELECT of its rows")
def bench_pg_open(ctx: Context) -> list[Row]:
    """Open from snapshot + tail; read the whole log."""
    server = dsn()
    if server is None:
        return missing("pg-open", "open a long session")
    import psycopg

    from sessionledger import projections
    from sessionledger.eventlog import PostgresStore

    size = 2_000 if ctx.quick else 10_000
    msgs = _messages(ctx)
    key = "bench:open:1"
    with schema(server) as name:
        store = PostgresStore(server, schema=name, pool_size=2)
        done = 0
        while done < size:
            with store.batch(key) as w:
                for m in msgs[done % len(msgs) : done % len(msgs) + min(500, size - done)]:
                    fields = dict(m)
                    w.append_message(fields.pop("role"), fields.pop("content", None), **fields)
                    done += 1
        store.write_snapshot(key)
        with store.batch(key) as w:  # a short tail after the snapshot, as in real use
            for _ in range(20):
                w.append_message("user", TEXT)
        store.close()
        opener = PostgresStore(server, schema=name, pool_size=2)
        opener.snapshot_every = 0  # closing must not write a snapshot between runs
        total = size + 20
        log_mb = len(opener.read_bytes(key)) / 1e6
        plain = psycopg.connect(server, autocommit=True)
        kb = key.encode()
        snap_sql = f'SELECT seq, data FROM "{name}".snapshots WHERE key = %s'
        tail_sql = f'SELECT pos, line FROM "{name}".events WHERE key = %s AND seq >= %s'
        all_sql = f'SELECT line FROM "{name}".events WHERE key = %s ORDER BY seq'
        snap_seq = int(plain.execute(snap_sql, (kb,)).fetchone()[0])  # type: ignore[index]
        # The rows ours reads: the snapshot, its message records (an index snapshot's, no
        # bodies) and the tail; plain fetches them and decodes nothing.
        both_sql = (
            f'SELECT 0, data FROM "{name}".snapshot_records WHERE key = %(k)s '
            "AND name = 'index' UNION ALL "
            f'SELECT seq, data FROM "{name}".snapshots WHERE key = %(k)s UNION ALL '
            f'(SELECT seq, line FROM "{name}".events WHERE key = %(k)s AND seq >= %(s)s '
            "ORDER BY seq)"
        )
        window = 50
        last_sql = (
            f'SELECT line FROM "{name}".events WHERE key = %(k)s ORDER BY seq DESC LIMIT %(n)s'
        )
        del tail_sql

        def ours_open() -> float:
            holder: list[Any] = []
            seconds = _timed(lambda: holder.append(opener.session(key)))
            assert holder[0].seq == total
            holder[0].close()
            return seconds

        def plain_open() -> float:
            return _timed(
                lambda: plain.execute(both_sql, {"k": kb, "s": snap_seq}, binary=True).fetchall()
            )

        def ours_window() -> float:
            def once() -> None:
                w = opener.session(key)
                assert projections.history(w.state, max_messages=window)
                w.close()

            return _timed(once)

        def plain_window() -> float:
            return _timed(
                lambda: plain.execute(last_sql, {"k": kb, "n": window}, binary=True).fetchall()
            )

        def ours_full() -> float:
            return _timed(lambda: opener.load(key, snapshot=False))

        def plain_full() -> float:
            return _timed(lambda: plain.execute(all_sql, (kb,), binary=True).fetchall())

        runs = max(ctx.runs, 7)
        opened, plain_opened = both(medians(runs, ours_open, plain_open))
        windowed, plain_windowed = both(medians(runs, ours_window, plain_window))
        full, plain_all = both(medians(runs, ours_full, plain_full))
        plain.close()
        opener.close()
    return [
        Row(
            "pg-open",
            f"store.session(key): {size:,}-message session ({log_mb:.1f} MB), index snapshot "
            "+ 20-event tail, checked and folded (target: 1.3x plain)",
            "ms",
            opened * 1e3,
            plain_opened * 1e3,
            target=plain_opened * 1.3e3,
            nanobot_what="one SELECT of the snapshot, its records and the tail rows "
            "(fetched, not decoded)",
            rival=RIVAL,
        ),
        Row(
            "pg-open",
            f"store.session(key) + history(max_messages={window}): open, then the window's "
            "bodies read, checked and decoded",
            "ms",
            windowed * 1e3,
            plain_windowed * 1e3,
            nanobot_what=f"one SELECT of the last {window} lines (fetched, not decoded)",
            rival=RIVAL,
        ),
        Row(
            "pg-open",
            f"store.load(key, snapshot=False): every line of the {size:,}-message log, checked "
            "and folded",
            "ms",
            full * 1e3,
            plain_all * 1e3,
            nanobot_what="one SELECT of every line (fetched, not decoded)",
            rival=RIVAL,
        ),
    ]


def populate(server: str, name: str, sessions: int) -> None:
    """Create ``sessions`` sessions of 2 messages each with COPY (the rows the store writes)."""
    import msgspec
    import psycopg
    from psycopg import sql

    from sessionledger.eventlog import (
        Header,
        LifecycleChanged,
        MessageAppended,
        PostgresStore,
        estimate_tokens,
        fold,
    )
    from sessionledger.eventlog._pg_common import catalog_values, key_parts
    from sessionledger.eventlog.codec import ZERO_HASH, encode_line

    with PostgresStore(server, schema=name) as made:  # create the schema
        made.ensure_schema()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    channels = ["telegram", "slack", "discord", "web"]
    states = ["active", "idle", "archived"]
    s = sql.Identifier(name)
    events: list[tuple[Any, ...]] = []
    with psycopg.connect(server) as conn, conn.cursor() as cur:
        with cur.copy(
            sql.SQL(
                "COPY {}.sessions (key, session_id, seq, head, size, created_at, updated_at, "
                "agent, channel, peer, title, metadata, preview, messages, live_tokens, "
                "total_messages, total_tokens, lifecycle, conversations) FROM STDIN"
            ).format(s)
        ) as sessions_copy:
            for i in range(sessions):
                key = f"agent{i % 10}:{channels[i % 4]}:{i}"
                created = start + timedelta(seconds=i)
                header = Header(
                    seq=0, ts=created, id=os.urandom(16).hex(), key=key, created_at=created
                )
                line0, h = encode_line(header, ZERO_HASH)
                header = msgspec.structs.replace(header, h=h)
                evs: list[Any] = []
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
                    evs.append(msgspec.structs.replace(ev2, h=h))
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
                        values.encoded_conversations(),
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


@benchmark("pg-list", 18, "PostgreSQL: list_sessions vs a plain SELECT of the same page")
def bench_pg_list(ctx: Context) -> list[Row]:
    """One page of 20 sessions by several filters."""
    server = dsn()
    if server is None:
        return missing("pg-list", "list_sessions")
    import psycopg

    from sessionledger.eventlog import PostgresStore
    from sessionledger.eventlog._pg_common import catalog_query
    from sessionledger.projections import CatalogFilter, list_sessions

    count = 10_000 if ctx.quick else 100_000
    cases: dict[str, dict[str, Any]] = {
        "newest 20": {},
        "channel=slack": {"channel": "slack"},
        "state=archived": {"state": "archived"},
        "prefix agent7:web:": {"prefix": "agent7:web:"},
        "page 100 (offset 2,000)": {"offset": 2_000},
    }
    rows: list[Row] = []
    with schema(server) as name:
        populate(server, name, count)
        store = PostgresStore(server, schema=name, pool_size=2)
        plain = psycopg.connect(server, autocommit=True)
        for label, kwargs in cases.items():
            query, params = catalog_query(name, CatalogFilter(limit=20, **kwargs))
            assert len(list_sessions(store, limit=20, **kwargs)) == 20, label

            def ours(kwargs: dict[str, Any] = kwargs) -> float:
                return _timed(lambda: list_sessions(store, limit=20, **kwargs))

            def theirs(query: Any = query, params: list[Any] = params) -> float:
                return _timed(lambda: plain.execute(query, params, binary=True).fetchall())

            mine, floor = both(medians(max(ctx.runs, 9), ours, theirs))
            rows.append(
                Row(
                    "pg-list",
                    f"list_sessions over {count:,} sessions, {label} (target: 1.1x plain)",
                    "ms",
                    mine * 1e3,
                    floor * 1e3,
                    target=floor * 1.1e3,
                    nanobot_what="the same SELECT on an open connection, rows fetched",
                    rival=RIVAL,
                )
            )
        query, params = catalog_query(name, CatalogFilter(limit=20))
        fresh = _fresh_listing(server, name, query, params, max(ctx.runs, 61))
        rows.append(
            Row(
                "pg-list",
                "a new store object, then list_sessions newest 20 (what a CLI run does; "
                "target: 1.1x plain)",
                "ms",
                fresh.wall[0] * 1e3,
                fresh.wall[1] * 1e3,
                target=fresh.wall[1] * 1.1e3,
                nanobot_what="connect, the same SELECT, rows fetched, close",
                note=fresh.note(),
                rival=RIVAL,
            )
        )
        plain.close()
        store.close()
    return rows


class _Fresh:
    """Medians of a new store + listing + close beside plain psycopg's connect + SELECT +
    close: wall clock, the client's CPU and the server backend's CPU (``(ours, plain)`` each,
    seconds; server CPU None when the backend's ``/proc`` entry cannot be read)."""

    def __init__(
        self,
        wall: tuple[float, float],
        client: tuple[float, float],
        server: tuple[float, float] | None,
    ) -> None:
        self.wall, self.client, self.server = wall, client, server

    def note(self) -> str:
        """The CPU figures, which load moves less than wall clock."""
        text = f"client CPU {self.client[0] * 1e3:.2f} vs {self.client[1] * 1e3:.2f} ms"
        if self.server is not None:
            text += (
                f", server backend CPU {self.server[0] * 1e3:.2f} vs {self.server[1] * 1e3:.2f} ms"
            )
        return text


def _backend_cpu(pid: int) -> float | None:
    """Seconds of CPU the server process ``pid`` has used (None: not on this machine)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _fresh_listing(server: str, name: str, query: bytes, params: list[Any], runs: int) -> _Fresh:
    """A new store object + ``list_sessions`` newest 20 + ``close()`` (what a CLI run does)
    against plain psycopg's connect + the same ``SELECT`` + close, ``runs`` pairs, each pair's
    order swapped from the last (whichever goes second follows the other's closing backend).
    The server backend's CPU is read just before each side closes its connection."""
    import psycopg

    from sessionledger.eventlog import PostgresStore
    from sessionledger.projections import list_sessions

    def ours() -> tuple[float, float, float | None]:
        w0, c0 = time.perf_counter(), time.process_time()
        store = PostgresStore(server, schema=name, pool_size=2)
        assert len(list_sessions(store, limit=20)) == 20
        c1, w1 = time.process_time(), time.perf_counter()
        conn = store._db._own  # the store's one connection (a private name: the bench's only)
        backend = None if conn is None else _backend_cpu(conn.pgconn.backend_pid)
        del conn
        w2, c2 = time.perf_counter(), time.process_time()
        store.close()
        del store
        c3, w3 = time.process_time(), time.perf_counter()
        return w1 - w0 + w3 - w2, c1 - c0 + c3 - c2, backend

    def plain() -> tuple[float, float, float | None]:
        w0, c0 = time.perf_counter(), time.process_time()
        conn = psycopg.connect(server, autocommit=True)
        assert len(conn.execute(query, params, binary=True).fetchall()) == 20
        c1, w1 = time.process_time(), time.perf_counter()
        backend = _backend_cpu(conn.pgconn.backend_pid)
        w2, c2 = time.perf_counter(), time.process_time()
        conn.close()
        del conn
        c3, w3 = time.process_time(), time.perf_counter()
        return w1 - w0 + w3 - w2, c1 - c0 + c3 - c2, backend

    ours()
    plain()
    a: list[tuple[float, float, float | None]] = []
    b: list[tuple[float, float, float | None]] = []
    for i in range(runs):
        if i % 2:
            b.append(plain())
            a.append(ours())
        else:
            a.append(ours())
            b.append(plain())

    def med(values: list[float | None]) -> float:
        return statistics.median(v for v in values if v is not None)

    have_server = all(x[2] is not None for x in a + b)
    return _Fresh(
        (med([x[0] for x in a]), med([x[0] for x in b])),
        (med([x[1] for x in a]), med([x[1] for x in b])),
        (med([x[2] for x in a]), med([x[2] for x in b])) if have_server else None,
    )

"""Conversations benchmarks: conversations listed from the catalog, search, appends with an index.

- ``conversations``: ``list_conversations`` on N sessions x 5 conversations beside
  ``list_sessions`` on the same store (the issue's bar: no more than ``list_sessions``).
- ``search``: a search over 100k messages (target 20 ms), the index built from the logs, and
  appends with the search index on and off (the index is caught up off the append path; the
  amortised cost of catching up is reported separately).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from ._core import Context, Row, benchmark, medians, ms, timed
from ._workload import _corpus, _text


def _write_conversations(root: Path, sessions: int, per: int) -> None:
    from sessionledger.eventlog import FileStore

    rng = random.Random(19)
    corpus = _corpus(19)
    with FileStore(root, durability="none") as store:
        for n in range(sessions):
            key = f"agent:telegram:{n}"
            s = store.session(key)
            for c in range(per):
                s.append_message("user", _text(rng, corpus, 80))
                s.append_message("assistant", _text(rng, corpus, 200))
                s.update_metadata(set={"title": f"chat {n}.{c}"})
                if c < per - 1:
                    store.new_session(key)
            s.close()


def _read_rows(rows: list[Any], start: str) -> int:
    """What a caller showing every row reads of it: title, preview and times (``start``: the
    row's start-time field, ``created_at`` or ``started_at``)."""
    n = 0
    for r in rows:
        n += len(r.title) + len(r.preview)
        getattr(r, start), r.updated_at
    return n


@benchmark(
    "conversations", 19, "list_conversations (N sessions x 5 conversations) vs list_sessions"
)
def bench_conversations(ctx: Context) -> list[Row]:
    """Both listings on the same store: catalog current, and from a new store object (the call
    alone, and the call with every row's title, preview and times read, as a CLI or a page
    showing the whole list does)."""
    from sessionledger import projections
    from sessionledger.eventlog import FileStore

    count = 1_000 if ctx.quick else 10_000
    per = 5
    root = ctx.dir(f"conversations{count}")
    if not (root / ".catalog").exists():
        _write_conversations(root, count, per)
    store = FileStore(root)
    assert len(projections.list_sessions(store)) == count
    assert len(projections.list_conversations(store)) == count * per
    runs = ctx.runs

    def sessions(store: Any = store) -> float:
        return timed(lambda: projections.list_sessions(store))

    def conversations(store: Any = store) -> float:
        return timed(lambda: projections.list_conversations(store))

    def sessions_fresh() -> float:
        return timed(lambda: projections.list_sessions(FileStore(root)))

    def conversations_fresh() -> float:
        return timed(lambda: projections.list_conversations(FileStore(root)))

    def sessions_fresh_read() -> float:
        return timed(lambda: _read_rows(projections.list_sessions(FileStore(root)), "created_at"))

    def conversations_fresh_read() -> float:
        return timed(
            lambda: _read_rows(projections.list_conversations(FileStore(root)), "started_at")
        )

    def sessions_fresh_page() -> float:
        return timed(lambda: projections.list_sessions(FileStore(root), limit=20))

    def conversations_fresh_page() -> float:
        return timed(lambda: projections.list_conversations(FileStore(root), limit=20))

    def sessions_page(store: Any = store) -> float:
        return timed(lambda: projections.list_sessions(store, limit=20))

    def conversations_page(store: Any = store) -> float:
        return timed(lambda: projections.list_conversations(store, limit=20))

    t_conv, t_sess = medians(runs, conversations, sessions)
    t_conv_fresh, t_sess_fresh = medians(runs, conversations_fresh, sessions_fresh)
    t_conv_read, t_sess_read = medians(runs, conversations_fresh_read, sessions_fresh_read)
    t_conv_page, t_sess_page = medians(runs, conversations_page, sessions_page)
    t_conv_fp, t_sess_fp = medians(runs, conversations_fresh_page, sessions_fresh_page)
    what = f"{count:,} sessions x {per} conversations"
    rows = []
    for label, ours, base in (
        ("catalog current", t_conv, t_sess),
        ("new store object", t_conv_fresh, t_sess_fresh),
        ("new store object, every row's title, preview and times read", t_conv_read, t_sess_read),
        ("limit=20", t_conv_page, t_sess_page),
        ("new store object, limit=20", t_conv_fp, t_sess_fp),
    ):
        rows.append(
            Row(
                "conversations",
                f"list_conversations, {what}, {label}",
                "ms",
                ms(ours),
                ms(base) if base is not None else None,
                nanobot_what=f"our list_sessions, same store, {label}",
                note="the ratio column compares with our own list_sessions",
            )
        )
    return rows


def _write_messages(root: Path, sessions: int, per: int) -> None:
    from sessionledger.eventlog import FileStore

    rng = random.Random(7)
    corpus = _corpus(7)
    channels = ("telegram", "slack", "discord", "web")
    with FileStore(root, durability="none") as store:
        for n in range(sessions):
            s = store.session(f"agent:{channels[n % 4]}:{n}")
            for i in range(per):
                role = "user" if i % 2 == 0 else "assistant"
                s.append_message(role, _text(rng, corpus, 60 + rng.randrange(400)))
            s.close()


@benchmark("search", 19, "search over 100k messages; appends with the search index on and off")
def bench_search(ctx: Context) -> list[Row]:
    """Index build, search latency (target 20 ms), and what indexing costs appends."""
    from sessionledger import projections
    from sessionledger.eventlog import FileStore

    sessions, per = (200, 100) if ctx.quick else (1_000, 100)
    total = sessions * per
    root = ctx.dir(f"search{total}")
    if not (root / ".catalog").exists():
        _write_messages(root, sessions, per)
    store = FileStore(root)
    projections.drop_search(store)
    t0 = time.perf_counter()
    projections.refresh_search(store)
    build = time.perf_counter() - t0
    rows = [Row("search", f"index built from the logs, {total:,} messages", "ms", ms(build))]
    queries = {
        "one common word": "python",
        "two words": "python release",
        "a rare word, channel filter": "traceback",
    }
    for label, words in queries.items():
        channel = "slack" if "channel" in label else None
        hits = projections.search(store, words, channel=channel)
        assert hits, f"no hit for {words!r}"

        def once(words: str = words, channel: str | None = channel) -> float:
            return timed(lambda: projections.search(store, words, channel=channel))

        t, _ = medians(max(ctx.runs, 5), once)
        rows.append(
            Row(
                "search",
                f"search {label} ({words!r}), {total:,} messages, limit 20",
                "ms",
                ms(t),
                target=20.0,
            )
        )
    rows += _pg_search_rows(ctx, store, queries)
    rows += _append_rows(ctx)
    return rows


def _pg_search_rows(ctx: Context, files: Any, queries: dict[str, str]) -> list[Row]:
    """The same searches on a PostgreSQL store holding the same logs (imported whole)."""
    from sessionledger import projections
    from sessionledger.eventlog import PostgresStore

    from ._pg_base import dsn, missing, schema

    server = dsn()
    total = sum(s.messages for s in projections.list_sessions(files))
    if server is None:
        return missing("search", f"PostgreSQL search, {total:,} messages")
    rows: list[Row] = []
    with schema(server) as name, PostgresStore(server, schema=name) as store:
        for key in files.keys():
            store.import_bytes(key, files.read_bytes(key))
        t0 = time.perf_counter()
        projections.refresh_search(store)
        build = time.perf_counter() - t0
        rows.append(
            Row(
                "search",
                f"PostgreSQL index built from the logs, {total:,} messages",
                "ms",
                ms(build),
            )
        )
        for label, words in queries.items():
            channel = "slack" if "channel" in label else None
            for order in ("relevance", "recent"):
                assert projections.search(store, words, channel=channel, order=order)

                def once(
                    words: str = words, channel: str | None = channel, order: Any = order
                ) -> float:
                    return timed(
                        lambda: projections.search(store, words, channel=channel, order=order)
                    )

                t, _ = medians(max(ctx.runs, 5), once)
                rows.append(
                    Row(
                        "search",
                        f"PostgreSQL search {label} ({words!r}, {order}), {total:,} messages, "
                        "limit 20",
                        "ms",
                        ms(t),
                        target=20.0,
                    )
                )
    return rows


def _append_rows(ctx: Context) -> list[Row]:
    """Appends with no index vs with a search index kept beside the store; then catching up."""
    from sessionledger import projections
    from sessionledger.eventlog import FileStore

    n = 2_000 if ctx.quick else 10_000
    rng = random.Random(3)
    corpus = _corpus(3)
    texts = [_text(rng, corpus, 200) for _ in range(n)]

    def appends(indexed: bool) -> float:
        with ctx.scratch("append-index") as root, FileStore(root, durability="none") as store:
            s = store.session("agent:telegram:1")
            s.append_message("user", "warm up")
            if indexed:
                projections.refresh_search(store)  # the index exists and is current
            t0 = time.perf_counter()
            for text in texts:
                s.append_message("user", text)
            return n / (time.perf_counter() - t0)

    off, on = medians(ctx.runs, lambda: appends(False), lambda: appends(True))

    def amortised() -> float:
        with ctx.scratch("append-index") as root, FileStore(root, durability="none") as store:
            s = store.session("agent:telegram:1")
            t0 = time.perf_counter()
            for i, text in enumerate(texts):
                s.append_message("user", text)
                if i % 1_000 == 999:
                    projections.refresh_search(store)  # a batch: 1,000 messages at once
            projections.refresh_search(store)
            return n / (time.perf_counter() - t0)

    both, _ = medians(ctx.runs, amortised)
    return [
        Row(
            "search",
            f"append with the search index on (off the append path), {n:,} messages",
            "events/s",
            on,
            off,
            nanobot_what="append with no index",
            note="ratio >= 0.91 keeps appends within 10%",
        ),
        Row(
            "search",
            f"append + index caught up every 1,000 messages (amortised), {n:,} messages",
            "events/s",
            both,
            off,
            nanobot_what="append with no index",
        ),
    ]

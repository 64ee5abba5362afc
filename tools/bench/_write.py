"""Write-side benchmarks : appends under each durability, beside nanobot's saves.

nanobot persists a message by ``add_message`` then ``save``, which rewrites the whole session
file, so its cost per message grows with the session. It is measured by sampling: a session
already holding 1,000 (or 10,000) messages gets a few more, each followed by a full save; the
median save is the per-message cost at that size. Running 10,000 full saves would take minutes
and say nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._core import Context, Row, benchmark, medians, timed, timed_threads
from ._workload import conversation


def _messages(ctx: Context) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] | None = ctx.cache.get("conversation")
    if msgs is None:
        msgs = conversation()
        ctx.cache["conversation"] = msgs
    return msgs


def _append_all(writer: Any, messages: list[dict[str, Any]]) -> None:
    append = writer.append_message
    for m in messages:
        fields = dict(m)
        append(fields.pop("role"), fields.pop("content", None), **fields)


def _ours_rate(ctx: Context, durability: str, messages: list[dict[str, Any]]) -> float:
    from sessionledger.eventlog import FileStore

    with ctx.scratch(f"append-{durability}") as root:
        store = FileStore(root, durability=durability)
        writer = store.session("bench:append")
        seconds = timed(lambda: _append_all(writer, messages))
        store.close()
    return len(messages) / seconds


def _nanobot_rate(ctx: Context, size: int, samples: int, *, fsync: bool) -> float:
    """Messages per second nanobot sustains at ``size`` messages: add_message + full save."""
    nb = ctx.nanobot
    assert nb is not None
    msgs = _messages(ctx)
    with ctx.scratch("nanobot-save") as root:
        manager = nb.SessionManager(root)
        session = manager.get_or_create("bench:append")
        session.messages = [dict(m) for m in msgs[:size]]
        manager.save(session)
        extra = msgs[size : size + samples] if size + samples <= len(msgs) else msgs[:samples]
        times: list[float] = []
        for m in extra:
            fields = dict(m)
            role = fields.pop("role")
            content = fields.pop("content", None)
            fields.pop("timestamp", None)  # add_message stamps its own

            def one(role: str = role, content: Any = content, fields: Any = fields) -> None:
                session.add_message(role, content, **fields)
                manager.save(session, fsync=fsync)

            times.append(timed(one))
            # Keep the size fixed: the sample measures the cost *at* ``size`` messages.
            session.messages.pop()
    times.sort()
    return 1.0 / times[len(times) // 2]


@benchmark(
    "append", 2, "Appends (one writer), durability none / always, vs nanobot add_message+save"
)
def bench_append(ctx: Context) -> list[Row]:
    """Appends with no fsync and with an fsync each, beside nanobot's full-file saves."""
    msgs = _messages(ctx)
    n_none = 3_000 if ctx.quick else len(msgs)
    n_always = 300 if ctx.quick else 1_000
    nb = ctx.nanobot is not None
    samples = 8 if ctx.quick else 30
    samples_10k = 3 if ctx.quick else 10
    rows: list[Row] = []

    none, nb_1k = medians(
        ctx.runs,
        lambda: _ours_rate(ctx, "none", msgs[:n_none]),
        (lambda: _nanobot_rate(ctx, 1_000, samples, fsync=False)) if nb else None,
    )
    rows.append(
        Row(
            "append",
            f'durability="none", {n_none:,} messages',
            "events/s",
            none,
            nb_1k,
            target=100_000,
            nanobot_what="add_message+save at 1k msgs",
        )
    )
    if nb:
        _, nb_10k = medians(
            max(1, ctx.runs // 2),
            lambda: 0.0,
            lambda: _nanobot_rate(ctx, 10_000, samples_10k, fsync=False),
        )
        rows.append(
            Row(
                "append",
                'durability="none" (same figure)',
                "events/s",
                none,
                nb_10k,
                nanobot_what="add_message+save at 10k msgs",
            )
        )
    always, nb_sync = medians(
        ctx.runs,
        lambda: _ours_rate(ctx, "always", msgs[:n_always]),
        (lambda: _nanobot_rate(ctx, 1_000, samples, fsync=True)) if nb else None,
    )
    rows.append(
        Row(
            "append",
            f'durability="always" (fsync each), {n_always:,} messages',
            "events/s",
            always,
            nb_sync,
            target=2_000,
            nanobot_what="add_message+save(fsync=True) at 1k",
        )
    )
    ctx.cache["nanobot_fsync_1k"] = nb_sync
    return rows


def _threaded_rate(
    ctx: Context, messages: list[dict[str, Any]], threads: int, sessions: int
) -> float:
    """Events/s of ``threads`` threads appending with group commit to ``sessions`` sessions."""
    from sessionledger.eventlog import FileStore

    per = len(messages) // threads
    with ctx.scratch("append-batch") as root:
        store = FileStore(root, durability="batch")
        writers = [store.session(f"bench:batch:{i}") for i in range(sessions)]
        chunks = [messages[i * per : (i + 1) * per] for i in range(threads)]
        try:
            seconds = timed_threads(
                lambda i: _append_all(writers[i % sessions], chunks[i]), threads
            )
        finally:
            store.close()
    return per * threads / seconds


@benchmark("batch", 2, 'Group commit (durability="batch") with several threads')
def bench_batch(ctx: Context) -> list[Row]:
    """Threads appending with group commit: to their own sessions, and all to one session."""
    msgs = _messages(ctx)
    n = 2_000 if ctx.quick else 8_000
    nb_sync = ctx.cache.get("nanobot_fsync_1k")
    if nb_sync is None and ctx.nanobot is not None:
        nb_sync = _nanobot_rate(ctx, 1_000, 8 if ctx.quick else 20, fsync=True)
    nb_what = "save(fsync=True) at 1k (no group commit)" if nb_sync is not None else ""
    rows: list[Row] = []
    for threads, sessions, label in (
        (8, 8, "8 threads, 8 sessions"),
        (8, 1, "8 threads, one session"),
        (64, 1, "64 threads, one session"),
    ):

        def one(t: int = threads, s: int = sessions) -> float:
            return _threaded_rate(ctx, msgs[:n], t, s)

        rate, _ = medians(ctx.runs, one)
        rows.append(
            Row(
                "batch",
                f'durability="batch", {label}',
                "events/s",
                rate,
                nb_sync,
                target=50_000,
                nanobot_what=nb_what,
            )
        )
    return rows


def write_log(ctx: Context, name: str, messages: list[dict[str, Any]], key: str) -> Path:
    """Write ``messages`` once as our log (shared setup, kept for the run); return the root."""
    from sessionledger.eventlog import FileStore

    root = ctx.root / name
    if not root.exists():
        store = FileStore(root, durability="none")
        store.snapshot_every = 0  # no snapshot on close: readers must fold the whole log
        _append_all(store.session(key), messages)
        store.close()
    return root


def write_many(
    ctx: Context, name: str, sessions: int, per: int = 200
) -> tuple[Any, Any | None, list[str]]:
    """Write ``sessions`` sessions of ``per`` messages as our logs and as nanobot files.

    Each session is a different window of one short-tool-output conversation. Returns our
    store root, nanobot's workspace (None without nanobot) and the keys. Untimed setup.
    """
    from sessionledger.eventlog import FileStore

    pool: list[dict[str, Any]] | None = ctx.cache.get("pool")
    if pool is None:
        pool = conversation(4_000, seed=7, big_tools=False)
        ctx.cache["pool"] = pool
    keys = [f"bench:telegram:peer{i:05d}" for i in range(sessions)]

    def window(i: int) -> list[dict[str, Any]]:
        start = (i * 37) % (len(pool) - per)
        return pool[start : start + per]

    root = ctx.root / name
    if not root.exists():
        store = FileStore(root, durability="none")
        for i, key in enumerate(keys):
            writer = store.session(key, metadata={"title": f"Session {i}"})
            _append_all(writer, window(i))
            writer.close()
        store.close()
    nb_root = None
    if ctx.nanobot is not None:
        nb_root = ctx.root / (name + "-nanobot")
        if not nb_root.exists():
            manager = ctx.nanobot.SessionManager(nb_root)
            for i, key in enumerate(keys):
                session = manager.get_or_create(key)
                session.metadata["title"] = f"Session {i}"
                session.messages = [dict(m) for m in window(i)]
                manager.save(session)
                manager.invalidate(key)
    return root, nb_root, keys


def write_nanobot(ctx: Context, name: str, messages: list[dict[str, Any]], key: str) -> Path:
    """Write ``messages`` once as a nanobot session; return its workspace."""
    assert ctx.nanobot is not None
    root = ctx.root / name
    if not root.exists():
        manager = ctx.nanobot.SessionManager(root)
        session = manager.get_or_create(key)
        session.messages = [dict(m) for m in messages]
        manager.save(session)
    return root

"""The cost of encryption at rest: sealed beside plaintext, same messages, same run.

In these rows the comparison column holds the plaintext store's figure (not nanobot's), and the
note gives the cost factor (or, for history, the extra milliseconds). Goals: at most
1.5x on append; ``history(500)`` within 2 ms of plaintext.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._core import Context, Row, benchmark, medians, ms, timed
from ._write import _append_all, _messages

KEY = "bench:sealed"


def _store(root: Path, sealed: bool, durability: str = "none") -> Any:
    from sessionledger.eventlog import FileStore, LocalKeyFile

    provider = LocalKeyFile(root.parent / (root.name + ".master.key")) if sealed else None
    return FileStore(root, durability=durability, key_provider=provider)


def _append_rate(ctx: Context, sealed: bool, messages: list[dict[str, Any]]) -> float:
    with ctx.scratch("sealed" if sealed else "plain") as root:
        store = _store(root / "s", sealed)
        store.snapshot_every = 0
        writer = store.session(KEY)
        seconds = timed(lambda: _append_all(writer, messages))
        store.close()
    return len(messages) / seconds


def _written(ctx: Context, sealed: bool, messages: list[dict[str, Any]]) -> Path:
    """A log of ``messages`` (kept for the run), with a snapshot at its end."""
    root = ctx.root / ("priv-sealed" if sealed else "priv-plain") / "s"
    if not root.exists():
        store = _store(root, sealed)
        store.snapshot_every = 0
        _append_all(store.session(KEY), messages)
        store.close()
        store.write_snapshot(KEY)
    return root


@benchmark("privacy", 22, "Encryption at rest: sealed vs plaintext (append, open, history)")
def bench_privacy(ctx: Context) -> list[Row]:
    """Append, whole-log open and snapshot open + history(500), sealed beside plaintext."""
    from sessionledger import projections

    msgs = _messages(ctx)
    n = 3_000 if ctx.quick else len(msgs)
    rows: list[Row] = []

    sealed, plain = medians(
        ctx.runs,
        lambda: _append_rate(ctx, True, msgs[:n]),
        lambda: _append_rate(ctx, False, msgs[:n]),
    )
    assert plain is not None
    rows.append(
        Row(
            "privacy",
            f'append, durability="none", {n:,} messages (sealed)',
            "events/s",
            sealed,
            plain,
            nanobot_what="plaintext store, same run",
            note=f"cost {plain / sealed:.2f}x (goal <= 1.5x)",
        )
    )

    roots = {s: _written(ctx, s, msgs[:n]) for s in (True, False)}

    def load(sealed: bool) -> float:
        store = _store(roots[sealed], sealed)
        return timed(lambda: store.load(KEY, snapshot=False))

    t_sealed, t_plain = medians(ctx.runs, lambda: load(True), lambda: load(False))
    assert t_plain is not None
    rows.append(
        Row(
            "privacy",
            f"load(key) of the whole {n:,}-message log (sealed)",
            "ms",
            ms(t_sealed),
            ms(t_plain),
            nanobot_what="plaintext store, same run",
            note=f"cost {t_sealed / t_plain:.2f}x",
        )
    )

    def window(sealed: bool) -> float:
        store = _store(roots[sealed], sealed)

        def work() -> None:
            loaded = store.load(KEY)
            assert loaded.snapshot_seq == loaded.state.seq
            got = projections.history(loaded.state, max_messages=500, max_tokens=128_000)
            assert got

        return timed(work)

    h_sealed, h_plain = medians(ctx.runs, lambda: window(True), lambda: window(False))
    assert h_plain is not None
    rows.append(
        Row(
            "privacy",
            "load(key) from its snapshot + history(500 msgs, 128k tokens) (sealed)",
            "ms",
            ms(h_sealed),
            ms(h_plain),
            nanobot_what="plaintext store, same run",
            note=f"+{ms(h_sealed - h_plain):.2f} ms (goal <= 2 ms)",
        )
    )
    return rows

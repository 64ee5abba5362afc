"""One benchmark in a process of its own (``python -m sessionledger.tools.bench._child NAME``).

Why: a benchmark leaves its process changed (its imports, what it cached, a larger and more
scattered heap), and a figure timed after a full collection (:func:`~._core.timed`) pays for
walking and refilling all of it. Measured on the growth benchmark (open + ``history(500)`` at
10k, 2026-11-26): 2.8 ms in a fresh process, 3.5 ms after the ``adapter`` and ``append``
benchmarks ran in the same process, and the stdlib raw tail read beside it moved the same way
(3.0 -> 3.9 ms) with none of our code in it. So every benchmark runs in a fresh child by
default: a figure no longer depends on which benchmarks ran before it (``--same-process``
keeps the old way).

Invariants: the child prints one line to stdout, ``ROWS <json>`` (the rows it measured),
after everything else it printed there and a newline (what it printed before need not end in
one); its progress goes to stderr. A benchmark that raises
exits 1 with the traceback on stderr and no ``ROWS`` line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._core import REGISTRY, Context, Row, load_nanobot

MARK = "ROWS "


def encode_rows(rows: Sequence[Row]) -> str:
    """The ``ROWS`` line for ``rows``."""
    return MARK + json.dumps([dataclasses.asdict(r) for r in rows])


def split_output(stdout: str) -> tuple[str, list[Row] | None]:
    """What a child's benchmark printed itself (ending in a newline unless empty), and the
    rows of its last ``ROWS`` line (None when it has none). The child writes a newline before
    that line, so it starts a line even after output that did not end in one."""
    head, mark, tail = ("\n" + stdout).rpartition("\n" + MARK)
    if not mark:
        head, rows = "\n" + stdout, None
    else:
        items: list[dict[str, Any]] = json.loads(tail.partition("\n")[0])
        rows = [Row(**item) for item in items]
    head = head[1:]
    if head and not head.endswith("\n"):
        head += "\n"
    return head, rows


def decode_rows(stdout: str) -> list[Row] | None:
    """The rows of a child's stdout (its last ``ROWS`` line), or None when it has none."""
    return split_output(stdout)[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one registered benchmark and print its rows."""
    from . import _main  # noqa: F401  (registers every benchmark)

    p = argparse.ArgumentParser(prog="python -m sessionledger.tools.bench._child")
    p.add_argument("name", choices=sorted(REGISTRY))
    p.add_argument("--root", required=True)
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-nanobot", action="store_true")
    args = p.parse_args(argv)
    nb, note = load_nanobot() if not args.no_nanobot else (None, "skipped (--no-nanobot)")
    ctx = Context(
        quick=args.quick,
        root=Path(args.root),
        nanobot=nb,
        runs=args.runs,
        nanobot_missing=note if nb is None else "",
    )
    try:
        rows = REGISTRY[args.name].run(ctx)
    except Exception:
        traceback.print_exc()
        return 1
    print("\n" + encode_rows(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

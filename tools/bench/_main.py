"""The command line of the suite: choose benchmarks, run them, print and optionally record.

Invariants: every benchmark runs in one scratch directory removed at the end (kept with
``--keep``); ``HOME`` points into it while nanobot runs, so nanobot's legacy-directory lookups
never touch the real home; a benchmark that raises is reported and the others still run; each
benchmark runs in a fresh child process unless ``--same-process`` (see ``_child``: a figure
must not depend on which benchmarks ran before it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from . import (  # noqa: F401  (they register their benchmarks)
    _adapters,
    _async,
    _conversations,
    _pg_read,
    _pg_write,
    _privacy,
    _read,
    _replay,
    _write,
    _writers,
    growth,
)
from ._core import REGISTRY, Context, Row, load_nanobot, machine
from ._report import machine_line, markdown, table

_REPO = Path(__file__).resolve().parents[2]
DOCS = _REPO / "docs" / "BENCHMARKS.md"
_BEGIN = "<!-- bench:results -->"
_END = "<!-- /bench:results -->"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sessionledger.tools.bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer runs (< 60 s)")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only these benchmarks (repeat or comma-separate); see --list",
    )
    p.add_argument("--runs", type=int, default=None, help="runs per figure (median taken)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--dir", default=None, help="scratch directory parent (default: .bench/tmp)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument(
        "--update-docs", action="store_true", help=f"write the result table into {DOCS.name}"
    )
    p.add_argument("--no-nanobot", action="store_true", help="skip nanobot even if installed")
    p.add_argument(
        "--same-process",
        action="store_true",
        help="run every benchmark in this process (default: each in a fresh child process)",
    )
    return p


def _scratch_parent(arg: str | None) -> Path:
    # By default on the project's own disk, not a tmpfs: fsync figures must mean something.
    path = Path(arg) if arg else _REPO / ".bench" / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(
    names: Sequence[str] = (),
    *,
    quick: bool = False,
    runs: int | None = None,
    parent: Path | None = None,
    keep: bool = False,
    use_nanobot: bool = True,
    console: Console | None = None,
    same_process: bool = False,
) -> list[Row]:
    """Run the named benchmarks (all when empty), print their tables, return every row.

    Each runs in a fresh child process (see ``_child``) unless ``same_process``."""
    console = console or Console()
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise SystemExit(
            f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(REGISTRY)}"
        )
    nb, note = load_nanobot() if use_nanobot else (None, "skipped (--no-nanobot)")
    missing = note if nb is None else ""
    if nb is not None and note:
        console.print(f"[yellow]{note}[/yellow]")
    root = Path(tempfile.mkdtemp(prefix="bench-", dir=parent or _scratch_parent(None)))
    ctx = Context(
        quick=quick,
        root=root,
        nanobot=nb,
        runs=runs or (3 if quick else 5),
        nanobot_missing=missing,
    )
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(root / "home")
    rows: list[Row] = []
    try:
        for name in names or list(REGISTRY):
            entry = REGISTRY[name]
            t0 = time.perf_counter()
            if same_process:
                try:
                    got = entry.run(ctx)
                except Exception:
                    console.print(f"[red]benchmark {name} failed:[/red]")
                    console.print(traceback.format_exc(), markup=False)
                    continue
            else:
                child = _in_child(name, ctx, use_nanobot)
                if child is None:
                    console.print(f"[red]benchmark {name} failed (its traceback is above)[/red]")
                    continue
                got = child
            rows.extend(got)
            console.print(
                table(
                    got,
                    title=f"{entry.title}  [dim](issue {entry.issue}, {time.perf_counter() - t0:.1f} s)[/dim]",
                    nanobot_missing=missing,
                )
            )
    finally:
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
        if keep:
            console.print(f"scratch kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if nb is None:
        console.print(f"nanobot: {missing}")
    return rows


def _in_child(name: str, ctx: Context, use_nanobot: bool) -> list[Row] | None:
    """Run benchmark ``name`` in a fresh Python process; its rows, or None when it failed."""
    from ._child import split_output  # imported here: ``-m ..._child`` must find it unloaded

    # A directory of its own each time (``--only x,x`` runs x twice).
    root = Path(tempfile.mkdtemp(prefix=f"child-{name}-", dir=ctx.root))
    command = [sys.executable, "-m", f"{__package__}._child", name, "--root", str(root)]
    command += ["--runs", str(ctx.runs)]
    command += ["--quick"] if ctx.quick else []
    command += [] if use_nanobot else ["--no-nanobot"]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    printed, rows = split_output(done.stdout)
    print(printed, end="")  # what the benchmark printed itself
    return rows if done.returncode == 0 else None


def update_docs(rows: Sequence[Row], *, quick: bool, path: Path = DOCS) -> None:
    """Replace the result section of ``docs/BENCHMARKS.md`` with these rows and this machine."""
    block = "\n".join(
        (
            _BEGIN,
            f"Measured {machine_line(machine())}{' (--quick)' if quick else ''}.",
            "",
            markdown(rows),
            _END,
        )
    )
    text = (
        path.read_text(encoding="utf-8") if path.exists() else f"# Benchmarks\n\n{_BEGIN}\n{_END}\n"
    )
    if _BEGIN not in text:
        text = text.rstrip("\n") + f"\n\n{_BEGIN}\n{_END}\n"
    text = re.sub(re.escape(_BEGIN) + ".*?" + re.escape(_END), lambda _: block, text, flags=re.S)
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sessionledger.tools.bench``."""
    args = _parser().parse_args(argv)
    console = Console()
    if args.list:
        for entry in REGISTRY.values():
            console.print(f"{entry.name:<10} issue {entry.issue}  {entry.title}", markup=False)
        return 0
    names = [n.strip() for arg in args.only for n in arg.split(",") if n.strip()]
    facts = machine()
    console.print(f"[bold]sessionledger benchmarks[/bold]  {machine_line(facts)}")
    rows = run(
        names,
        quick=args.quick,
        runs=args.runs,
        parent=_scratch_parent(args.dir),
        keep=args.keep,
        use_nanobot=not args.no_nanobot,
        console=console,
        same_process=args.same_process,
    )
    if args.update_docs:
        update_docs(rows, quick=args.quick)
        console.print(f"wrote {DOCS}")
    return 0

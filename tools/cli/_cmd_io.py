"""Commands that move data or watch it: ``import``, ``export``, ``follow`` (``tail -f``), ``stats``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.table import Column, Table
from rich.text import Text

from sessionledger import projections, replay
from sessionledger.eventlog import BaseStore

from ._cmd_audit import progress_bar
from ._common import (
    CliError,
    Command,
    human_bytes,
    make_console,
    make_table,
    need_session,
    open_store,
    print_json,
    print_json_lines,
)
from ._render_events import event_dict, timeline_table

# -- import ------------------------------------------------------------------------------------


def _import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="nanobot session files or directories, seed-001 JSON session files, or our logs",
    )


def _sources(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise CliError(f"{path}: no such file or directory")
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json")
            )
            if not found:
                raise CliError(f"{path}: no .jsonl or .json files in it")
            out += found
        else:
            out.append(path)
    return out


def _import(args: argparse.Namespace) -> int:
    files = _sources(args.paths)
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema, create=True)
    report = replay.ImportReport()
    with progress_bar(len(files), "importing") as bar:
        task = bar.add_task("import", total=len(files))
        for path in files:
            report.sessions += replay.import_path(store, path).sessions
            bar.advance(task)
    if args.json:
        print_json(report.sessions)
        return 0 if report.ok else 1
    console = make_console()
    table = make_table(
        Column("session", overflow="fold"),
        Column("from", overflow="fold", style="dim"),
        Column("outcome"),
        Column("msgs", justify="right"),
        Column("notes", overflow="fold"),
    )
    styles = {"created": "green", "unchanged": "dim", "extended": "green", "clash": "red"}
    for s in report.sessions:
        notes = list(s.notes)
        if s.bad_lines:
            notes.insert(0, f"{s.bad_lines} bad line(s) kept in quarantine")
        table.add_row(
            s.key,
            os.path.basename(s.source),
            Text(s.outcome, style=styles.get(s.outcome, "")),
            str(s.messages),
            "; ".join(notes),
        )
    console.print(table)
    console.print(
        Text(
            f"{len(report.created)} created, {len(report.extended)} extended, "
            f"{len(report.unchanged)} unchanged, {len(report.clashes)} clashes, "
            f"{report.bad_lines} bad lines quarantined",
            style="bold" if report.ok else "bold red",
        )
    )
    return 0 if report.ok else 1


# -- export ------------------------------------------------------------------------------------


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", nargs="?", help="one session (or --all)")
    p.add_argument("--all", action="store_true", help="every session of the store")
    p.add_argument("--to", metavar="DIR", help="directory to write into (jsonl, nanobot)")
    p.add_argument(
        "--format",
        choices=("jsonl", "nanobot", "md", "html"),
        default="jsonl",
        help="our log lines (byte-identical), nanobot's plain format, or a readable Markdown or "
        "self-contained HTML document of one session",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="md/html: write to FILE (default: stdout)"
    )
    p.add_argument(
        "--redact",
        nargs="+",
        metavar="FIELD",
        default=[],
        help="md/html: mask these fields: content, ROLE.FIELD (tool.content), metadata.KEY, "
        "summary",
    )


def _export(args: argparse.Namespace) -> int:
    if args.format in ("md", "html"):
        from ._cmd_web import export_readable

        return export_readable(args)
    if args.output or args.redact:
        raise CliError("-o and --redact are for --format md or html; jsonl and nanobot use --to")
    if not args.to:
        raise CliError("give --to DIR to export as jsonl or nanobot")
    if bool(args.key) == bool(args.all):
        raise CliError("give one KEY or --all")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    keys = store.keys() if args.all else [args.key]
    if args.key:
        need_session(store, args.key)
    target = Path(args.to).expanduser()
    if target.exists() and not target.is_dir():
        raise CliError(f"{target} is not a directory")
    files: list[replay.ExportedFile] = []
    with progress_bar(len(keys), "exporting") as bar:
        task = bar.add_task("export", total=len(keys))
        for key in keys:
            files += replay.export_store(store, target, format=args.format, keys=[key]).files
            bar.advance(task)
    clashes = [f for f in files if f.outcome == "clash"]
    if args.json:
        print_json(files)
        return 1 if clashes else 0
    console = make_console()
    for f in files:
        style = {"written": "green", "unchanged": "dim", "clash": "red"}[f.outcome]
        line = Text(f"{f.outcome:9} ", style=style) + Text(f"{f.path} ({human_bytes(f.bytes)})")
        if f.note:
            line.append(f"  {f.note}", style="yellow")
        console.print(line)
    console.print(Text(f"{len(files)} sessions to {target} ({args.format})", style="bold"))
    return 1 if clashes else 0


# -- follow (sessionledger tail -f) --------------------------------------------------------------


def follow_events(store: BaseStore, key: str, after: int, idle: float | None, as_json: bool) -> int:
    """Print ``key``'s events after seq ``after``, then new ones as they are appended."""
    console = make_console()
    with replay.follow(store, key, after_seq=after, idle_timeout=idle) as stream:
        for event in stream:
            if as_json:
                print_json_lines([event_dict(event)])
            else:
                console.print(timeline_table([event], show_header=False))
    return 0


# -- stats -------------------------------------------------------------------------------------


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--budget", type=int, default=None, help="token budget: show each session's usage ratio"
    )


def _stats(args: argparse.Namespace) -> int:
    if args.budget is not None and args.budget <= 0:
        raise CliError(f"--budget must be > 0, not {args.budget}")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    stats = projections.store_stats(store, budget=args.budget)
    if args.json:
        print_json(stats)
        return 0
    console = make_console()
    table = make_table(
        Column(style="bold"),
        Column(justify="right"),
        show_header=False,
    )
    for name, value in (
        ("sessions", stats.total_sessions),
        ("active", stats.active_sessions),
        ("idle", stats.idle_sessions),
        ("archived", stats.archived_sessions),
        ("live messages", stats.total_messages),
        ("live tokens", stats.total_tokens),
    ):
        table.add_row(name, f"{value:,}")
    console.print(table)
    if args.budget:
        top = stats.over(0.0)[:10]
        usage = Table(
            title=f"usage of a {args.budget:,}-token budget", box=None, header_style="bold"
        )
        usage.add_column("session", overflow="fold")
        usage.add_column("ratio", justify="right")
        for key in top:
            ratio = stats.usage[key]
            usage.add_row(key, Text(f"{ratio:.0%}", style="red" if ratio >= 0.85 else ""))
        console.print(usage)
    return 0


COMMANDS = [
    Command(
        "import",
        "import nanobot session files/directories, seed-001 JSON sessions or our logs (twice is a no-op)",
        "sessionledger import ~/.nanobot/workspace/sessions",
        _import_args,
        _import,
        json=True,
    ),
    Command(
        "export",
        "export sessions as our JSONL (byte-identical) or nanobot's format, or one as Markdown/HTML",
        "sessionledger export telegram:42 --format html -o kyoto.html --redact tool.content",
        _export_args,
        _export,
        json=True,
    ),
    Command(
        "stats",
        "the store's figures: sessions by state, messages, tokens, usage against a budget",
        "sessionledger stats --budget 128000",
        _stats_args,
        _stats,
        json=True,
    ),
]

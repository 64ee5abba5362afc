"""Audit commands: ``verify``, ``recover``, ``repair``, ``timeline``, ``diff``.

Exit codes: 0 when all is well, 1 when problems were found (or a repair cut something), 2 for
bad input. Long work over many sessions shows a progress bar on a terminal.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

from sessionledger import replay

from ._common import (
    Command,
    cut,
    human_bytes,
    make_console,
    make_table,
    need_session,
    open_store,
    parse_point,
    print_json,
    to_jsonable,
)
from ._render_events import content_text


def progress_bar(total: int, what: str) -> Progress:
    """A progress bar for ``total`` items (drawn only on a terminal)."""
    return Progress(
        TextColumn(f"[bold]{what}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=make_console(stderr=True),
        transient=True,
        disable=total < 2,
    )


# -- verify ------------------------------------------------------------------------------------


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", nargs="?", help="one session (default: every session)")


def _verify(args: argparse.Namespace) -> int:
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    keys = [args.key] if args.key else store.keys()
    if args.key:
        need_session(store, args.key)
    report = replay.VerifyReport()
    with progress_bar(len(keys), "verifying") as bar:
        task = bar.add_task("verify", total=len(keys))
        for key in keys:
            if store.exists(key):
                report.sessions.append(replay.verify_session(store, key))
            bar.advance(task)
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "checked": report.checked,
                "bytes": report.bytes,
                "problems": [f._asdict() for f in report.problems],
                "sessions": [
                    {"key": s.key, "ok": s.ok, "seq": s.seq, "head": s.head, "lines": s.lines}
                    for s in report.sessions
                ],
            }
        )
        return 0 if report.ok else 1
    console = make_console()
    table = make_table(
        Column("session", overflow="fold"),
        Column("seq", justify="right"),
        Column("size", justify="right"),
        Column("result", overflow="fold"),
    )
    bad = [s for s in report.sessions if not s.ok]
    for s in bad if len(report.sessions) > 20 else report.sessions:
        result = (
            Text("ok", style="green")
            if s.ok
            else Text("; ".join(str(p) for p in s.problems), style="red")
        )
        table.add_row(s.key, str(s.seq), human_bytes(s.bytes), result)
    if table.row_count:
        console.print(table)
    verdict = "all verified" if report.ok else f"{len(bad)} with problems"
    console.print(
        Text(
            f"{report.checked} sessions, {human_bytes(report.bytes)}: {verdict}",
            style="bold green" if report.ok else "bold red",
        )
    )
    return 0 if report.ok else 1


# -- recover -----------------------------------------------------------------------------------


def _recover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--skip-locked",
        action="store_true",
        help="report sessions a live writer holds instead of refusing to run",
    )


def _recover(args: argparse.Namespace) -> int:
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    console = make_console()
    with make_console(stderr=True).status("recovering: cutting torn tails, checking chains..."):
        report = replay.recover(store, skip_locked=args.skip_locked)
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "checked": report.checked,
                "tails_cut": report.tails_cut,
                "snapshots_rebuilt": report.snapshots_rebuilt,
                "catalog_rebuilt": report.catalog_rebuilt,
                "locked": [s.key for s in report.sessions if s.locked],
                "problems": [f._asdict() for f in report.problems],
            }
        )
        return 0 if report.ok else 1
    table = make_table(
        Column("session", overflow="fold"),
        Column("what happened", overflow="fold"),
    )
    for s in report.sessions:
        notes = []
        if s.tail_cut:
            notes.append(f"cut a torn tail of {s.tail_cut} bytes into {s.quarantine}")
        if s.snapshot_rebuilt:
            notes.append("rebuilt the snapshot")
        if s.locked:
            notes.append("skipped: a live writer holds it")
        notes += [str(p) for p in s.problems]
        if notes:
            table.add_row(s.key, Text("\n".join(notes), style="red" if s.problems else ""))
    if table.row_count:
        console.print(table)
    console.print(
        Text(
            f"{report.checked} sessions checked in {report.seconds:.2f}s; "
            f"{len(report.tails_cut)} torn tails cut, {len(report.snapshots_rebuilt)} snapshots "
            f"rebuilt, catalog {'rebuilt' if report.catalog_rebuilt else 'unchanged'}; "
            + ("all sound" if report.ok else f"{len(report.problems)} problems left"),
            style="bold green" if report.ok else "bold red",
        )
    )
    return 0 if report.ok else 1


# -- repair ------------------------------------------------------------------------------------


def _repair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="the session to repair")


def _repair(args: argparse.Namespace) -> int:
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    need_session(store, args.key)
    report = replay.repair(store, args.key)
    if args.json:
        print_json(report)
    else:
        make_console().print(str(report), markup=False, highlight=False)
    return 1 if report.repaired else 0


# -- timeline and diff -------------------------------------------------------------------------


def _timeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="the session key")
    p.add_argument("--since", metavar="SEQ|TIME", help="first event (seq or ISO time)")
    p.add_argument("--until", metavar="SEQ|TIME", help="last event (seq or ISO time)")


def _point(value: str | None, option: str) -> Any:
    if value is None:
        return None
    point = parse_point(value, option)
    return point.seq if point.seq is not None else point.at


def _timeline(args: argparse.Namespace) -> int:
    since = _point(args.since, "--since")
    until = _point(args.until, "--until")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    need_session(store, args.key)
    entries = replay.timeline(store, args.key, since=since, until=until)
    if args.json:
        print_json(entries)
        return 0
    table = make_table(
        Column("seq", justify="right", style="dim"),
        Column("UTC", style="dim", no_wrap=True),
        Column("event", no_wrap=True),
        Column("what it changed", overflow="fold"),
        Column("live", justify="right", style="dim", no_wrap=True),
    )
    for e in entries:
        table.add_row(
            str(e.seq),
            e.ts.strftime("%H:%M:%S"),
            Text(e.type, style="bold" if e.type != "message" else ""),
            e.summary,
            f"{e.live_messages} msgs / {e.live_tokens:,} tok",
        )
    make_console().print(table)
    return 0


def _diff_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="the session key")
    p.add_argument("a", type=int, help="the earlier seq")
    p.add_argument("b", type=int, help="the later seq")


def _diff(args: argparse.Namespace) -> int:
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    need_session(store, args.key)
    d = replay.diff(store, args.key, args.a, args.b)
    if args.json:
        print_json(d)
        return 0
    console = make_console()
    console.print(Text(f"{args.key}: seq {d.seq_a} -> {d.seq_b}", style="bold"))
    lines: list[Text] = []
    for m in d.added:
        lines.append(
            Text(f"+ #{m.seq} {m.message.get('role')}: ", style="green")
            + Text(cut(" ".join(content_text(m.message).split()), 120))
        )
    for m in d.withdrawn:
        lines.append(
            Text(f"- #{m.seq} {m.message.get('role')}: ", style="red")
            + Text(cut(" ".join(content_text(m.message).split()), 120))
        )
    for k, v in d.metadata_set.items():
        was = f" (was {json.dumps(to_jsonable(d.metadata_was[k]))})" if k in d.metadata_was else ""
        lines.append(Text(f"~ metadata {k} = {json.dumps(to_jsonable(v))}{was}", style="yellow"))
    for k in d.metadata_unset:
        lines.append(Text(f"~ metadata {k} removed", style="yellow"))
    if d.last_consolidated[0] != d.last_consolidated[1]:
        lines.append(
            Text(f"~ last_consolidated {d.last_consolidated[0]} -> {d.last_consolidated[1]}")
        )
    if d.compaction[0] != d.compaction[1]:
        new = d.compaction[1]
        lines.append(
            Text(
                "~ compaction "
                + (f"now covers {new.upto} messages: {cut(new.summary, 80)}" if new else "cleared")
            )
        )
    if d.lifecycle[0] != d.lifecycle[1]:
        lines.append(Text(f"~ lifecycle {d.lifecycle[0]} -> {d.lifecycle[1]}"))
    lines.append(Text(f"live tokens {d.live_tokens[0]:,} -> {d.live_tokens[1]:,}", style="dim"))
    for line in lines:
        console.print(line)
    if not d.changed:
        console.print(Text("no change", style="dim"))
    return 0


COMMANDS = [
    Command(
        "verify",
        "check every line's hash chain, seq and ids, and the heads against snapshots and catalog",
        "sessionledger verify telegram:42",
        _verify_args,
        _verify,
        json=True,
    ),
    Command(
        "recover",
        "after a crash: cut torn tails into quarantine, check chains, rebuild snapshots and the catalog",
        "sessionledger recover --skip-locked",
        _recover_args,
        _recover,
        json=True,
    ),
    Command(
        "repair",
        "keep a corrupt log's valid prefix and move the rest into quarantine (nothing deleted)",
        "sessionledger repair telegram:42",
        _repair_args,
        _repair,
        json=True,
    ),
    Command(
        "timeline",
        "each event with what it changed (the audit view)",
        "sessionledger timeline telegram:42 --since 100",
        _timeline_args,
        _timeline,
        json=True,
    ),
    Command(
        "diff",
        "what changed in a session between two seqs",
        "sessionledger diff telegram:42 10 40",
        _diff_args,
        _diff,
        json=True,
    ),
]

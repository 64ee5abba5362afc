"""``sessionledger search`` and ``sessionledger conversations``: find what was said, and where."""

from __future__ import annotations

import argparse
from datetime import datetime

from rich.table import Table
from rich.text import Text

from sessionledger import to_data

from ._common import CliError, Command, make_console, open_store, parse_point, print_json

COMMANDS: list[Command] = []


def _time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    point = parse_point(value, option)
    if point.at is None:
        raise CliError(f"{option}: give a time like 2026-11-01 or 2026-11-25T10:00, not a seq")
    return point.at


def _search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="the words to find (all of them, case and accents folded)")
    p.add_argument("--prefix", help="only sessions whose key starts with this")
    p.add_argument("--channel", help="only sessions of this channel (keys agent:channel:peer)")
    p.add_argument("--role", help="only messages of this role (user, assistant, tool, ...)")
    p.add_argument("--since", metavar="TIME", help="messages at or after this time (ISO)")
    p.add_argument("--until", metavar="TIME", help="messages before this time (ISO)")
    p.add_argument("--limit", type=int, default=20, help="at most this many hits (default 20)")


def _search(args: argparse.Namespace) -> int:
    from sessionledger.projections import search

    if args.limit < 1:
        raise CliError("--limit must be >= 1")
    since = _time(args.since, "--since")
    until = _time(args.until, "--until")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    hits = search(
        store,
        args.query,
        prefix=args.prefix,
        channel=args.channel,
        role=args.role,
        since=since,
        until=until,
        limit=args.limit,
    )
    if args.json:
        print_json(to_data(hits))
        return 0
    console = make_console()
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    table.add_column("session", overflow="fold", style="bold")
    table.add_column("conv", justify="right", no_wrap=True)
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("when", no_wrap=True, style="dim")
    table.add_column("role", no_wrap=True)
    table.add_column("snippet", overflow="fold")
    for hit in hits:
        snippet = Text()
        for index, part in enumerate(hit.snippet.replace("]", "[").split("[")):
            snippet.append(part, style="bold yellow" if index % 2 else "")
        table.add_row(
            hit.key,
            str(hit.conversation),
            str(hit.seq),
            hit.ts.strftime("%Y-%m-%d %H:%M"),
            hit.role,
            snippet,
        )
    console.print(table)
    console.print(Text(f"{len(hits)} hit{'s' if len(hits) != 1 else ''}", style="dim"))
    return 0


COMMANDS.append(
    Command(
        "search",
        "full-text search over every message of every session (current and ended conversations)",
        'sessionledger search "kyoto" --channel telegram --since 2026-11-01',
        _search_args,
        _search,
        json=True,
    )
)


def _conversations_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", nargs="?", help="one session (default: every session)")
    p.add_argument("--channel", help="only sessions of this channel")
    p.add_argument("--ended", action="store_true", help="only ended conversations")
    p.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")


def _conversations(args: argparse.Namespace) -> int:
    from sessionledger.projections import list_conversations

    if args.limit < 0:
        raise CliError("--limit must be >= 0")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    rows = list_conversations(
        store,
        args.key,
        channel=args.channel,
        current=False if args.ended else None,
        limit=args.limit,
    )
    if args.json:
        print_json(to_data(rows))
        return 0
    console = make_console()
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for name in ("session", "start", "title / preview", "updated", "msgs", "tokens", "state"):
        table.add_column(name, overflow="fold")
    for row in rows:
        about = " · ".join(part for part in (row.title, row.preview) if part)
        state = row.state if row.current else f"ended ({row.end_reason})"
        table.add_row(
            Text(row.key, style="bold"),
            str(row.start_seq),
            about,
            row.updated_at.strftime("%m-%d %H:%M"),
            str(row.messages),
            f"{row.tokens:,}",
            state,
        )
    console.print(table)
    return 0


COMMANDS.append(
    Command(
        "conversations",
        "every conversation, current and ended: title, preview, counts, when, how it ended",
        "sessionledger conversations telegram:42",
        _conversations_args,
        _conversations,
        json=True,
    )
)

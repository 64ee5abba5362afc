"""``sessionledger search`` and ``sessionledger conversations``: find what was said, and where."""

from __future__ import annotations

import argparse

from rich.table import Column
from rich.text import Text

from sessionledger import to_data

from ._common import (
    CliError,
    Command,
    make_console,
    make_table,
    open_store,
    parse_time,
    plural,
    print_json,
    title_and_preview,
)

COMMANDS: list[Command] = []


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
    since = parse_time(args.since, "--since")
    until = parse_time(args.until, "--until")
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
    table = make_table(
        Column("session", overflow="fold", style="bold"),
        Column("conv", justify="right", no_wrap=True),
        Column("seq", justify="right", no_wrap=True),
        Column("when", no_wrap=True, style="dim"),
        Column("role", no_wrap=True),
        Column("snippet", overflow="fold"),
    )
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
    console.print(Text(plural(len(hits), "hit"), style="dim"))
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
    names = ("session", "start", "title / preview", "updated", "msgs", "tokens", "state")
    table = make_table(*(Column(name, overflow="fold") for name in names))
    for row in rows:
        about = title_and_preview(row.title, row.preview)
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

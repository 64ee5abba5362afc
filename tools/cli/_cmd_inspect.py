"""Read-only commands on one session or the catalog: ``show``, ``tail``, ``ls`` and ``history``."""

from __future__ import annotations

import argparse

from rich.table import Column
from rich.text import Text

from sessionledger.eventlog import LIFECYCLE_STATES, BaseStore, LoadedLog

from ._common import (
    CliError,
    Command,
    cut,
    make_console,
    make_table,
    need_session,
    open_store,
    parse_point,
    parse_time,
    plural,
    print_json,
    print_json_lines,
    short_time,
    title_and_preview,
    warn,
)
from ._render_events import ROLE_STYLES, content_text, event_dict, select_events, timeline_table


def load_session(store: BaseStore, key: str) -> LoadedLog:
    """Read a session read-only; a bad line in the middle still shows the readable prefix."""
    need_session(store, key)
    return store.load(key, prefix=True)


def _warn_problems(loaded: LoadedLog) -> None:
    if loaded.bad is not None:
        warn(
            f"line {loaded.bad.line} of {loaded.path}: {loaded.bad.reason}; showing the "
            "readable prefix (see: sessionledger verify, sessionledger repair)"
        )
    if loaded.torn is not None:
        warn(
            f"{loaded.path} ends in an incomplete line ({len(loaded.torn.data)} bytes); "
            "it is cut into quarantine when the session is next opened for writing"
        )


def _header_line(loaded: LoadedLog) -> Text:
    state = loaded.state
    text = Text()
    text.append(loaded.key, style="bold")
    title = state.metadata.get("title")
    if isinstance(title, str) and title:
        text.append(f"  “{title}”", style="italic")
    text.append(
        f"\n{state.seq} events · {len(state.messages)} live messages · {state.live_tokens} tokens"
        f" · {state.lifecycle} · created {short_time(state.created_at)} · updated "
        f"{short_time(state.updated_at)} · head {state.head[:12]}",
        style="dim",
    )
    return text


# -- show --------------------------------------------------------------------------------------


def _show_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="the session key")
    p.add_argument("--since", metavar="SEQ|TIME", help="first event to show (seq or ISO time)")
    p.add_argument("--until", metavar="SEQ|TIME", help="last event to show (seq or ISO time)")


def _bounds(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in ("since", "until"):
        value = getattr(args, name, None)
        if value is None:
            continue
        point = parse_point(value, f"--{name}")
        if point.seq is not None:
            out[f"{name}_seq"] = point.seq
        else:
            out[f"{name}_at"] = point.at
    return out


def _show(args: argparse.Namespace) -> int:
    bounds = _bounds(args)
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    loaded = load_session(store, args.key)
    events = select_events(loaded.events, **bounds)  # type: ignore[arg-type]
    _warn_problems(loaded)
    if args.json:
        print_json_lines(event_dict(e) for e in events)
        return 0
    console = make_console()
    console.print(_header_line(loaded))
    console.print(timeline_table(events))
    return 0


# -- tail --------------------------------------------------------------------------------------


def _tail_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="the session key")
    p.add_argument("-n", "--lines", type=int, default=10, help="how many events (default 10)")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new events as they are appended (also by other processes)",
    )
    p.add_argument(
        "--idle-exit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with -f: stop after this long without a new event (default: until Ctrl-C)",
    )


def _tail(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise CliError(f"--lines must be >= 0, not {args.lines}")
    if args.idle_exit is not None and args.idle_exit <= 0:
        raise CliError(f"--idle-exit must be > 0, not {args.idle_exit}")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    loaded = load_session(store, args.key)
    _warn_problems(loaded)
    if args.follow:
        from ._cmd_io import follow_events

        after = max(loaded.state.seq - args.lines, loaded.header.seq)
        return follow_events(store, args.key, after, args.idle_exit, args.json)
    events = loaded.events[-args.lines :] if args.lines else []
    if args.json:
        print_json_lines(event_dict(e) for e in events)
        return 0
    make_console().print(timeline_table(events))
    return 0


COMMANDS = [
    Command(
        "show",
        "a session's events as a readable timeline (tool calls paired with their results)",
        "sessionledger show telegram:42 --since 100 --until 2026-11-25T12:00",
        _show_args,
        _show,
        json=True,
    ),
    Command(
        "tail",
        "the last events of a session; -f keeps following new ones live",
        "sessionledger tail -f telegram:42 -n 20",
        _tail_args,
        _tail,
        json=True,
    ),
]


# -- ls ----------------------------------------------------------------------------------------


def _ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prefix", help="only keys starting with this")
    p.add_argument("--agent", help="structured keys agent:channel:peer[:thread]: this agent")
    p.add_argument("--channel", help="... this channel")
    p.add_argument("--peer", help="... this peer")
    p.add_argument(
        "--state", choices=LIFECYCLE_STATES, help="only sessions in this lifecycle state"
    )
    p.add_argument("--created-after", metavar="TIME", help="created at or after (ISO time)")
    p.add_argument("--created-before", metavar="TIME", help="created before (ISO time)")
    p.add_argument(
        "--sort",
        choices=("updated", "created", "key"),
        default="updated",
        help="order (default: newest updated first)",
    )
    p.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    p.add_argument("--offset", type=int, default=0, help="skip this many rows first")


def cut_line(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters, ending in an ellipsis if cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _ls(args: argparse.Namespace) -> int:
    from sessionledger import projections

    if args.limit < 0 or args.offset < 0:
        raise CliError("--limit and --offset must be >= 0")
    after = parse_time(args.created_after, "--created-after")
    before = parse_time(args.created_before, "--created-before")
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    rows = projections.list_sessions(
        store,
        prefix=args.prefix,
        agent=args.agent,
        channel=args.channel,
        peer=args.peer,
        state=args.state,
        created_after=after,
        created_before=before,
        order=args.sort,
        limit=args.limit,
        offset=args.offset,
    )
    if args.json:
        print_json(rows)
        return 0
    console = make_console()
    # One row per session: key on the first line, title and preview below it, figures beside.
    figures = 11 + 6 + 8 + 8 + 4 * 2
    width = max(console.width - figures - 2, 20)
    table = make_table(
        Column("session", overflow="fold", width=width),
        Column("updated", no_wrap=True, style="dim", width=11),
        Column("msgs", justify="right", no_wrap=True, width=6),
        Column("tokens", justify="right", no_wrap=True, width=8),
        Column("state", no_wrap=True, width=8),
    )
    for row in rows:
        cell = Text(row.key, style="bold")
        about = title_and_preview(row.title, row.preview)
        if about:
            cell.append("\n")
            cell.append(cut_line(about, width), style="italic" if row.title else "")
        elif row.sealed:  # listed without its keys (--key-file opens title and preview)
            cell.append("\n[sealed]", style="dim")
        table.add_row(
            cell,
            row.updated_at.strftime("%m-%d %H:%M"),
            str(row.messages),
            f"{row.tokens:,}",
            Text(row.state, style=STATE_STYLES.get(row.state, "")),
        )
    console.print(table)
    shown = plural(len(rows), "session")
    console.print(Text(shown + (f" (offset {args.offset})" if args.offset else ""), style="dim"))
    return 0


STATE_STYLES = {"active": "green", "idle": "yellow", "archived": "dim", "suspended": "red"}

COMMANDS.append(
    Command(
        "ls",
        "the session catalog as a table: key, title, preview, updated, messages, tokens, state",
        "sessionledger ls --channel telegram --state active --limit 20",
        _ls_args,
        _ls,
        json=True,
    )
)


# -- history -----------------------------------------------------------------------------------


def _history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="the session key")
    p.add_argument("--max-messages", type=int, default=120, help="window size (default 120)")
    p.add_argument("--max-tokens", type=int, default=0, help="token budget (0: none)")
    p.add_argument(
        "--timestamps", action="store_true", help="prefix user turns with [Message Time: ...]"
    )
    p.add_argument("--summary", action="store_true", help="put the latest compaction summary first")
    p.add_argument(
        "--at", metavar="SEQ|TIME", help="time travel: the history as it was at this seq or time"
    )


def _history(args: argparse.Namespace) -> int:
    from sessionledger import projections, replay

    if args.max_tokens < 0:
        raise CliError(f"--max-tokens must be >= 0, not {args.max_tokens}")
    point = parse_point(args.at, "--at") if args.at is not None else None
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    need_session(store, args.key)
    if point is None:
        state = store.load(args.key).state
    else:
        state = replay.state_at(store, args.key, seq=point.seq, at=point.at)
    pairs = projections.history_with_tokens(
        state,
        max_messages=args.max_messages,
        max_tokens=args.max_tokens,
        include_timestamps=args.timestamps,
        include_summary=args.summary,
    )
    messages = [m for m, _ in pairs]
    total = sum(t for _, t in pairs)
    if args.json:
        print_json({"key": args.key, "seq": state.seq, "tokens": total, "messages": messages})
        return 0
    console = make_console()
    table = make_table(
        Column("#", justify="right", style="dim"),
        Column("role", no_wrap=True),
        Column("tokens", justify="right", style="dim"),
        Column("content", overflow="fold"),
        padding=(0, 1),
    )
    for i, (message, tokens) in enumerate(pairs, 1):
        role = str(message.get("role", ""))
        body = Text(cut(content_text(message), 300))
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            names = ", ".join(
                str((c.get("function") or {}).get("name", "?")) if isinstance(c, dict) else "?"
                for c in calls
            )
            body.append(f"{chr(10) if body.plain else ''}calls: {names}", style="bold")
        if message.get("tool_call_id"):
            body.append(f"  [result of {message['tool_call_id']}]", style="dim")
        table.add_row(str(i), Text(role, style=ROLE_STYLES.get(role, "")), str(tokens), body)
    at = f" at seq {state.seq}" if point is not None else ""
    console.print(Text(f"{args.key}{at}: what the LLM gets", style="bold"))
    console.print(table)
    console.print(Text(f"{len(messages)} messages, {total:,} tokens", style="dim"))
    return 0


COMMANDS.append(
    Command(
        "history",
        "exactly what the LLM would get from a session, with its token total",
        "sessionledger history telegram:42 --max-tokens 8000 --timestamps --at 2026-11-25T10:00",
        _history_args,
        _history,
        json=True,
    )
)

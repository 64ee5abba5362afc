"""Read-only commands: ``show`` and ``tail`` (more arrive as the read side grows)."""

from __future__ import annotations

import argparse

from rich.text import Text

from eventlog import BaseStore, LoadedLog

from ._cli_common import (
    CliError,
    Command,
    make_console,
    open_store,
    parse_point,
    print_json_lines,
    short_time,
    warn,
)
from ._render_events import event_dict, select_events, timeline_table


def load_session(store: BaseStore, key: str) -> LoadedLog:
    """Read a session read-only; a bad line in the middle still shows the readable prefix."""
    if not store.exists(key):
        raise CliError(f"no session {key!r} in the store (see: sessionlog ls)")
    return store.load(key, prefix=True)


def _warn_problems(loaded: LoadedLog) -> None:
    if loaded.bad is not None:
        warn(
            f"line {loaded.bad.line} of {loaded.path}: {loaded.bad.reason}; showing the "
            "readable prefix (see: sessionlog verify, sessionlog repair)"
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
    store = open_store(args.store, hash_key=args.hash_key)
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


def _tail(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise CliError(f"--lines must be >= 0, not {args.lines}")
    store = open_store(args.store, hash_key=args.hash_key)
    loaded = load_session(store, args.key)
    events = loaded.events[-args.lines :] if args.lines else []
    _warn_problems(loaded)
    if args.json:
        print_json_lines(event_dict(e) for e in events)
        return 0
    make_console().print(timeline_table(events))
    return 0


COMMANDS = [
    Command(
        "show",
        "a session's events as a readable timeline (tool calls paired with their results)",
        "sessionlog show telegram:42 --since 100 --until 2026-11-25T12:00",
        _show_args,
        _show,
        json=True,
    ),
    Command(
        "tail",
        "the last events of a session",
        "sessionlog tail telegram:42 -n 20",
        _tail_args,
        _tail,
        json=True,
    ),
]

"""The registry of ``sessionledger`` commands: each is a name, help, an example and two functions."""

from __future__ import annotations

import argparse

from ._common import Command, open_store
from ._demo import run_demo


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-going", action="store_true", help=argparse.SUPPRESS)


def _demo(args: argparse.Namespace) -> int:
    store = args.store or "sessions"
    if store.startswith(("postgresql://", "postgres://")):
        open_store(store).close()  # the demo writes a file store; check the DSN anyway
    run_demo(store)
    return 0


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "bench_args",
        nargs=argparse.REMAINDER,
        help="arguments of python -m sessionledger.tools.bench (e.g. --quick, --only append,reopen, --list)",
    )


def _bench(args: argparse.Namespace) -> int:
    from ..bench._main import main as bench_main

    return bench_main(args.bench_args)


def _registry() -> list[Command]:
    from . import _cmd_audit, _cmd_inspect, _cmd_io, _cmd_search, _cmd_web

    commands = [
        Command(
            "demo",
            "write a realistic conversation with tool calls to a file store, reopen and print it",
            "sessionledger demo --store ./sessions",
            _demo_args,
            _demo,
        ),
    ]
    commands += _cmd_inspect.COMMANDS
    commands += _cmd_audit.COMMANDS
    commands += _cmd_io.COMMANDS
    commands += _cmd_search.COMMANDS
    commands += _cmd_web.COMMANDS
    commands.append(
        Command(
            "bench",
            "the benchmarks: our figures beside nanobot's SessionManager, with the ratio",
            "sessionledger bench --quick --only append,history",
            _bench_args,
            _bench,
        )
    )
    return commands


COMMANDS: list[Command] = _registry()

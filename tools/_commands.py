"""The registry of ``sessionlog`` commands: each is a name, help, an example and two functions."""

from __future__ import annotations

import argparse

from ._cli_common import Command, open_store
from ._demo import run_demo


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-going", action="store_true", help=argparse.SUPPRESS)


def _demo(args: argparse.Namespace) -> int:
    store = args.store or "sessions"
    if store.startswith(("postgresql://", "postgres://")):
        open_store(store).close()  # the demo writes a file store; check the DSN anyway
    run_demo(store)
    return 0


def _registry() -> list[Command]:
    from . import _cmd_inspect

    commands = [
        Command(
            "demo",
            "write a realistic conversation with tool calls to a file store, reopen and print it",
            "sessionlog demo --store ./sessions",
            _demo_args,
            _demo,
        ),
    ]
    commands += _cmd_inspect.COMMANDS
    return commands


COMMANDS: list[Command] = _registry()

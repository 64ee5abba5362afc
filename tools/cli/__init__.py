"""The ``sessionledger`` command line: inspect, verify, replay and audit session logs.

Every command works on a file store directory (``--store``, default ``$SESSIONLEDGER_STORE`` or
``./sessions``) or a PostgreSQL DSN. Read commands change nothing. Exit codes: 0 all well,
1 problems found (verify, recover, repair), 2 bad input or a store that cannot be used.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from sessionledger.eventlog import EventLogError

from ._commands import COMMANDS
from ._common import KEY_FILE_ENV, STORE_ENV, CliError, Command, close_opened, use_key_file

EPILOG = """\
examples:
  sessionledger demo                         write and show a sample conversation in ./sessions
  sessionledger ls --channel telegram        the session list, newest first
  sessionledger show telegram:42 --since 100 events from seq 100 on
  sessionledger history telegram:42 --max-tokens 8000 --at 2026-11-25T10:00
  sessionledger verify && sessionledger tail -f telegram:42
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (the usage itself is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sessionledger``."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--store",
        metavar="PATH|DSN",
        help=f"store directory or postgresql:// DSN (default: ${STORE_ENV} or ./sessions)",
    )
    common.add_argument("--hash-key", help="secret the logs' hash chain is keyed with")
    common.add_argument(
        "--key-file",
        metavar="PATH",
        help=f"master key file of an encrypted store (default: ${KEY_FILE_ENV}); "
        "verify and ls need none",
    )
    common.add_argument(
        "--schema", default=None, help="PostgreSQL schema of the store (default: sessionlog)"
    )
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser = _Parser(
        prog="sessionledger",
        description="Inspect, verify, replay and audit event-sourced agent session logs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=f"{command.help}\n\nexample:\n  {command.example}",
            parents=[common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if command.json:
            p.add_argument("--json", action="store_true", help="JSON output for scripts")
        command.configure(p)
        p.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sessionledger``; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"] and not {"-h", "--help"} & set(argv[1:2]):
        # The benchmark suite has its own options; hand them over untouched.
        from ..bench._main import main as bench_main

        return bench_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    use_key_file(args.key_file)
    try:
        try:
            return run(args)
        finally:
            close_opened()
    except KeyboardInterrupt:
        return 130
    except (CliError, EventLogError, OSError) as exc:
        if args.debug:
            traceback.print_exc()
        code = exc.code if isinstance(exc, CliError) else 2
        sys.stderr.write(f"sessionledger {args.command}: error: {exc}\n")
        return code
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0


__all__ = ("Command", "build_parser", "main")

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

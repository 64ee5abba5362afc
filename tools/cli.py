"""The ``sessionlog`` command line (entry point).

Only ``demo`` exists so far; the inspection commands (ls, show, history, verify ...) arrive with
the CLI issue.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._demo import run_demo


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sessionlog``."""
    parser = argparse.ArgumentParser(
        prog="sessionlog",
        description="Inspect, verify, replay and audit event-sourced agent session logs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="write a realistic conversation to a file store, reopen it and print it",
        description="Example: sessionlog demo --store ./sessions",
    )
    demo.add_argument("--store", default="sessions", help="store directory (default: ./sessions)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sessionlog``; return the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        run_demo(args.store)
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands first


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

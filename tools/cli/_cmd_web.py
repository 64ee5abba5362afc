"""``serve`` (the web viewer) and the readable exports of ``export --format md|html``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sessionledger import replay
from sessionledger.eventlog.backend import write_temp_beside
from sessionledger.replay import Redaction

from ._common import CliError, Command, open_store


def _redaction(fields: list[str]) -> Redaction:
    try:
        return Redaction.parse(fields)
    except replay.RedactionError as exc:
        raise CliError(f"--redact: {exc}") from None


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (a temporary file renamed over it); never via a symlink."""
    if path.is_symlink():
        raise CliError(f"{path} is a symbolic link; not writing through it")
    if path.exists() and not path.is_file():
        raise CliError(f"{path} exists and is not a regular file")
    os.replace(write_temp_beside(path, data), path)


def export_readable(args: argparse.Namespace) -> int:
    """``export KEY --format md|html [-o FILE] [--redact FIELD...]``."""
    if args.all or not args.key:
        raise CliError(f"--format {args.format} exports one session: give its KEY")
    if args.to:
        raise CliError(f"--format {args.format} writes one file: use -o FILE, not --to")
    redaction = _redaction(args.redact)
    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    if args.format == "md":
        data = replay.export_markdown(store, args.key, redact=redaction)
    else:
        from sessionledger.tools.web import export_html

        data = export_html(store, args.key, redact=redaction)
    if args.output and args.output != "-":
        _write_file(Path(args.output).expanduser(), data)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only); read-only on any",
    )
    p.add_argument(
        "--redact",
        nargs="+",
        metavar="FIELD",
        default=[],
        help="mask these fields in every page: content, ROLE.FIELD, metadata.KEY, summary",
    )


def _serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise CliError(f"--port must be 1..65535, not {args.port}")
    redaction = _redaction(args.redact)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CliError(
            f"the viewer needs the web extra: pip install 'sessionledger[web]' ({exc})"
        ) from None
    from sessionledger.tools.web import serve

    store = open_store(args.store, hash_key=args.hash_key, schema=args.schema)
    try:
        serve(store, host=args.host, port=args.port, redaction=redaction)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise CliError(f"cannot listen on {args.host}:{args.port}: {why}") from None
    return 0


COMMANDS = [
    Command(
        "serve",
        "a local, read-only web viewer: sessions, timelines, the model's view, time travel, live",
        "sessionledger serve --store ./sessions --port 8765",
        _serve_args,
        _serve,
    ),
]

"""What every ``sessionledger`` command shares: opening a store, parsing points in time, output.

Rules: read commands never create or modify anything (a missing store is an error, not a new
empty directory); every expected failure becomes :class:`CliError`, printed as one line on stderr
with a non-zero exit; colour only on a terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Column, Table

from sessionledger.eventlog import BaseStore, FileStore, LocalKeyFile

DEFAULT_STORE = "sessions"
STORE_ENV = "SESSIONLEDGER_STORE"
HASH_KEY_ENV = "SESSIONLEDGER_HASH_KEY"
KEY_FILE_ENV = "SESSIONLEDGER_KEY_FILE"
#: The master key file given with ``--key-file`` (None: ``$SESSIONLEDGER_KEY_FILE`` or none).
_KEY_FILE: list[str | None] = [None]


def use_key_file(path: str | None) -> None:
    """Open file stores with this master key file (an encrypted store's ``key_provider``)."""
    _KEY_FILE[0] = path


def _key_provider() -> LocalKeyFile | None:
    path = _KEY_FILE[0] or os.environ.get(KEY_FILE_ENV) or None
    if path is None:
        return None
    if not Path(path).expanduser().exists():
        raise CliError(f"no master key file at {path}")
    return LocalKeyFile(path, create=False)


class CliError(Exception):
    """An expected failure: printed as one line on stderr, exit code ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Point:
    """A point in a session's history: a seq, or a time."""

    seq: int | None = None
    at: datetime | None = None


def parse_point(text: str, option: str) -> Point:
    """Parse ``SEQ`` or an ISO-8601 time (naive means local time) given to ``option``."""
    text = text.strip()
    if text.isdigit():
        return Point(seq=int(text))
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"{option}: {text!r} is neither a seq (a whole number) nor an ISO time "
            "like 2026-11-25T10:00"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # a naive time is local time, as a person types it
    return Point(at=when)


def parse_time(text: str | None, option: str) -> datetime | None:
    """Parse an ISO-8601 time given to ``option`` (None if not given; a seq is refused)."""
    if text is None:
        return None
    point = parse_point(text, option)
    if point.at is None:
        raise CliError(f"{option}: give a time like 2026-11-01 or 2026-11-25T10:00, not a seq")
    return point.at


def need_session(store: BaseStore, key: str) -> None:
    """Refuse a key that is not a session of ``store`` (a CliError pointing at ``ls``)."""
    if not store.exists(key):
        raise CliError(f"no session {key!r} in the store (see: sessionledger ls)")


def open_store(
    location: str | None,
    *,
    hash_key: str | None = None,
    create: bool = False,
    schema: str | None = None,
) -> BaseStore:
    """Open the store at ``location`` (a directory, or a ``postgresql://`` DSN)."""
    location = location or os.environ.get(STORE_ENV) or DEFAULT_STORE
    if hash_key is None:
        hash_key = os.environ.get(HASH_KEY_ENV)
    if hash_key == "":  # never silently an unkeyed store
        raise CliError(f"the hash key is empty (--hash-key or {HASH_KEY_ENV}); omit it instead")
    if location.startswith(("postgresql://", "postgres://")):
        return _open_postgres(location, hash_key, schema or "sessionlog")
    if schema is not None:
        raise CliError("--schema is for a PostgreSQL store; --store names a directory")
    path = Path(location).expanduser()
    if not path.exists():
        if not create:
            raise CliError(
                f"no store at {path}: the directory does not exist "
                f"(give --store PATH, or set {STORE_ENV})"
            )
    elif not path.is_dir():
        raise CliError(f"{path} is not a store: it is a file, not a directory")
    return opened(
        FileStore(path, durability="batch", hash_key=hash_key, key_provider=_key_provider())
    )


#: Stores a command opened; :func:`close_opened` closes them when the command ends.
_OPENED: list[BaseStore] = []


def opened(store: BaseStore) -> BaseStore:
    """Remember ``store`` so it is closed (writers synced, pools shut) when the command ends."""
    _OPENED.append(store)
    return store


def close_opened() -> None:
    """Close every store the command opened (even after an error)."""
    while _OPENED:
        _OPENED.pop().close()


def _open_postgres(dsn: str, hash_key: str | None, schema: str) -> BaseStore:
    from sessionledger.eventlog import PostgresStore

    try:
        return opened(PostgresStore(dsn, hash_key=hash_key, schema=schema))
    except ImportError as exc:
        raise CliError(
            f"PostgreSQL stores need the postgres extra: pip install '.[postgres]' ({exc})"
        ) from None


def warn(message: str) -> None:
    """Print one warning line on stderr."""
    sys.stderr.write(f"warning: {message}\n")


def make_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that colours only a terminal (no escape codes in pipes)."""
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=False)


_TABLE_LOOK: dict[str, Any] = {
    "box": None,
    "pad_edge": False,
    "header_style": "bold",
    "padding": (0, 2, 0, 0),
}


def make_table(*columns: Column, **look: Any) -> Table:
    """A table in the commands' look (no box, bold header, two spaces between columns);
    ``look`` overrides it."""
    return Table(*columns, **(_TABLE_LOOK | look))


def plural(count: int, noun: str) -> str:
    """``3 hits``, ``1 hit``."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


def title_and_preview(title: str, preview: str) -> str:
    """A catalog row's title and preview on one line, as the listings show them."""
    return " · ".join(part for part in (title, preview) if part)


_enc = msgspec.json.Encoder()


def to_jsonable(value: Any) -> Any:
    """Turn structs, datetimes and the like into plain JSON values."""
    return msgspec.json.decode(_enc.encode(value))


def print_json(value: Any) -> None:
    """Print one JSON document."""
    sys.stdout.write(json.dumps(to_jsonable(value), ensure_ascii=False, indent=2) + "\n")


def print_json_lines(values: Iterable[Any]) -> None:
    """Print one JSON document per line."""
    for value in values:
        sys.stdout.write(_enc.encode(value).decode("utf-8") + "\n")


def cut(text: str, limit: int) -> str:
    """Shorten ``text`` to ``limit`` characters with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit].rstrip()} … (+{len(text) - limit} chars)"


def human_bytes(size: int) -> str:
    """``1536`` -> ``1.5 KB``."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def short_time(when: datetime | None) -> str:
    """A compact local-free display of a UTC time."""
    if when is None:
        return ""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` executes it (exit code)."""

    name: str
    help: str
    example: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    json: bool = False

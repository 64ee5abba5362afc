"""nanobot-format views of the logs: ``sessions/<nanobot stem>.jsonl``, kept current on save.

nanobot's own readers (its web UI sidebar, ``read_session_metadata``-style routes, scripts)
glob ``sessions/*.jsonl`` and read a metadata line then one message per line, and name their
transcript and thread files after nanobot's stem of the key. A view is that file, derived from
the log (the log stays the record; a view can always be rebuilt from it).

Format: nanobot's. The first line is the metadata record (``_type``, ``key``, ``created_at``,
``updated_at``, ``metadata``, ``last_consolidated``) plus ``"_sessionledger": {"seq": N}``, the
log seq it shows, padded with spaces to a fixed width (nanobot strips lines before parsing);
then one JSON line per live message.

Invariants:
- A save that only appended messages appends their lines and rewrites the padded first line in
  place (O(new messages), like the log); any other change, or a first line that outgrew its
  width, rewrites the view through a temporary file and a rename (O(history), like nanobot).
- A file is written only when it is this manager's view of that key: it names the key in its
  mark, or it is a nanobot file already imported (named in the ledger). A stem shared by two
  keys (``a:b``, ``a_b``) keeps the view of the key that has it; the other key has none (its
  log is unaffected) and is listed from the catalog.
- A view whose mark is not the log's seq (a crash between the log append and the view update,
  another process's save) is rebuilt when a manager starts.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

MARK: Final = "_sessionledger"
_WIDTH_STEP: Final = 512
_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class View:
    """What this process last wrote to a view file."""

    path: Path
    #: Bytes of the padded first line, newline included.
    width: int
    #: The log seq the view shows.
    seq: int
    #: Message lines in the view.
    count: int = 0


def header(
    key: str,
    created_at: str,
    updated_at: str,
    metadata: dict[str, Any],
    last_consolidated: int,
    seq: int,
) -> bytes:
    """The first line of a view, unpadded and without its newline."""
    return _encode(
        {
            "_type": "metadata",
            "key": key,
            "created_at": created_at,
            "updated_at": updated_at,
            "metadata": metadata,
            "last_consolidated": last_consolidated,
            MARK: {"seq": seq},
        }
    )


def _padded(line: bytes, width: int) -> bytes:
    return line + b" " * (width - len(line) - 1) + b"\n"


def _width_for(line: bytes) -> int:
    want = len(line) + 1 + max(256, len(line) // 2)  # room for the header to grow in place
    return -(-want // _WIDTH_STEP) * _WIDTH_STEP


def _open(path: Path, flags: int) -> int:
    fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def rewrite(path: Path, head: bytes, messages: list[dict[str, Any]]) -> View:
    """Write the whole view through a temporary file and an atomic rename."""
    width = _width_for(head)
    body = b"".join(_encode(m) + b"\n" for m in messages)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = _open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, _padded(head, width) + body)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return View(path, width, _seq_of(head), len(messages))


def append(view: View, head: bytes, messages: list[dict[str, Any]]) -> bool:
    """Append message lines and rewrite the first line in place; False when it does not fit."""
    if len(head) + 1 > view.width:
        return False
    fd = _open(view.path, os.O_WRONLY)
    try:
        if messages:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"".join(_encode(m) + b"\n" for m in messages))
        os.pwrite(fd, _padded(head, view.width), 0)
    finally:
        os.close(fd)
    view.seq = _seq_of(head)
    view.count += len(messages)
    return True


def read_header(path: Path) -> dict[str, Any] | None:
    """The first line of a nanobot-format file as a dict, or None (absent, unreadable, other)."""
    try:
        fd = _open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            line = f.readline(1 << 24)
    except OSError:
        return None
    try:
        data = msgspec.json.decode(line.strip())
    except msgspec.DecodeError:
        return None
    return data if isinstance(data, dict) and data.get("_type") == "metadata" else None


def mark_of(head: dict[str, Any] | None) -> int | None:
    """The log seq a view's first line names, or None for a file that is not a view."""
    mark = head.get(MARK) if head is not None else None
    seq = mark.get("seq") if isinstance(mark, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _seq_of(head: bytes) -> int:
    seq = mark_of(msgspec.json.decode(head))
    assert seq is not None
    return seq

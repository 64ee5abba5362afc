"""Hostile input: a mutation fuzzer over the log decoder, the stores' readers and the importers.

Inputs start from real files (a log with every kind of event, a nanobot session file, a seed-001
session JSON) and are mutated: flipped, inserted and deleted bytes, duplicated, swapped and
dropped lines, huge lines, deep nesting, invalid UTF-8, NUL bytes, raw U+2028, numbers out of
range. Half of the mutated logs are *re-chained* (every hash recomputed, as anyone without a
secret key can do), so the input gets past the hash check into JSON decoding, event validation,
folding and opening a writer on it.

The claim, per input: the code under test returns or raises an ``EventLogError`` subclass,
never another exception, and finishes within a time bound (a hang is a failure).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from sessionledger import replay
from sessionledger.eventlog import EventLogError, MemoryStore, decode_log
from sessionledger.eventlog.codec import (
    ZERO_HASH,
    LineDecoder,
    chain_hash,
    normalize_key,
    split_hash,
)

from ._checks import ClaimFailed, claim

KEY = "fuzz:1"
SECRET = "fuzz-secret"
#: Seconds one input may take in any target before it counts as a hang.
TIME_BOUND = 10.0


def sample_log(hash_key: str | None = None) -> bytes:
    """A real log with every kind of event (multi-byte text, tool calls, compaction, ...)."""
    store = MemoryStore(hash_key=hash_key)
    with store.session(KEY, metadata={"channel": "fuzz"}) as s:
        s.append_message("user", "Plan a trip to \u4eac\u90fd \U0001f338", media=["/m.png"])
        s.append_message(
            "assistant",
            None,
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f"}}],
        )
        s.append_message("tool", "done \u2028 ok", tool_call_id="c1", name="f")
        s.update_metadata(set={"title": "Kyoto", "n": 3}, unset=["channel"])
        s.mark_consolidated(1)
        s.compact("summary", 2, tokens_before=50, tokens_after=5)
        s.record_usage(model="m", prompt_tokens=10, completion_tokens=2)
        s.append_message("assistant", "partial")
        s.retract()
        s.trim(1, "file_cap")
        s.set_lifecycle("idle")
        s.clear(reason="new")
        s.append_message("user", "again")
    return store.read_bytes(KEY)


def sample_nanobot() -> bytes:
    """A nanobot session file (metadata line, then one message per line)."""
    lines: list[object] = [
        {
            "_type": "metadata",
            "key": "telegram:7",
            "created_at": "2026-01-02T03:04:05",
            "updated_at": "2026-01-02T03:05:00",
            "metadata": {"a": 1},
            "last_consolidated": 1,
        },
        {"role": "user", "content": "hi", "timestamp": "2026-01-02T03:04:06"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]},
        {"role": "tool", "content": "x", "tool_call_id": "c", "timestamp": "2026-01-02T03:04:07"},
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def sample_session_json() -> bytes:
    """A seed-001 session JSON document."""
    doc = {
        "version": 1,
        "session_id": "cli:1",
        "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-02T04:00:00Z",
        "model": "m",
        "workspace_root": "/w",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "token_usage": {"total": 3},
    }
    return json.dumps(doc).encode()


# -- mutations ----------------------------------------------------------------------------------

_NASTY = (
    b"\x00",
    b"\xff",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xe2\x80\xa8",
    b"\\u0000",
    b"\\ud800",
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\n",
    b"\r\n",
    b"null",
    b"1e999999",
    b"9" * 5000,
    b"-0",
    b"NaN",
    b'"type":"header"',
    b'"seq":0',
    b'"seq":-1',
    b'"type":"x"',
)


def _line_of(data: bytes, rng: random.Random) -> tuple[int, int]:
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    start = sum(len(x) + 1 for x in lines[:i])
    return start, start + len(lines[i])


def deep(depth: int) -> bytes:
    """A JSON value nested ``depth`` levels deep."""
    return b"[" * depth + b"]" * depth


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random structural or byte-level mutation of ``data``."""
    op = rng.randrange(12)
    n = len(data)
    pos = rng.randrange(n + 1)
    if op == 0 and n:
        i = rng.randrange(n)
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if op == 1:
        return data[:pos] + rng.choice(_NASTY) + data[pos:]
    if op == 2:
        return data[:pos] + data[pos + rng.randrange(1, 64) :]
    if op in (3, 4, 5):
        lines = data.split(b"\n")
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        if op == 3:
            lines.insert(j, lines[i])
        elif op == 4:
            lines[i], lines[j] = lines[j], lines[i]
        else:
            del lines[i]
        return b"\n".join(lines)
    if op == 6:
        return data[:pos]
    if op == 7:
        return (
            data[:pos]
            + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
            + data[pos:]
        )
    if op == 8:  # a JSON value replaced by something deep, huge or out of range
        start, end = _line_of(data, rng)
        colon = data.find(b":", start, end)
        if colon < 0:
            return data
        stop = data.find(b",", colon, end)
        stop = end if stop < 0 else stop
        value = rng.choice(
            [
                deep(rng.choice([50, 5_000, 200_000])),
                b'"' + b"z" * 300_000 + b'"',
                b"1" * 5000,
                b"1e400",
                b'{"a":' * 3000 + b"1" + b"}" * 3000,
            ]
        )
        return data[: colon + 1] + value + data[stop:]
    if op == 9:
        start, end = _line_of(data, rng)
        return (
            data[:start]
            + data[start:end].replace(b"\\u2028", b"\xe2\x80\xa8").replace(b"a", b"\x00", 1)
            + data[end:]
        )
    if op == 10:  # a number in place of a string or the other way round
        return (
            data.replace(b'"seq":', b'"seq":"', 1)
            if rng.random() < 0.5
            else data.replace(b'"user"', b"7", 1)
        )
    return data + data[: rng.randrange(n + 1)]


def rechain(data: bytes, key: bytes = b"") -> bytes:
    """Recompute every line's hash (what a forger without the secret does), keeping the bodies."""
    out: list[bytes] = []
    h = ZERO_HASH
    parts = data.split(b"\n")
    for line in parts:
        split = split_hash(line)
        if split is None:
            out.append(line)
            continue
        body = split[0]
        h = chain_hash(h, body, key)
        out.append(body + b',"h":"' + h.encode() + b'"}')
    return b"\n".join(out)


# -- targets ------------------------------------------------------------------------------------


@contextlib.contextmanager
def time_bound(seconds: float, what: str) -> Iterator[None]:
    """Raise :class:`ClaimFailed` if the block runs longer than ``seconds`` (main thread only)."""

    def expired(_sig: int, _frame: FrameType | None) -> None:
        raise ClaimFailed(f"{what}: no result after {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def only_library_errors(what: str, func: Callable[[], object]) -> bool:
    """Run ``func``: True if it returned, False if it raised an EventLogError; else ClaimFailed."""
    with time_bound(TIME_BOUND, what):
        try:
            func()
        except EventLogError:
            return False
        except ClaimFailed:
            raise
        except Exception as exc:
            raise ClaimFailed(f"{what}: raised {type(exc).__name__}: {exc}"[:500]) from exc
    return True


def check_log_input(
    data: bytes, hash_key: bytes = b"", *, rng: random.Random | None = None
) -> None:
    """Every reader of log bytes on one input: decoder (whole and chunked), load, verify, open."""
    with time_bound(TIME_BOUND, "decode_log"):
        try:
            whole = decode_log(data, key=hash_key)
        except Exception as exc:
            raise ClaimFailed(f"decode_log raised {type(exc).__name__}: {exc}"[:500]) from exc
    if rng is not None:  # the incremental decoder agrees with the one-shot one
        dec = LineDecoder(key=hash_key)
        events = []
        pos = 0
        with time_bound(TIME_BOUND, "LineDecoder.feed"):
            while pos < len(data):
                step = rng.choice([1, 7, 4096, 1 << 16, len(data)])
                events += dec.feed(data[pos : pos + step])
                pos += step
            torn = dec.finish()
        claim(
            [e.seq for e in events] == [e.seq for e in whole.events]
            and dec.offset == whole.valid_length
            and (torn is None) == (whole.torn is None),
            "the incremental decoder disagrees with decode_log",
        )
    store = MemoryStore(hash_key=hash_key or None)
    store.put_bytes(KEY, data)
    only_library_errors("store.load", lambda: store.load(KEY))
    only_library_errors(
        "replay.check_log", lambda: replay.check_log(data, key=KEY, path="x", hash_key=hash_key)
    )

    def open_and_append() -> None:
        with store.session(KEY) as writer:
            writer.append_message("user", "after fuzz")

    if only_library_errors("store.session", open_and_append):
        # Whatever was accepted must now be a clean, verifiable log.
        report = replay.verify(store, KEY)
        claim(
            report.ok,
            f"a log the store opened does not verify: {[str(p) for p in report.problems][:2]}",
        )


def check_import_input(data: bytes, kind: str) -> None:
    """An importer on one input: only ForeignFormatError (or another library error), or a result."""
    store = MemoryStore()
    if kind == "nanobot":
        only_library_errors("parse_nanobot", lambda: replay.parse_nanobot(data, "x.jsonl"))

        def run() -> None:
            # Through the public importer, as a user would: parse, build the log, write it.
            with tempfile.TemporaryDirectory(prefix="fuzz-import-") as tmp:
                path = Path(tmp) / "x.jsonl"
                path.write_bytes(data)
                replay.import_nanobot(store, path)

        only_library_errors("nanobot import", run)
    else:
        only_library_errors("parse_session_json", lambda: replay.parse_session_json(data, "x.json"))


@dataclass(slots=True)
class FuzzFigures:
    """How many inputs each target saw (every one ended in a result or a library error)."""

    decoder_inputs: int = 0
    rechained: int = 0
    import_inputs: int = 0
    by_target: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def inputs(self) -> int:
        """Every input fuzzed."""
        return self.decoder_inputs + self.import_inputs


def run_fuzz(count: int, *, seed: int = 0) -> FuzzFigures:
    """``count`` mutated logs and ``count`` mutated import files (raise ClaimFailed on a crash)."""
    rng = random.Random(seed)
    figures = FuzzFigures()
    started = time.perf_counter()
    bases = {b"": sample_log(), normalize_key(SECRET): sample_log(SECRET)}
    for n in range(count):
        hash_key = rng.choice(tuple(bases))
        data = bases[hash_key]
        for _ in range(rng.choice([1, 1, 2, 3, 8])):
            data = mutate(data, rng)
        if rng.random() < 0.5:
            data = rechain(data, hash_key if rng.random() < 0.9 else b"wrong")
            figures.rechained += 1
        if n % 50 == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(2000)))
        check_log_input(data, hash_key, rng=rng)
        figures.decoder_inputs += 1
    imports = {"nanobot": sample_nanobot(), "json": sample_session_json()}
    for _ in range(count):
        kind = rng.choice(tuple(imports))
        data = imports[kind]
        for _ in range(rng.choice([1, 2, 4])):
            data = mutate(data, rng)
        check_import_input(data, kind)
        figures.import_inputs += 1
        figures.by_target[kind] = figures.by_target.get(kind, 0) + 1
    figures.seconds = time.perf_counter() - started
    return figures

"""Run one scenario through nanobot's SessionManager and through ours; report every difference.

Run it with the benchmark venv, which has nanobot-ai 0.2.2 (never install nanobot into the
project's venv)::

    PYTHONPATH=/work/main .bench/venv/bin/python -m sessionledger.tools.compare_nanobot

Each step does the same thing to both (in two workspaces) and compares what a caller sees:
histories, messages, cursors, metadata, archive chunks, listings, file reads, deletions. Paths
and times are not compared (they differ by design). A last step imports the workspace nanobot
wrote into a fresh manager of ours. Exit status: 0 when every step agrees, 1 otherwise.
"""

from __future__ import annotations

import copy
import importlib
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # run as a script, this folder must not shadow the real nanobot package

Msg = dict[str, Any]
CALL = {"id": "call_1", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}


def script() -> list[Msg]:
    """A conversation with the parts the history rules care about."""
    out: list[Msg] = [{"role": "assistant", "content": "Good morning!", "_channel_delivery": True}]
    for turn in range(40):
        out.append(
            {
                "role": "user",
                "content": f"question {turn}",
                "timestamp": f"2026-11-25T10:{turn:02d}:00",
            }
        )
        if turn % 5 == 1:
            out.append({"role": "assistant", "content": "", "tool_calls": [CALL]})
            out.append(
                {
                    "role": "tool",
                    "content": "result",
                    "tool_call_id": "call_1",
                    "name": "web_search",
                }
            )
        if turn % 7 == 3:
            out.append({"role": "user", "content": "/status", "_command": True})
        if turn % 6 == 2:
            out.append({"role": "user", "content": "", "media": ["/tmp/photo.png"]})
        out.append(
            {
                "role": "assistant",
                "content": f"[Message Time: x]\nanswer {turn}\n[image: /tmp/a.png]\nmessage(hi)",
            }
        )
    return out


class Comparison:
    """Collects step results."""

    def __init__(self) -> None:
        self.differences = 0

    def check(self, step: str, theirs: object, ours: object, *, expected: str = "") -> None:
        """Print whether one step agrees."""
        if theirs == ours:
            print(f"same       {step}")
            return
        if expected:
            print(f"differs    {step} (by design: {expected})")
            return
        self.differences += 1
        theirs, ours, where = _first_difference(theirs, ours)
        print(
            f"DIFFERENT  {step}{where}\n    nanobot: {_short(theirs)}\n    ours:    {_short(ours)}"
        )


def _first_difference(a: object, b: object, where: str = "") -> tuple[object, object, str]:
    """Narrow two unequal values down to their first differing item."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return _first_difference(x, y, f"{where}[{i}]")
        if len(a) != len(b):
            return len(a), len(b), f"{where} (lengths)"
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return a.get(k), b.get(k), f"{where}[{k!r}]"
    return a, b, where


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 400 else text[:400] + " ..."


def _history(session: Any, **kwargs: Any) -> object:
    return session.get_history(**kwargs)


def _strip_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["key"], r["title"], r["preview"]) for r in rows]


def run(their_mod: Any, our_mod: Any, root: Path) -> int:
    """Run the scenario; return the number of unexpected differences."""
    cmp = Comparison()
    ws_t, ws_o = root / "nanobot", root / "ours"
    mt, mo = their_mod.SessionManager(ws_t), our_mod.SessionManager(ws_o)
    st, so = mt.get_or_create("telegram:42"), mo.get_or_create("telegram:42")
    for s in (st, so):
        s.messages.extend(copy.deepcopy(script()))
        s.metadata["title"] = "Kyoto trip"
        s.add_message("user", "and the weather?", timestamp="2026-11-25T11:00:00")
    for m, s in ((mt, st), (mo, so)):
        m.save(s)

    def both(f: Callable[[Any], object]) -> tuple[object, object]:
        return f(st), f(so)

    for kwargs in (
        {},
        {"max_messages": 7},
        {"max_messages": 3},
        {"include_timestamps": True},
        {"max_messages": 0},
    ):
        cmp.check(f"get_history({kwargs})", *both(partial(_history, **kwargs)))
    for budget in (40, 200, 2000):
        cmp.check(
            f"get_history(max_tokens={budget})",
            *both(partial(_history, max_tokens=budget)),
            expected="token counts: nanobot counts cl100k tokens, ours stores a byte estimate",
        )
    for s in (st, so):
        s.last_consolidated = 30
    cmp.check("get_history after last_consolidated=30", *both(lambda s: s.get_history()))

    for m in (mt, mo):
        m.save(m.get_or_create("telegram:42"))
        m.invalidate("telegram:42")
    rt, ro = mt.get_or_create("telegram:42"), mo.get_or_create("telegram:42")
    cmp.check("reload: messages", rt.messages, ro.messages)
    cmp.check("reload: metadata", rt.metadata, ro.metadata)
    cmp.check("reload: last_consolidated", rt.last_consolidated, ro.last_consolidated)

    for limit in (50, 20):
        chunks: tuple[list[Any], list[Any]] = ([], [])
        for s, got in ((rt, chunks[0]), (ro, chunks[1])):
            s.enforce_file_cap(on_archive=got.append, limit=limit)
        cmp.check(f"enforce_file_cap({limit}): archived", *chunks)
        cmp.check(f"enforce_file_cap({limit}): messages", rt.messages, ro.messages)
        cmp.check(f"enforce_file_cap({limit}): cursor", rt.last_consolidated, ro.last_consolidated)
    tail_heavy = [{"role": "user", "content": "u"}] + [
        {"role": "assistant", "content": f"a{i}"} for i in range(12)
    ]
    for s in (rt, ro):
        s.messages.extend(copy.deepcopy(tail_heavy))
        s.last_consolidated = len(s.messages) - 3
    results = (rt.retain_recent_legal_suffix(5), ro.retain_recent_legal_suffix(5))
    cmp.check("retain_recent_legal_suffix(5) (assistant-only tail): return", *results)
    cmp.check("retain_recent_legal_suffix(5): messages", rt.messages, ro.messages)
    cmp.check("retain_recent_legal_suffix(5): cursor", rt.last_consolidated, ro.last_consolidated)
    for m, s in ((mt, rt), (mo, ro)):
        m.save(s)

    for m in (mt, mo):
        for key, text in (
            ("a:b", "I am a:b"),
            ("a_b", "I am a_b"),
            ("cli:direct", "  spaced\n out "),
        ):
            s = m.get_or_create(key)
            s.add_message("user", text, timestamp="2026-11-25T12:00:00")
            m.save(s)
        m.invalidate("a:b")
    cmp.check(
        "colliding keys a:b / a_b",
        [m["content"] for m in mt.get_or_create("a:b").messages],
        [m["content"] for m in mo.get_or_create("a:b").messages],
        expected="nanobot writes both keys to one file a_b.jsonl; ours keeps them apart",
    )
    cmp.check(
        "list_sessions (key, title, preview)",
        sorted(_strip_rows(mt.list_sessions())),
        sorted(_strip_rows(mo.list_sessions())),
        expected="nanobot lists one file for a:b and a_b",
    )
    read = [m.read_session_file("telegram:42") for m in (mt, mo)]
    cmp.check(
        "read_session_file: messages and metadata",
        *[(r or {}).get("messages") for r in read],
    )
    cmp.check(
        "read_session_file: missing key", mt.read_session_file("nope"), mo.read_session_file("nope")
    )
    cmp.check("delete_session", mt.delete_session("cli:direct"), mo.delete_session("cli:direct"))
    cmp.check(
        "delete_session again", mt.delete_session("cli:direct"), mo.delete_session("cli:direct")
    )
    cmp.check(
        "safe_key('a:b')", mt.safe_key("a:b"), mo.safe_key("a:b"), expected="ours is collision-free"
    )
    mo.close()

    # nanobot's own workspace, with a corrupt line, opened by ours.
    sessions = ws_t / "sessions"
    path = next(sessions.glob("telegram_42.jsonl"))
    with path.open("a", encoding="utf-8") as f:
        f.write('{"role": "assistant", "content": "torn\n')
    mt.invalidate("telegram:42")
    imported = our_mod.SessionManager(ws_t)
    try:
        ours_s = imported.get_or_create("telegram:42")
        theirs_s = mt.get_or_create("telegram:42")
        cmp.check("import of nanobot's workspace: messages", theirs_s.messages, ours_s.messages)
        cmp.check("import: metadata", theirs_s.metadata, ours_s.metadata)
        cmp.check("import: last_consolidated", theirs_s.last_consolidated, ours_s.last_consolidated)
        cmp.check(
            "import: corrupt line kept",
            True,
            "torn" in imported.store.quarantine_path("telegram:42").read_text(),
        )
    finally:
        imported.close()
    return cmp.differences


def main() -> int:
    """Compare, print the steps, exit 1 on any unexpected difference."""
    try:
        theirs = importlib.import_module("nanobot.session.manager")
        importlib.import_module("loguru").logger.remove()
    except ImportError:
        print("nanobot is not installed in this interpreter: run this with the bench venv")
        return 2
    ours = importlib.import_module("sessionledger.tools.nanobot")
    with tempfile.TemporaryDirectory() as tmp:
        differences = run(theirs, ours, Path(tmp))
    print(f"{differences} unexpected difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())

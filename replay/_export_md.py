"""Markdown export: a session as a document people read in a bug report (pure rendering).

Rules:
- Deterministic: the bytes depend only on the log (and the redaction asked for): no export time,
  no locale, times in UTC, metadata keys sorted.
- The head (seq and chain hash) is in the first lines, so a reader can check the log it names.
- Message text is quoted (``> ``) so that headings or fences inside it cannot break the
  document; tool arguments, results and other structured values are fenced, with a fence
  longer than any backtick run inside.
- Text from the log outside code (titles, message text, summaries, roles) cannot become
  markup a renderer acts on: ``<`` is written ``&lt;`` (no raw HTML, no autolink), and ``[``
  and ``\\`` are backslash-escaped, so no inline or reference link, link definition or image
  (which would fetch or run something when read) can form, and a backslash in the text cannot
  undo an escape.
- A tool result is shown under the call it answers; one whose call is not in the log stands
  alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sessionledger.eventlog import BaseStore

from ._document import Document, session_document
from ._redact import Redaction
from ._transcript import Item, ToolCall

_TICKS = re.compile(r"`+")


def _when(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC")


def _fence(text: str, lang: str = "") -> list[str]:
    longest = max((len(m) for m in _TICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text, fence]


def _prose(text: str) -> str:
    return text.replace("\\", "\\\\").replace("<", "&lt;").replace("[", "\\[")


def _quote(text: str) -> list[str]:
    return [f"> {line}".rstrip() if line else ">" for line in _prose(text).split("\n")]


def _code(text: str) -> str:
    longest = max((len(m) for m in _TICKS.findall(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def _arguments(value: Any) -> tuple[str, str]:
    """Tool-call arguments as text, pretty-printed when they are a JSON object."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value, "text"
        if isinstance(parsed, dict | list):
            return _json(parsed), "json"
        return value, "text"
    return _json(value), "json"


def content_text(content: Any) -> tuple[str, str]:
    """A message's content as text: a string as it is, text parts joined, anything else JSON."""
    if content is None:
        return "", "text"
    if isinstance(content, str):
        return content, "text"
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "\n\n".join(p["text"] for p in content), "text"
    return _json(content), "json"


def _result(result: Item) -> list[str]:
    text, lang = content_text(result.content)
    out = ["", f"**Result** (#{result.seq}, {result.tokens} tokens)", ""]
    out += _fence(text, lang if lang == "json" else "text")
    return out


def _call(call: ToolCall) -> list[str]:
    ident = f" · {_code(call.id)}" if call.id else ""
    out = ["", f"**Tool call** {_code(call.name)}{ident}", ""]
    text, lang = _arguments(call.arguments)
    out += _fence(text, lang)
    if call.result is not None:
        out += _result(call.result)
    else:
        out += ["", "*No result in the log.*"]
    return out


def _message(item: Item) -> list[str]:
    out: list[str] = []
    if item.reasoning:
        out += ["", "*Reasoning:*", "", *_quote(item.reasoning)]
    text, lang = content_text(item.content)
    if item.role == "tool":
        what = f"result of {_code(item.tool_call_id)}" if item.tool_call_id else "tool result"
        name = f" from {_code(item.name)}" if item.name else ""
        out += ["", f"*{what}{name}; its call is not in this log.*", "", *_fence(text, lang)]
    elif text:
        out += ["", *(_fence(text, lang) if lang == "json" else _quote(text))]
    for path in item.media:
        out += ["", f"*Attachment:* {_code(path)}"]
    for call in item.tool_calls:
        out += _call(call)
    extra = {k: v for k, v in item.extra.items() if k != "timestamp"}
    if extra:
        out += ["", "*Other fields:*", "", *_fence(_json(extra), "json")]
    return out


def _event(item: Item) -> list[str]:
    out = ["", _prose(item.summary)]
    if item.replaced is not None and item.replaced.count:
        out += [
            "",
            f"Replaces {item.replaced.count} message(s): "
            f"#{item.replaced.first_seq} to #{item.replaced.last_seq}.",
        ]
    if item.text is not None:
        out += ["", "Summary:", "", *_quote(item.text)]
    return out


def render_markdown(doc: Document) -> str:
    """The Markdown text of a gathered session (pure, deterministic)."""
    title = doc.title or doc.key
    lines = [
        f"# {_prose(title)}",
        "",
        f"- Session: {_code(doc.key)} (id {_code(doc.session_id)})",
        f"- Head: seq {doc.seq}, hash {_code(doc.head)}",
        f"- Created {_when(doc.created_at)}, updated {_when(doc.updated_at)}",
        f"- Live: {doc.live_messages} message(s), {doc.live_tokens:,} tokens; "
        f"lifecycle {doc.lifecycle}",
    ]
    if doc.redacted:
        lines.append(f"- Redacted: {', '.join(_code(n) for n in doc.redacted)}")
    if doc.metadata:
        lines += ["", "## Metadata", ""]
        for key in sorted(doc.metadata):
            value = doc.metadata[key]
            shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            lines.append(f"- {_code(key)}: {_code(str(shown))}")
    lines += ["", "## Timeline"]
    for item in doc.items:
        if item.answers is not None:
            continue  # shown under its call
        if item.kind == "message":
            role = _prose(item.role or "?")
            head = f"### #{item.seq} · {role} · {_when(item.ts)} · {item.tokens} tokens"
            lines += ["", head, *_message(item)]
        else:
            lines += [
                "",
                f"### #{item.seq} · {_prose(item.kind)} · {_when(item.ts)}",
                *_event(item),
            ]
    view = doc.view
    lines += [
        "",
        "## The model's view at the head",
        "",
        f"`history()` gives the model {view.entries} entr{'y' if view.entries == 1 else 'ies'} "
        f"({view.used_tokens:,} tokens) of {view.live_messages} live message(s).",
    ]
    given = [r for r in view.rows if r.included]
    if given:
        lines += ["", f"Given: #{given[0].seq} to #{given[-1].seq}."]
    return "\n".join(lines) + "\n"


def export_markdown(
    store: BaseStore, key: str, *, redact: Redaction | Iterable[str] | None = None
) -> bytes:
    """Session ``key`` as a Markdown document (UTF-8 bytes; the same log gives the same bytes).

    Raises:
        SessionNotFoundError: no session ``key``.
        CorruptLogError: a line in the middle of the log is bad.
        RedactionError: a field name given to ``redact`` is not understood.
    """
    doc = session_document(store, key, redact=redact)
    return render_markdown(doc).encode("utf-8", "surrogatepass")

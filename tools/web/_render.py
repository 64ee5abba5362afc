"""HTML of a session, shared by the viewer and the HTML export (pure: items in, markup out).

Rules:
- Every value from a log is escaped (``html.escape``); nothing from a log becomes markup, a URL
  scheme or an attribute name.
- Long text is folded in a ``<details>``: the viewer leaves the full text out and loads it on
  demand (``lazy``), the export puts it in, so the file stands alone.
- Output depends only on its inputs (no clock, no random ids), so an export is deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from html import escape
from typing import Any

from sessionledger.replay import Item, ModelView, ToolCall

#: Text longer than this is folded, showing the first :data:`PREVIEW` characters.
FOLD = 1_200
PREVIEW = 480

#: ``lazy(seq, part)`` -> URL of the full text, or None to put the full text in the page.
Lazy = Callable[[int, str], str] | None


def when(ts: datetime) -> str:
    """A UTC time as the viewer shows it."""
    return ts.strftime("%Y-%m-%d %H:%M:%S")


def text_of(content: Any) -> str:
    """A message's content as text: a string as it is, text parts joined, anything else JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "\n\n".join(p["text"] for p in content)
    return json.dumps(content, ensure_ascii=False, indent=2, sort_keys=True)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, dict | list):
            return json.dumps(parsed, ensure_ascii=False, indent=2, sort_keys=True)
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def folded(text: str, cls: str, seq: int, part: str, lazy: Lazy) -> str:
    """``text`` in a block of class ``cls``, folded when long."""
    if len(text) <= FOLD and text.count("\n") < 24:
        return f'<div class="{cls}">{escape(text)}</div>'
    preview = text[:PREVIEW]
    more = f"show all {len(text):,} characters"
    url = lazy(seq, part) if lazy is not None else None
    if url is not None:
        body = f'<div class="{cls} full" data-src="{escape(url)}"></div>'
    else:
        body = f'<div class="{cls} full">{escape(text)}</div>'
    return (
        f'<details class="fold"><summary><div class="{cls} preview">{escape(preview)}\u2026</div>'
        f'<span class="more">{more}</span></summary>{body}</details>'
    )


def _result(call: ToolCall, lazy: Lazy) -> str:
    result = call.result
    if result is None:
        return '<div class="result missing">no result in the log (yet)</div>'
    return render_result(result, lazy)


def render_result(result: Item, lazy: Lazy = None) -> str:
    """A tool result as shown under its call."""
    return (
        f'<div class="result" id="e{result.seq}" data-seq="{result.seq}">'
        f'<div class="result-head"><a class="seq" href="#e{result.seq}">#{result.seq}</a> '
        f'result <span class="tok">{result.tokens:,} tok</span> '
        f"<time>{when(result.ts)}</time></div>"
        f"{folded(text_of(result.content), 'text mono', result.seq, 'content', lazy)}</div>"
    )


def _call(call: ToolCall, lazy: Lazy) -> str:
    ident = f' <code class="cid">{escape(call.id)}</code>' if call.id else ""
    cid = f' data-cid="{escape(call.id)}"' if call.id else ""
    return (
        f'<div class="call"{cid}><div class="call-head"><span class="fn">{escape(call.name)}</span>'
        f'{ident}</div><pre class="args">{escape(_arguments(call.arguments))}</pre>'
        f"{_result(call, lazy)}</div>"
    )


def _message(item: Item, lazy: Lazy) -> str:
    role = item.role or "?"
    parts = [
        f'<article class="ev msg role-{escape(_css(role))}" id="e{item.seq}" data-seq="{item.seq}">',
        f'<header><a class="seq" href="#e{item.seq}">#{item.seq}</a> '
        f'<span class="role">{escape(role)}</span>',
    ]
    if item.name:
        parts.append(f' <span class="name">{escape(item.name)}</span>')
    parts.append(
        f' <span class="tok">{item.tokens:,} tok</span> <time>{when(item.ts)}</time></header>'
    )
    if item.reasoning:
        parts.append('<div class="reasoning-label">reasoning</div>')
        parts.append(folded(item.reasoning, "text reasoning", item.seq, "reasoning", lazy))
    text = text_of(item.content)
    if item.role == "tool":
        what = f"result of {escape(item.tool_call_id)}" if item.tool_call_id else "tool result"
        parts.append(f'<div class="orphan">{what}; its call is not on this page</div>')
        parts.append(folded(text, "text mono", item.seq, "content", lazy))
    elif text:
        parts.append(folded(text, "text", item.seq, "content", lazy))
    for path in item.media:
        parts.append(f'<div class="media">attachment <code>{escape(path)}</code></div>')
    parts.extend(_call(call, lazy) for call in item.tool_calls)
    parts.append("</article>")
    return "".join(parts)


def _css(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]


def _event(item: Item, jump: Callable[[int], str]) -> str:
    parts = [
        f'<article class="ev sys kind-{escape(_css(item.kind))}" id="e{item.seq}" '
        f'data-seq="{item.seq}"><header><a class="seq" href="#e{item.seq}">#{item.seq}</a> '
        f'<span class="kind">{escape(item.kind)}</span> <time>{when(item.ts)}</time></header>',
        f'<div class="summary">{escape(item.summary)}</div>',
    ]
    rep = item.replaced
    if rep is not None and rep.count and rep.first_seq is not None and rep.last_seq is not None:
        parts.append(
            f'<div class="replaced">replaces {rep.count:,} message(s): '
            f'<a href="{escape(jump(rep.first_seq))}" data-jump="{rep.first_seq}">'
            f"#{rep.first_seq}</a> to "
            f'<a href="{escape(jump(rep.last_seq))}" data-jump="{rep.last_seq}">'
            f"#{rep.last_seq}</a></div>"
        )
    if item.text is not None:
        parts.append(f'<blockquote class="text">{escape(item.text)}</blockquote>')
    parts.append("</article>")
    return "".join(parts)


def _anchor(seq: int) -> str:
    return f"#e{seq}"


def render_items(
    items: list[Item],
    *,
    lazy: Lazy = None,
    jump: Callable[[int], str] = _anchor,
    notes: dict[int, str] | None = None,
) -> str:
    """The timeline markup of ``items`` (a tool result paired on the page is shown once);
    ``notes`` are markup put in seq order among them (e.g. a line that failed its check)."""
    shown = {c.result.seq for i in items for c in i.tool_calls if c.result is not None}
    pending = sorted((notes or {}).items())
    out: list[str] = []
    for item in items:
        while pending and pending[0][0] < item.seq:
            out.append(pending.pop(0)[1])
        if item.kind == "message":
            if item.answers is not None and item.seq in shown:
                continue
            out.append(_message(item, lazy))
        else:
            out.append(_event(item, jump))
    out.extend(note for _, note in pending)
    return "\n".join(out)


_REASONS = {
    "consolidated": "consolidated into memory",
    "compacted": "replaced by the compaction summary",
    "window": "before the window starts",
    "budget": "over the token budget",
    "skipped": "skipped by history's rules",
}


def render_view(view: ModelView) -> str:
    """The model's view: what history() gives (plain), what it leaves out (greyed), the budget."""
    budget = f"{view.max_tokens:,} token budget" if view.max_tokens else "no token budget"
    window = f"{view.max_messages} message window" if view.max_messages else "120 message window"
    parts = [
        f'<div class="view-head" data-seq="{view.seq}"><b>At #{view.seq}</b>: history() gives '
        f"<b>{view.entries:,}</b> entr{'y' if view.entries == 1 else 'ies'}, "
        f"<b>{view.used_tokens:,}</b> tokens ({budget}, {window}) of "
        f"{view.live_messages:,} live messages</div>"
    ]
    if view.hidden:
        parts.append(f'<div class="vrow out more">{view.hidden:,} earlier message(s) outside</div>')
    marked = False
    summary = ""
    if view.summary is not None:
        summary = (
            '<div class="vrow in summary"><span class="vseq">summary</span>'
            f'<span class="vrole">system</span><span class="vtext">'
            f"{escape(_clip(str(view.summary.get('content', ''))))}</span></div>"
        )
    for row in view.rows:
        if row.included and not marked:
            parts.append(_budget_line(view) + summary)
            marked = True
        role = escape(row.role or "?")
        if row.included:
            text = _clip(text_of((row.entry or {}).get("content")))
            if not text and row.entry and row.entry.get("tool_calls"):
                text = "(tool calls)"
            parts.append(
                f'<div class="vrow in" data-seq="{row.seq}"><a class="vseq" href="#e{row.seq}" '
                f'data-jump="{row.seq}">#{row.seq}</a><span class="vrole">{role}</span>'
                f'<span class="vtext">{escape(text)}</span>'
                f'<span class="vtok">{row.tokens:,}</span></div>'
            )
        else:
            why = _REASONS.get(row.reason, row.reason)
            parts.append(
                f'<div class="vrow out" data-seq="{row.seq}" data-reason="{escape(row.reason)}">'
                f'<a class="vseq" href="#e{row.seq}" data-jump="{row.seq}">#{row.seq}</a>'
                f'<span class="vrole">{role}</span><span class="vtext">{escape(why)}</span>'
                f'<span class="vtok">{row.tokens:,}</span></div>'
            )
    if not marked:
        parts.append(_budget_line(view) + summary)
    return "".join(parts)


def _budget_line(view: ModelView) -> str:
    limit = f" of {view.max_tokens:,}" if view.max_tokens else ""
    return (
        f'<div class="budget-line"><span>above: outside the context</span>'
        f"<span>below: given to the model, {view.used_tokens:,}{limit} tokens</span></div>"
    )


def _clip(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def render_badge(ok: bool | None, line: int = 0, what: str = "") -> str:
    """The verify badge: verified, the first bad line, or still checking."""
    if ok is None:
        return '<span class="badge wait" data-verify="pending">checking\u2026</span>'
    if ok:
        return '<span class="badge ok" data-verify="ok">\u2713 chain verified</span>'
    where = f"line {line}: " if line else ""
    return (
        f'<span class="badge bad" data-verify="bad" data-line="{line}" title="{escape(what)}">'
        f"\u2717 {escape(where + _clip(what, 90))}</span>"
    )

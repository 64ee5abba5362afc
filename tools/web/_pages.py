"""What the viewer's routes render: the list rows, the page shells, a timeline page (no web
framework here, so it is tested and reused without one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote, urlencode

from sessionledger import projections
from sessionledger.eventlog import BaseStore, EventLogError, SessionState
from sessionledger.projections import SearchHit, SessionInfo
from sessionledger.replay import MASK, Redaction, build_items, state_at

from ._export_html import Heading
from ._logindex import LogIndex
from ._render import render_badge, render_items, when
from ._verifier import Verdict

PAGE = 100
#: Messages asked of the search projection for one list query.
SEARCH_LIMIT = 1000
#: Events after a page read to pair a call on the page with its result.
LOOKAHEAD = 40


def session_url(key: str) -> str:
    """The viewer's URL of a session page."""
    return "/session?" + urlencode({"key": key})


def badge(verdict: Verdict | None) -> str:
    """The verify badge of a verdict (None: not checked yet)."""
    if verdict is None:
        return render_badge(None)
    return render_badge(verdict.ok, verdict.line, verdict.what)


def shell(title: str, where: str, body: str, *, page: str) -> str:
    """A viewer page around ``body`` (assets from this server only)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{escape(title)} · sessionledger</title>"
        '<link rel="stylesheet" href="/static/viewer.css"></head>\n'
        f'<body data-page="{page}"><div class="top"><a class="brand" href="/">sessionledger</a>'
        f'<span class="where">{escape(where)}</span>'
        '<span class="live" id="live">live</span><span class="ro">read-only</span></div>\n'
        f"<main>{body}</main>\n"
        '<script src="/static/viewer.js"></script></body></html>\n'
    )


def matches(info: SessionInfo, q: str) -> bool:
    """Whether a search text ``q`` is in the key, title or preview (case-insensitive)."""
    q = q.casefold()
    return q in info.key.casefold() or q in info.title.casefold() or q in info.preview.casefold()


@dataclass(slots=True)
class Listing:
    """One page of the session list (and, when searched, each session's best match)."""

    rows: list[SessionInfo]
    total: int
    offset: int
    limit: int
    hits: dict[str, SearchHit] = field(default_factory=dict)


def list_page(
    store: BaseStore,
    *,
    q: str = "",
    channel: str | None = None,
    agent: str | None = None,
    state: str | None = None,
    offset: int = 0,
    limit: int = 50,
    full_text: bool = True,
) -> Listing:
    """The matching sessions, newest-updated first, one page of them.

    ``q`` matches the key, title and first message; with ``full_text`` also every message,
    through the search projection (``projections.search``).
    """
    # A sealed row is opened (one load) only when it is shown or a query must read its title.
    rows = projections.list_sessions(
        store, channel=channel, agent=agent, state=state, open_sealed=bool(q)
    )
    hits: dict[str, SearchHit] = {}
    if q and full_text:
        try:
            for hit in projections.search(store, q, channel=channel, limit=SEARCH_LIMIT):
                hits.setdefault(hit.key, hit)
        except EventLogError:
            hits = {}  # the search index cannot be used: key, title and preview still match
    if q:
        rows = [r for r in rows if r.key in hits or matches(r, q)]
    page = rows[offset : offset + limit]
    if not q:
        page = projections.open_sealed_rows(store, page)
    return Listing(
        page, len(rows), offset, limit, {r.key: hits[r.key] for r in page if r.key in hits}
    )


def rows_html(
    listing: Listing, verdict: Callable[[str], Verdict | None], redaction: Redaction
) -> str:
    """The table rows of a list page (titles and previews masked as the redaction asks)."""
    hide_title = "title" in redaction.metadata
    hide_preview = "content" in redaction.fields or bool(
        {("user", "content"), ("assistant", "content")} & redaction.role_fields
    )
    if not listing.rows:
        return '<tr><td colspan="7" class="empty">No session matches.</td></tr>'
    out = []
    for r in listing.rows:
        title = (
            escape(r.title) if r.title and not hide_title else '<span class="sub">untitled</span>'
        )
        preview = MASK if hide_preview and r.preview else r.preview
        hit = listing.hits.get(r.key)
        found = (
            f'<a class="found" href="{escape(session_url(r.key))}&amp;at={hit.seq}#e{hit.seq}">'
            f"#{hit.seq} {escape(hit.role)}: {escape(hit.snippet)}</a>"
            if hit is not None
            else ""
        )
        out.append(
            f'<tr data-key="{escape(r.key)}"><td class="key"><a href="{escape(session_url(r.key))}">'
            f"{escape(r.key)}</a></td>"
            f'<td class="title">{title}<span class="preview">{escape(preview)}</span>{found}</td>'
            f'<td class="num">{r.messages:,}</td><td class="num">{r.tokens:,}</td>'
            f'<td><span class="state {escape(r.state)}">{escape(r.state)}</span></td>'
            f'<td class="when">{when(r.updated_at)}</td>'
            f'<td class="verify">{badge(verdict(r.key))}</td></tr>'
        )
    return "\n".join(out)


def list_body(listing_html: str) -> str:
    """The list page's body: filters, the table (rows filled in), the pager."""
    states = "".join(
        f'<option value="{s}">{s}</option>'
        for s in ("active", "idle", "compacting", "suspended", "archived")
    )
    return (
        '<h1>Sessions</h1><form class="filters" id="filters">'
        '<input name="q" type="search" placeholder="Search sessions and what was said" '
        'autocomplete="off">'
        '<input name="channel" placeholder="channel" size="10">'
        '<input name="agent" placeholder="agent" size="10">'
        f'<select name="state"><option value="">any state</option>{states}</select>'
        '<span class="count" id="count"></span></form>'
        '<table class="sessions"><colgroup><col class="c-key"><col class="c-title">'
        '<col class="c-num"><col class="c-num"><col class="c-state"><col class="c-when">'
        '<col class="c-verify"></colgroup><thead><tr><th>session</th><th>title / first message</th>'
        '<th class="num">msgs</th><th class="num">tokens</th><th>state</th>'
        "<th>updated (UTC)</th><th>verify</th></tr></thead>"
        f'<tbody id="rows">{listing_html}</tbody></table>'
        '<div class="pager"><button id="prev" type="button">\u2190 newer</button>'
        '<button id="next" type="button">older \u2192</button><span class="sub" id="range">'
        "</span></div>"
    )


@dataclass(slots=True)
class TimelinePage:
    """Events ``first..last`` of a session, rendered."""

    html: str
    first: int
    last: int
    head: int


def timeline_page(
    store: BaseStore,
    index: LogIndex,
    lo: int,
    hi: int,
    redaction: Redaction,
    lazy_url: Callable[[int, str], str],
) -> TimelinePage:
    """Render events ``lo..hi`` (clamped), pairing calls with results just after the page."""
    hi = min(hi, index.last_seq)
    lo = max(lo, index.base + 1)
    if hi < lo:
        return TimelinePage("", lo, hi, index.last_seq)
    events, bad = index.events(lo, hi + LOOKAHEAD, store.hash_key)
    events = index.open_with(store, events)
    page = [e for e in events if e.seq <= hi]
    following = [e for e in events if e.seq > hi]

    def state_for(seq: int) -> SessionState:
        return state_at(store, index.key, seq=seq)

    try:
        items = build_items(page, state_for=state_for, following=following, redaction=redaction)
    except EventLogError:  # a state before a bad line cannot be had: describe without it
        items = build_items(page, following=following, redaction=redaction)
    notes = {
        b.seq if b.seq >= 0 else hi: (
            f'<div class="bad-line" data-line="{b.line}">line {b.line}'
            f"{f' (seq {b.seq})' if b.seq >= 0 else ''} fails its check: {escape(b.reason)}</div>"
        )
        for b in bad
        if b.seq <= hi
    }
    html = render_items(items, lazy=lazy_url, jump=_jump(index.key), notes=notes)
    return TimelinePage(html, lo, hi, index.last_seq)


def _jump(key: str) -> Callable[[int], str]:
    def jump(seq: int) -> str:
        return f"{session_url(key)}&at={seq}#e{seq}"

    return jump


def quoted(key: str) -> str:
    """``key`` for a URL query."""
    return quote(key, safe="")


def quick_heading(index: LogIndex, key: str, redacted: list[str]) -> Heading:
    assert index.header is not None
    created = index.header.created_at
    return Heading(
        key, "", index.last_seq, index.head, -1, -1, "", created, created, tuple(redacted)
    )


def catalog_heading(
    store: BaseStore, key: str, head: str, seq: int, redacted: list[str]
) -> Heading:
    listed = projections.list_sessions(store, prefix=key, open_sealed=False)
    rows = projections.open_sealed_rows(store, [r for r in listed if r.key == key])
    if not rows:
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        return Heading(key, "", seq, head, 0, 0, "?", epoch, epoch, tuple(redacted))
    row = rows[0]
    return Heading(
        key,
        "" if any(n == "metadata.title" for n in redacted) else row.title,
        seq,
        head,
        row.messages,
        row.tokens,
        row.state,
        row.created_at,
        row.updated_at,
        tuple(redacted),
    )


def session_controls(
    base: int, head: int, target: int, page: TimelinePage, verdict: Verdict | None, key: str
) -> str:
    return (
        f'<div id="session" data-key="{escape(key)}" data-base="{base}" data-head="{head}" '
        f'data-first="{page.first}" data-last="{page.last}" data-at="{target}">'
        f'<div class="travel"><span class="verify" id="badge">{badge(verdict)}</span>'
        f'<input type="range" id="slider" min="{base}" max="{head}" value="{target}" '
        'aria-label="time travel over seq">'
        f'<span class="at" id="at">#{target} of #{head}</span>'
        '<label>token budget <input type="number" id="budget" min="0" step="1000" value="0">'
        "</label></div>"
        '<div class="cols"><section class="timeline"><h2>Timeline</h2>'
        '<button class="more-btn" id="earlier" type="button">load earlier events</button>'
        f'<div id="events">{page.html}</div>'
        '<button class="more-btn" id="later" type="button">load later events</button>'
        "</section>"
        '<aside class="side"><h2>The model\'s view</h2><div id="view">'
        '<div class="sub">loading\u2026</div></div></aside></div></div>'
    )

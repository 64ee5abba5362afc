"""HTML export: one self-contained file with the viewer's rendering of a session.

Invariants: the stylesheet is inlined (no network, no script needed: long text folds with
``<details>``); the bytes depend only on the log and the redaction asked for; the head seq and
hash are in the page and in ``<meta name="sessionledger-head">``; no ``hash_key`` material.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from html import escape
from importlib import resources

from sessionledger.eventlog import BaseStore
from sessionledger.replay import Document, Redaction, session_document

from ._render import render_items, render_view, when


def static_text(name: str) -> str:
    """A file shipped in the package's ``static/`` folder."""
    return resources.files(__package__).joinpath("static", name).read_text("utf-8")


@dataclass(frozen=True, slots=True)
class Heading:
    """What a session's heading shows."""

    key: str
    title: str
    seq: int
    head: str
    live_messages: int
    live_tokens: int
    lifecycle: str
    created_at: datetime
    updated_at: datetime
    redacted: tuple[str, ...] = ()


def heading_of(doc: Document) -> Heading:
    """The heading of a gathered session."""
    return Heading(
        doc.key,
        doc.title,
        doc.seq,
        doc.head,
        doc.live_messages,
        doc.live_tokens,
        doc.lifecycle,
        doc.created_at,
        doc.updated_at,
        tuple(doc.redacted),
    )


def header_html(doc: Heading) -> str:
    """The session's heading: title, key, head, counts, redaction (counts < 0: not known yet)."""
    title = doc.title or doc.key
    redacted = (
        f" · redacted: <code>{escape(', '.join(doc.redacted))}</code>" if doc.redacted else ""
    )
    counts = (
        f" · {doc.live_messages:,} live messages, {doc.live_tokens:,} tokens · "
        f"{escape(doc.lifecycle)} · created {when(doc.created_at)} UTC, updated "
        f"{when(doc.updated_at)} UTC"
        if doc.live_messages >= 0
        else f" · created {when(doc.created_at)} UTC"
    )
    return (
        f'<div class="head" id="heading"><h1>{escape(title)}</h1>'
        f'<span class="facts">session <code>{escape(doc.key)}</code> · head '
        f'<b>#{doc.seq}</b> <code class="head-hash">{escape(doc.head)}</code>'
        f"{counts}{redacted}</span></div>"
    )


def render_document_html(doc: Document) -> str:
    """A whole session as one HTML page (pure, deterministic)."""
    css = static_text("viewer.css")
    title = doc.title or doc.key
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="sessionledger-key" content="{escape(doc.key)}">'
        f'<meta name="sessionledger-head" content="{doc.seq}:{escape(doc.head)}">'
        f"<title>{escape(title)} · sessionledger export</title>"
        f"<style>\n{css}</style></head>\n<body>"
        '<div class="top"><span class="brand">sessionledger</span>'
        f'<span class="where">export of {escape(doc.key)}</span>'
        '<span class="ro">exported · read-only</span></div>\n'
        f"<main>{header_html(heading_of(doc))}\n"
        '<div class="cols"><section class="timeline"><h2>Timeline</h2>\n'
        f'<div id="events">{render_items(doc.items)}</div></section>\n'
        '<aside class="side"><h2>The model\'s view at the head</h2>'
        f'<div id="view">{render_view(doc.view)}</div></aside></div>\n'
        f'<p class="foot">Head #{doc.seq} <code>{escape(doc.head)}</code>: check it against '
        "the log with <code>sessionledger verify</code>.</p></main>\n</body></html>\n"
    )


def export_html(
    store: BaseStore, key: str, *, redact: Redaction | Iterable[str] | None = None
) -> bytes:
    """Session ``key`` as one self-contained HTML file (the same log gives the same bytes).

    Raises:
        SessionNotFoundError: no session ``key``.
        CorruptLogError: a line in the middle of the log is bad.
        RedactionError: a field name given to ``redact`` is not understood.
    """
    doc = session_document(store, key, redact=redact)
    return render_document_html(doc).encode("utf-8", "surrogatepass")

"""The web viewer (``sessionledger serve``) and the HTML export of a session.

The viewer needs the ``web`` extra (starlette, uvicorn); the HTML export does not.

>>> from sessionledger.eventlog import MemoryStore
>>> from sessionledger.tools.web import export_html
>>> store = MemoryStore()
>>> store.session("telegram:42").append_message("user", "Plan a trip to Kyoto")
1
>>> page = export_html(store, "telegram:42").decode()
>>> "Plan a trip to Kyoto" in page and page.startswith("<!DOCTYPE html>")
True
"""

from __future__ import annotations

import typing as _typing

from ._export_html import Heading, export_html, render_document_html, static_text
from ._render import render_badge, render_items, render_result, render_view

if _typing.TYPE_CHECKING:
    from ._app import create_app
    from ._serve import serve


def __getattr__(name: str) -> object:
    # The app needs starlette: loaded only when asked for, so the HTML export works without it.
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "serve":
        from ._serve import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = (
    "Heading",
    "create_app",
    "export_html",
    "render_badge",
    "render_document_html",
    "render_items",
    "render_result",
    "render_view",
    "serve",
    "static_text",
)

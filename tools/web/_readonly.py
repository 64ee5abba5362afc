"""ASGI middleware that keeps the viewer read-only and its pages to their own origin."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'"


class ReadOnly:
    """ASGI middleware: only GET and HEAD reach the app; every response carries the CSP."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD"):
            response = Response("read-only viewer", 405, headers={"Allow": "GET, HEAD"})
            await response(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"content-security-policy", CSP.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)

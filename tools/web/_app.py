"""The viewer's web app (starlette): read-only routes over one store.

Invariants:
- Read-only: every route is GET (or HEAD); any other method is refused with 405 before a
  route runs, and no route calls a store method that writes a log. (Listing may refresh the
  store's derived catalog view, as ``sessionledger ls`` does.)
- No asset from elsewhere: the page loads only ``/static/viewer.css`` and ``/static/viewer.js``
  from the package; responses forbid other origins (Content-Security-Policy ``'self'``).
- Store calls run in worker threads; live updates are server-sent events: the list's from a
  poll of the catalog and the verifier, a session's tail from ``replay.follow``.
- No ``hash_key`` material is ever rendered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from html import escape
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sessionledger import projections, replay
from sessionledger.eventlog import (
    BaseStore,
    CorruptLogError,
    Event,
    EventLogError,
    MessageAppended,
    SessionNotFoundError,
    SessionState,
)
from sessionledger.replay import NO_REDACTION, Redaction

from ._export_html import header_html, static_text
from ._logindex import LogCache
from ._pages import (
    PAGE,
    badge,
    catalog_heading,
    list_body,
    list_page,
    quick_heading,
    rows_html,
    session_controls,
    shell,
    timeline_page,
)
from ._readonly import ReadOnly
from ._render import render_result, render_view, text_of
from ._verifier import Verifier

_STATIC = {"viewer.css": "text/css", "viewer.js": "text/javascript"}


def _int(request: Request, name: str, default: int, lo: int = 0, hi: int = 1 << 62) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _BadRequest(f"{name} must be a whole number, not {raw!r}") from None
    return min(max(value, lo), hi)


class _BadRequest(Exception):
    pass


def create_app(
    store: BaseStore,
    *,
    redaction: Redaction = NO_REDACTION,
    verify_interval: float = 1.0,
    poll: float = 0.5,
) -> Starlette:
    """The viewer over ``store`` (which the caller keeps open and closes)."""
    logs = LogCache(store)
    # Searching message text would show (and reveal by matching) what a redaction masks.
    full_text = not (
        "content" in redaction.fields or any(f == "content" for _, f in redaction.role_fields)
    )
    verifier = Verifier(store, interval=verify_interval)

    def path_of(key: str) -> str:
        path_for = getattr(store, "path_for", None)
        return str(path_for(key)) if path_for is not None else key

    def lazy_url(key: str) -> Callable[[int, str], str]:
        from urllib.parse import urlencode

        def url(seq: int, part: str) -> str:
            return "/api/text?" + urlencode({"key": key, "seq": seq, "part": part})

        return url

    async def run(fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn)

    def key_of(request: Request) -> str:
        key = request.query_params.get("key")
        if not key:
            raise _BadRequest("give the session as ?key=...")
        return key

    async def index(request: Request) -> Response:
        listing = await run(lambda: list_page(store, limit=50))
        body = list_body(rows_html(listing, verifier.verdict, redaction))
        return HTMLResponse(shell("Sessions", _store_name(store), body, page="list"))

    async def api_sessions(request: Request) -> Response:
        params = request.query_params
        limit = _int(request, "limit", 50, 1, 500)
        offset = _int(request, "offset", 0)
        listing = await run(
            lambda: list_page(
                store,
                q=params.get("q", "").strip(),
                channel=params.get("channel") or None,
                agent=params.get("agent") or None,
                state=params.get("state") or None,
                offset=offset,
                limit=limit,
                full_text=full_text,
            )
        )
        return JSONResponse(
            {
                "html": rows_html(listing, verifier.verdict, redaction),
                "total": listing.total,
                "offset": listing.offset,
                "limit": listing.limit,
                "shown": len(listing.rows),
            }
        )

    async def sessions_events(request: Request) -> Response:
        def signature() -> tuple[Any, ...]:
            rows = projections.list_sessions(store, open_sealed=False)  # heads only: no loads
            return (verifier.version, tuple((r.key, r.seq, r.head, r.state) for r in rows))

        async def stream() -> AsyncIterator[str]:
            last = await run(signature)
            yield "event: hello\ndata: {}\n\n"
            while True:
                await anyio.sleep(poll)
                now = await run(signature)
                if now != last:
                    last = now
                    yield "event: change\ndata: {}\n\n"

        return _sse(stream())

    async def session(request: Request) -> Response:
        key = key_of(request)
        at = request.query_params.get("at")

        def build() -> str:
            index = logs.get(key, path_of(key))
            head = index.last_seq
            target = _int(request, "at", head, index.base, head)
            lo = (
                max(index.base + 1, target - PAGE // 2)
                if at
                else max(index.base + 1, head - PAGE + 1)
            )
            hi = min(head, lo + PAGE - 1)
            page = timeline_page(store, index, lo, hi, redaction, lazy_url(key))
            # The catalog's facts (title, counts) come with /api/heading: a first listing of
            # a long log reads all of it, and the page must not wait for that.
            doc = quick_heading(index, key, redaction.describe())
            return header_html(doc) + session_controls(
                index.base, head, target, page, verifier.verdict(key), key
            )

        body = await run(build)
        return HTMLResponse(shell(key, _store_name(store), body, page="session"))

    async def api_timeline(request: Request) -> Response:
        key = key_of(request)
        limit = _int(request, "limit", PAGE, 1, 500)

        def build() -> dict[str, Any]:
            index = logs.get(key, path_of(key))
            if "before" in request.query_params:
                hi = _int(request, "before", index.last_seq + 1) - 1
                lo = hi - limit + 1
            elif "after" in request.query_params:
                lo = _int(request, "after", 0) + 1
                hi = lo + limit - 1
            else:
                at = _int(request, "around", index.last_seq)
                lo = max(index.base + 1, at - limit // 2)
                hi = lo + limit - 1
            page = timeline_page(store, index, lo, hi, redaction, lazy_url(key))
            return {
                "html": page.html,
                "first": page.first,
                "last": page.last,
                "head": page.head,
                "base": index.base,
            }

        return JSONResponse(await run(build))

    async def api_view(request: Request) -> Response:
        key = key_of(request)
        max_tokens = _int(request, "max_tokens", 0)
        max_messages = _int(request, "max_messages", 0)

        def build() -> dict[str, Any]:
            raw = request.query_params.get("seq")
            note = ""

            def show(state: SessionState) -> dict[str, Any]:
                view = replay.model_view(
                    state, max_messages=max_messages, max_tokens=max_tokens, redaction=redaction
                )
                return {
                    "html": note + render_view(view),
                    "seq": state.seq,
                    "ts": state.updated_at.isoformat(),
                    "messages": len(state.messages),
                    "tokens": state.live_tokens,
                }

            try:
                if raw:
                    return show(replay.state_at(store, key, seq=_int(request, "seq", 0)))
                return logs.with_head_state(key, path_of(key), show)
            except CorruptLogError as exc:
                # Show what can be trusted: the readable prefix, saying where the log breaks.
                state = store.load(key, prefix=True, snapshot=False).state
                note = (
                    f'<div class="bad-line">line {exc.line} fails its check; this is the view '
                    f"at #{state.seq}, the end of the readable prefix</div>"
                )
                return show(state)

        return JSONResponse(await run(build))

    async def api_heading(request: Request) -> Response:
        key = key_of(request)

        def build() -> str:
            index = logs.get(key, path_of(key))
            return header_html(
                catalog_heading(store, key, index.head, index.last_seq, redaction.describe())
            )

        return HTMLResponse(await run(build))

    async def api_verify(request: Request) -> Response:
        key = key_of(request)
        verdict = await run(lambda: verifier.check(key))
        return JSONResponse(
            {
                "ok": verdict.ok,
                "line": verdict.line,
                "what": verdict.what,
                "seq": verdict.seq,
                "head": verdict.head,
                "html": badge(verdict),
            }
        )

    async def api_text(request: Request) -> Response:
        key = key_of(request)
        seq = _int(request, "seq", 0)
        part = request.query_params.get("part", "content")
        if part not in ("content", "reasoning"):
            raise _BadRequest("part must be content or reasoning")

        def build() -> str:
            index = logs.get(key, path_of(key))
            events, _ = index.events(seq, seq, store.hash_key)
            events = index.open_with(store, events)
            items = replay.build_items(events, redaction=redaction)
            if not items or items[0].kind != "message":
                raise _BadRequest(f"seq {seq} is not a message of {key!r}")
            value = items[0].reasoning if part == "reasoning" else text_of(items[0].content)
            return escape(value or "")

        return HTMLResponse(await run(build))

    async def api_tail(request: Request) -> Response:
        key = key_of(request)
        after = _int(request, "after", 0)

        def start() -> replay.Follow:
            point = logs.get(key, path_of(key)).point_after(after)
            return replay.follow(store, key, after, poll=0.05, max_poll=0.5, start=point)

        follower = await run(start)

        async def stream() -> AsyncIterator[str]:
            yield "event: hello\ndata: {}\n\n"
            try:
                async for event in follower:
                    seq = event.seq

                    def render(seq: int = seq, event: Event = event) -> dict[str, Any]:
                        index = logs.get(key, path_of(key))
                        page = timeline_page(store, index, seq, seq, redaction, lazy_url(key))
                        out: dict[str, Any] = {
                            "seq": seq,
                            "html": page.html,
                            "head": index.last_seq,
                        }
                        if isinstance(event, MessageAppended):
                            # A tool result: the page may show its call waiting for it.
                            item = replay.message_item(event, redaction)
                            if item.role == "tool" and item.tool_call_id:
                                out["cid"] = item.tool_call_id
                                out["result"] = render_result(item, lazy_url(key))
                        return out

                    payload = await run(render)
                    yield f"event: append\ndata: {json.dumps(payload)}\n\n"
            except EventLogError as exc:
                yield f"event: problem\ndata: {json.dumps({'what': str(exc)})}\n\n"
            finally:
                follower.close()

        return _sse(stream())

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        kind = _STATIC.get(name)
        if kind is None:
            return Response("not found", 404)
        return Response(
            static_text(name),
            media_type=kind,
            headers={"Cache-Control": "no-cache"},
        )

    def guarded(
        endpoint: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                return await endpoint(request)
            except _BadRequest as exc:
                return _problem(request, 400, str(exc))
            except SessionNotFoundError as exc:
                return _problem(request, 404, f"no session {exc}")
            except EventLogError as exc:
                return _problem(request, 409, str(exc))

        return handle

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        verifier.start()
        try:
            yield
        finally:
            verifier.stop()

    routes = [
        Route("/", guarded(index)),
        Route("/session", guarded(session)),
        Route("/api/sessions", guarded(api_sessions)),
        Route("/api/sessions/events", guarded(sessions_events)),
        Route("/api/timeline", guarded(api_timeline)),
        Route("/api/view", guarded(api_view)),
        Route("/api/verify", guarded(api_verify)),
        Route("/api/heading", guarded(api_heading)),
        Route("/api/text", guarded(api_text)),
        Route("/api/tail", guarded(api_tail)),
        Route("/static/{name}", static),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(ReadOnly)], lifespan=lifespan)
    app.state.verifier = verifier
    return app


def _problem(request: Request, status: int, what: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": what}, status_code=status)
    body = f'<h1>Cannot show this</h1><p class="bad-line">{escape(what)}</p><p><a href="/">sessions</a></p>'
    return HTMLResponse(shell("error", "", body, page="error"), status_code=status)


def _sse(stream: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _store_name(store: BaseStore) -> str:
    root = getattr(store, "root", None)
    return str(root) if root is not None else type(store).__name__

"""A tiny ASGI app (no framework) for the real-server test: one store per worker process.

``POST /turn?key=K&id=I`` appends a user turn and an assistant turn to session ``K`` (event ids
``I.u`` and ``I.a``) through a writer taken for this request, and answers with their seqs and
the worker's pid.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from sessionledger.eventlog import AsyncFileStore

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]

store = AsyncFileStore(os.environ["SESSIONLEDGER_ASGI_ROOT"], durability="batch")


async def app(
    scope: Scope,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    """The ASGI entry point."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await store.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    query = parse_qs(scope["query_string"].decode())
    status, body = 200, b"ok"
    if scope["path"] == "/turn":
        key, eid = query["key"][0], query["id"][0]
        async with store.session(key) as w:
            user = await w.append_message("user", eid, id=f"{eid}.u")
            reply = await w.append_message("assistant", f"re {eid}", id=f"{eid}.a")
        body = json.dumps({"user": user, "assistant": reply, "pid": os.getpid()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})

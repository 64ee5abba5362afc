"""Awaitable twins of every projection and replay function that takes a store.

The rule, applied everywhere: ``sessionledger.projections.X(store, ...)`` and
``sessionledger.replay.X(store, ...)`` take a sync store; ``await sessionledger.aio.X(store, ...)``
is the same function for async code, with the same name and arguments. It accepts a sync or an
async store (an async store's reads go through the sync store underneath, ``store.sync``) and
runs the work in a worker thread, so the event loop never blocks on a whole-store scan.
:func:`follow` is async already and accepts either kind of store; it is here too, unchanged.

>>> import anyio
>>> from sessionledger import AsyncMemoryStore, aio
>>> async def main() -> list[str]:
...     store = AsyncMemoryStore()
...     async with store.session("telegram:42") as w:
...         await w.append_message("user", "hi")
...     return [row.key for row in await aio.list_sessions(store)]
>>> anyio.run(main)
['telegram:42']
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Concatenate, ParamSpec, TypeVar

import anyio.to_thread

from . import projections, replay
from .eventlog import AsyncBaseStore, BaseStore

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: A sync store, or an async one (whose sync store does the work).
AnyStore = BaseStore | AsyncBaseStore


def sync_store(store: AnyStore) -> BaseStore:
    """The sync store that does the work for ``store``."""
    return store.sync if isinstance(store, AsyncBaseStore) else store


def twin(
    func: Callable[Concatenate[BaseStore, _P], _R],
) -> Callable[Concatenate[AnyStore, _P], Coroutine[Any, Any, _R]]:
    """The awaitable twin of ``func(store, ...)``: same name, same arguments, run in a thread."""

    async def awaited(store: AnyStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await anyio.to_thread.run_sync(partial(func, sync_store(store), *args, **kwargs))

    awaited.__name__ = awaited.__qualname__ = func.__name__
    awaited.__module__ = __name__
    summary = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else func.__name__
    awaited.__doc__ = f"Awaitable twin of :func:`{func.__module__}.{func.__name__}`: {summary}"
    awaited.__wrapped__ = func  # type: ignore[attr-defined]
    return awaited


catalog_heads = twin(projections.catalog_heads)
catalog_rows = twin(projections.catalog_rows)
drop_search = twin(projections.drop_search)
list_conversations = twin(projections.list_conversations)
list_sessions = twin(projections.list_sessions)
open_sealed_rows = twin(projections.open_sealed_rows)
rebuild_catalog = twin(projections.rebuild_catalog)
rebuild_search = twin(projections.rebuild_search)
rebuild_snapshot = twin(projections.rebuild_snapshot)
refresh_search = twin(projections.refresh_search)
search = twin(projections.search)
snapshot_status = twin(projections.snapshot_status)
store_stats = twin(projections.store_stats)
store_usage = twin(projections.store_usage)
write_snapshot = twin(projections.write_snapshot)

diff = twin(replay.diff)
export_jsonl = twin(replay.export_jsonl)
export_markdown = twin(replay.export_markdown)
export_nanobot = twin(replay.export_nanobot)
export_store = twin(replay.export_store)
follow = replay.follow
fork = twin(replay.fork)
import_log = twin(replay.import_log)
import_nanobot = twin(replay.import_nanobot)
import_path = twin(replay.import_path)
import_session_json = twin(replay.import_session_json)
recover = twin(replay.recover)
repair = twin(replay.repair)
session_document = twin(replay.session_document)
state_at = twin(replay.state_at)
timeline = twin(replay.timeline)
verify = twin(replay.verify)
verify_session = twin(replay.verify_session)

__all__ = (
    "AnyStore",
    "catalog_heads",
    "catalog_rows",
    "diff",
    "drop_search",
    "export_jsonl",
    "export_markdown",
    "export_nanobot",
    "export_store",
    "follow",
    "fork",
    "import_log",
    "import_nanobot",
    "import_path",
    "import_session_json",
    "list_conversations",
    "list_sessions",
    "open_sealed_rows",
    "rebuild_catalog",
    "rebuild_search",
    "rebuild_snapshot",
    "recover",
    "refresh_search",
    "repair",
    "search",
    "session_document",
    "snapshot_status",
    "state_at",
    "store_stats",
    "store_usage",
    "sync_store",
    "timeline",
    "twin",
    "verify",
    "verify_session",
    "write_snapshot",
)

"""Cases for the typing test: the comment above each ``reveal_type`` states what mypy must infer (not run by pytest).

The write API is one generic class (``WriteAPI[R, RC]``) bound to ``int`` for the sync writer and
to coroutines for the async one; these pins make sure neither side silently becomes ``Any``.
"""

from __future__ import annotations

from typing import reveal_type

from sessionledger import AsyncFileStore, FileStore, MemoryStore, history, list_sessions


def sync_side(store: FileStore, memory: MemoryStore) -> None:
    w = store.session("k")
    # revealed: sessionledger.eventlog._writer.SessionWriter
    reveal_type(w)
    # revealed: int
    reveal_type(w.append_message("user", "hi"))
    # revealed: int
    reveal_type(w.append_message_dict({"role": "user", "content": "hi"}))
    # revealed: int
    reveal_type(w.update_metadata(set={"title": "t"}))
    # revealed: int
    reveal_type(w.mark_consolidated(1))
    # revealed: sessionledger.eventlog._writeapi.CompactionResult
    reveal_type(w.compact("summary", upto=1))
    # revealed: int
    reveal_type(w.state.seq)
    # revealed: int
    reveal_type(memory.session("k").append_message("user", "hi"))
    # revealed: list[dict[str, Any]]
    reveal_type(history(w.state))
    # revealed: list[sessionledger.projections._catalog_row.SessionInfo]
    reveal_type(list_sessions(store))


async def async_side(store: AsyncFileStore) -> None:
    w = await store.session("k")
    # revealed: sessionledger.eventlog._async_writer.AsyncSessionWriter
    reveal_type(w)
    # revealed: int
    reveal_type(await w.append_message("user", "hi"))
    # revealed: int
    reveal_type(await w.update_metadata(set={"title": "t"}))
    # revealed: sessionledger.eventlog._writeapi.CompactionResult
    reveal_type(await w.compact("summary", upto=1))
    # revealed: typing.Coroutine[Any, Any, int]
    pending = reveal_type(w.append_message("user", "hi"))
    pending.close()

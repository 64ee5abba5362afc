"""Sealed PostgreSQL listings after another store object erased or redacted the session."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pg_support import StoreFactory

from sessionledger import projections
from sessionledger.eventlog import FileKeyStore, LocalKeyFile

pytestmark = pytest.mark.postgres

KEY = "telegram:42"


def test_a_listing_after_erase_elsewhere_shows_nothing_destroyed(
    make_pg: StoreFactory, tmp_path: Path
) -> None:
    keys = FileKeyStore(tmp_path / "keys")
    a = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    b = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    with a.batch(KEY) as w:
        w.update_metadata(set={"title": "Erased-Title-Ibis-5501"})
        for n in range(100):
            w.append_message("user", f"Erased-Body-Heron-{n}")
    assert a.write_snapshot(KEY).written
    held = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    wh = held.session(KEY)  # opened from the sealed index snapshot: bodies not read yet
    assert "100 indexed" in repr(wh.state.messages)
    for store in (a, b, held):
        assert projections.list_sessions(store)[0].title == "Erased-Title-Ibis-5501"
    stored = projections.list_sessions(held, open_sealed=False)
    b.erase(KEY)
    for store in (a, b, held):
        [row] = projections.list_sessions(store)
        assert (row.title, row.preview, row.summary) == ("", "", ""), store
        [row] = projections.open_sealed_rows(store, stored)
        assert (row.title, row.preview) == ("", ""), store
        [conv] = projections.list_conversations(store)
        assert (conv.title, conv.preview) == ("", "")


def test_a_row_without_conversations_is_completed_by_each_store_as_it_can(
    make_pg: StoreFactory, dsn: str, tmp_path: Path
) -> None:
    """A row written before the table kept conversations is completed from the store listing
    it: one without the keys cannot open a sealed session, one with them can, whichever lists
    first (the rows built for a record are kept per process, not per store)."""
    keys = FileKeyStore(tmp_path / "keys")
    sealed = make_pg(key_provider=LocalKeyFile(tmp_path / "m.key"), key_store=keys)
    with sealed.session(KEY) as s:
        s.append_message("user", "hi")
        s.clear(reason="new")
        s.append_message("user", "again")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'UPDATE "{sealed.schema}".sessions SET conversations = NULL')
    [bare] = projections.list_sessions(make_pg())
    assert (bare.ended, bare.conversation_start) == (0, 0)  # cannot open it
    [row] = projections.list_sessions(sealed)
    assert (row.ended, row.conversation_start) == (1, 2)
    [again] = projections.list_sessions(make_pg())
    assert (again.ended, again.conversation_start) == (0, 0)

"""Sealed PostgreSQL listings after another store object erased or redacted the session."""

from __future__ import annotations

from pathlib import Path

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

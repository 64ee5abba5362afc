"""Sealed listings after another store object erased or redacted the session."""

from __future__ import annotations

from pathlib import Path

from privacy_support import encrypted_store

from sessionledger import projections

KEY = "telegram:42"


def test_erase_by_another_store_object_holding_a_writer_lists_nothing_destroyed(
    tmp_path: Path,
) -> None:
    a = encrypted_store(tmp_path)
    b = encrypted_store(tmp_path)
    w = a.session(KEY)
    w.update_metadata(set={"title": "Erased-Title-Ibis-5501"})
    w.append_message("user", "Erased-Body-Heron-7712")
    assert projections.list_sessions(a)[0].title == "Erased-Title-Ibis-5501"
    assert projections.list_sessions(b)[0].title == "Erased-Title-Ibis-5501"
    stored = projections.list_sessions(a, open_sealed=False)
    b.erase(KEY)
    for store in (a, b):
        [row] = projections.list_sessions(store)
        assert (row.title, row.preview) == ("", ""), store
        [row] = projections.open_sealed_rows(store, stored)
        assert (row.title, row.preview) == ("", ""), store
        convs = projections.list_conversations(store)
        assert [(c.title, c.preview) for c in convs] == [("", "")]


def test_redact_by_another_store_object_holding_a_writer_lists_nothing_destroyed(
    tmp_path: Path,
) -> None:
    a = encrypted_store(tmp_path)
    b = encrypted_store(tmp_path)
    w = a.session(KEY)
    w.update_metadata(set={"title": "kept"})
    first = w.append_message("user", "Redacted-Body-Heron-7712")
    assert projections.list_sessions(a)[0].preview == "Redacted-Body-Heron-7712"
    b.redact(KEY, first)
    for store in (a, b):
        [row] = projections.list_sessions(store)
        assert "Heron" not in row.preview, store

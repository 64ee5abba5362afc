"""Listings of sealed sessions: opened by a store with the keys, empty without, never stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from privacy_support import SECRETS, encrypted_store, files_containing, key_file, write_secrets

from sessionledger import projections
from sessionledger.eventlog import FileStore, LocalKeyFile, MemoryStore

KEY = "telegram:42"


def _two_conversations(store: FileStore | MemoryStore) -> None:
    """An ended conversation (title, preview) and a current one, each with its secrets."""
    with store.session(KEY) as s:
        s.update_metadata(set={"title": "Old-Capybara-2208", "tags": ["t-Wombat-6614"]})
        s.append_message("assistant", "hello there")
        s.append_message("user", "Ended-Tapir-3391 is what I asked")
        s.clear(reason="new", unset=["title"])
        write_secrets(s)


def test_a_store_with_the_keys_lists_titles_and_previews(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    _two_conversations(store)
    [row] = projections.list_sessions(store)
    assert row.sealed
    assert row.title == SECRETS["title"]
    assert row.preview == f"I was at {SECRETS['message']} yesterday"
    assert row.summary == f"They said {SECRETS['summary']}"
    assert row.tags == ("t-Wombat-6614",)
    assert (row.messages, row.ended, row.conversation_start) == (4, 1, 4)
    convs = projections.list_conversations(store, KEY)
    assert [(c.current, c.title, c.preview) for c in convs] == [
        (True, SECRETS["title"], f"I was at {SECRETS['message']} yesterday"),
        (False, "Old-Capybara-2208", "Ended-Tapir-3391 is what I asked"),
    ]
    assert all(c.sealed for c in convs)
    # The same through each path a conversation listing takes (one key, a filter, all).
    assert projections.list_conversations(store, prefix="telegram:") == convs
    assert projections.list_conversations(store, limit=1) == convs[:1]


def test_a_store_without_the_keys_lists_the_envelope_only(tmp_path: Path) -> None:
    _two_conversations(encrypted_store(tmp_path))
    bare = FileStore(tmp_path / "s", durability="none")
    [row] = projections.list_sessions(bare)
    assert row.sealed and row.key == KEY
    assert (row.title, row.preview, row.summary, row.tags) == ("", "", "", ())
    assert (row.messages, row.ended, row.conversation_start) == (4, 1, 4)
    convs = projections.list_conversations(bare, KEY)
    assert [(c.current, c.title, c.preview, c.sealed) for c in convs] == [
        (True, "", "", True),
        (False, "", "", True),
    ]


def test_a_session_under_another_master_key_is_listed_empty(tmp_path: Path) -> None:
    _two_conversations(encrypted_store(tmp_path))
    other = FileStore(
        tmp_path / "s", durability="none", key_provider=LocalKeyFile(tmp_path / "other.key")
    )
    with other.session("telegram:7") as s:
        s.update_metadata(set={"title": "mine"})
        s.append_message("user", "my own")
    rows = {r.key: r for r in projections.list_sessions(other)}
    assert (rows["telegram:7"].title, rows["telegram:7"].preview) == ("mine", "my own")
    assert (rows[KEY].title, rows[KEY].preview, rows[KEY].sealed) == ("", "", True)


def test_listing_with_the_keys_writes_no_plaintext(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    _two_conversations(store)
    for _ in range(2):  # the second listing reads the catalog the first one stored
        assert projections.list_sessions(store)[0].title == SECRETS["title"]
        assert projections.list_conversations(store)[1].title == "Old-Capybara-2208"
    assert projections.search(store, SECRETS["message"]) == []
    fresh = encrypted_store(tmp_path)  # another process: the stored catalog, then opened
    assert projections.list_sessions(fresh)[0].preview.startswith("I was at")
    needles = [*SECRETS.values(), "Old-Capybara-2208", "Ended-Tapir-3391", "t-Wombat-6614"]
    assert (tmp_path / "s" / ".catalog").exists()
    assert files_containing(tmp_path / "s", needles) == {}


def test_after_erase_and_redact_the_listing_shows_nothing_destroyed(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    with store.session(KEY) as s:
        s.update_metadata(set={"title": "kept"})
        first = s.append_message("user", "Redact-Me-Gecko-8812")
        s.append_message("user", "second question")
    assert projections.list_sessions(store)[0].preview == "Redact-Me-Gecko-8812"
    store.redact(KEY, first)
    [row] = projections.list_sessions(store)
    assert (row.title, row.preview) == ("kept", "second question")
    store.erase(KEY)
    [row] = projections.list_sessions(store)
    assert (row.title, row.preview, row.sealed) == ("", "", True)
    assert [(c.title, c.preview) for c in projections.list_conversations(store)] == [("", "")]


def test_plaintext_sessions_of_an_encrypted_store_are_listed_as_they_are(tmp_path: Path) -> None:
    with FileStore(tmp_path / "s", durability="none").session("plain:1") as s:
        s.update_metadata(set={"title": "open"})
        s.append_message("user", "in the clear")
    store = encrypted_store(tmp_path)
    with store.session(KEY) as s:
        s.append_message("user", "sealed text")
    rows = {r.key: r for r in projections.list_sessions(store)}
    assert (rows["plain:1"].title, rows["plain:1"].preview, rows["plain:1"].sealed) == (
        "open",
        "in the clear",
        False,
    )
    assert (rows[KEY].preview, rows[KEY].sealed) == ("sealed text", True)


def test_memory_store_lists_the_same_way(tmp_path: Path) -> None:
    store = MemoryStore(key_provider=key_file(tmp_path))
    _two_conversations(store)
    [row] = projections.list_sessions(store.peer())  # another store object with the keys
    assert (row.sealed, row.title, row.tags) == (True, SECRETS["title"], ("t-Wombat-6614",))
    convs = projections.list_conversations(store, KEY)
    assert [c.title for c in convs] == [SECRETS["title"], "Old-Capybara-2208"]


def _count_loads(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    loaded: list[str] = []
    real = store.load

    def counting(key: str, *args: Any, **kwargs: Any) -> Any:
        loaded.append(key)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(store, "load", counting)
    return loaded


def test_rows_listed_as_stored_are_opened_one_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = encrypted_store(tmp_path)
    for n in range(6):
        with store.session(f"telegram:{n}") as s:
            s.update_metadata(set={"title": f"Title-{n}-Okapi"})
            s.append_message("user", f"said {n}")
    opened = projections.list_sessions(store)
    loaded = _count_loads(store, monkeypatch)
    stored = projections.list_sessions(store, open_sealed=False)
    assert loaded == [] and [r.key for r in stored] == [r.key for r in opened]
    assert all(r.sealed and (r.title, r.preview) == ("", "") for r in stored)
    page = projections.open_sealed_rows(store, stored[2:4])
    assert page == opened[2:4] and sorted(loaded) == sorted(r.key for r in stored[2:4])


def test_the_viewer_opens_only_the_page_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("starlette", reason="the viewer needs the web extra")
    from sessionledger.tools.web._pages import list_page

    store = encrypted_store(tmp_path)
    for n in range(6):
        with store.session(f"telegram:{n}") as s:
            s.update_metadata(set={"title": f"Title-{n}-Okapi"})
            s.append_message("user", f"said {n}")
    loaded = _count_loads(store, monkeypatch)
    listing = list_page(store, offset=1, limit=2)
    assert listing.total == 6 and len(listing.rows) == 2
    assert all(r.title.startswith("Title-") for r in listing.rows)
    assert sorted(loaded) == sorted(r.key for r in listing.rows)
    loaded.clear()  # a query reads every title, so every sealed row is opened to match it
    found = list_page(store, q="Title-4-Okapi", full_text=False)
    assert [r.key for r in found.rows] == ["telegram:4"] and len(loaded) == 6


def test_a_row_whose_session_is_gone_before_it_is_opened_stays_as_stored(tmp_path: Path) -> None:
    store = encrypted_store(tmp_path)
    with store.session(KEY) as s:
        s.update_metadata(set={"title": "Gone-Quagga-5120"})
        s.append_message("user", "soon deleted")
    [stored] = projections.list_sessions(store, open_sealed=False)
    other = encrypted_store(tmp_path)  # another process deletes it between list and open
    other.delete(KEY)
    assert projections.open_sealed_rows(store, [stored]) == [stored]
    assert (stored.title, stored.sealed) == ("", True)

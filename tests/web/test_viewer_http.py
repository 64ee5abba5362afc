"""The viewer's routes over HTTP (no browser): read-only, pages, paging, time travel, verify."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install '.[web]'")

from starlette.testclient import TestClient
from web_sample import KEY, LONG, fixed_log

from sessionledger.eventlog import BaseStore, FileStore
from sessionledger.replay import Redaction
from sessionledger.tools.web import create_app

SECRET = b"viewer-secret-key-42"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    with FileStore(tmp_path / "store", hash_key=SECRET) as store:
        assert store.import_bytes(KEY, fixed_log(hash_key=store.hash_key)) == "created"
        for i in range(120):
            store.session(f"web:user{i:03d}").append_message("user", f"question {i}")
        yield store


def client(store: BaseStore, **kw: object) -> TestClient:
    return TestClient(create_app(store, verify_interval=0.05, **kw))  # type: ignore[arg-type]


def test_read_only_and_no_foreign_assets(store: FileStore) -> None:
    with client(store) as c:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            r = c.request(method, "/api/sessions")
            assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        page = c.get("/")
        assert page.status_code == 200
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert "http" not in page.text.replace("http-equiv", "")
        assert c.get("/static/viewer.js").status_code == 200
        assert c.get("/static/../pyproject.toml").status_code == 404
        assert c.get("/static/secrets.txt").status_code == 404
    with store.session(KEY) as s:  # nothing was written by the viewer
        assert s.state.seq == 12


def test_list_filters_search_and_pages(store: FileStore) -> None:
    with client(store) as c:
        data = c.get("/api/sessions", params={"limit": 50}).json()
        assert data["total"] == 121 and data["shown"] == 50
        data = c.get("/api/sessions", params={"limit": 50, "offset": 100}).json()
        assert data["shown"] == 21
        data = c.get("/api/sessions", params={"q": "kyoto"}).json()
        assert data["total"] == 1 and "telegram:42" in data["html"]
        data = c.get("/api/sessions", params={"q": "question 77"}).json()
        assert data["total"] == 1
        data = c.get("/api/sessions", params={"channel": "telegram"}).json()
        assert data["total"] == 1
        data = c.get("/api/sessions", params={"state": "idle"}).json()
        assert data["total"] == 1
        assert c.get("/api/sessions", params={"limit": "x"}).status_code == 400
        # full text through the search projection: a word from a later message
        data = c.get("/api/sessions", params={"q": "deer park"}).json()
        assert data["total"] == 1 and 'class="found"' in data["html"]
        assert "at=9#e9" in data["html"] and "[deer]" in data["html"].lower()


def test_search_does_not_reach_redacted_text(store: FileStore) -> None:
    with client(store, redaction=Redaction.parse(["content"])) as c:
        assert c.get("/api/sessions", params={"q": "deer park"}).json()["total"] == 0
        data = c.get("/api/sessions", params={"q": "telegram"}).json()
        assert data["total"] == 1 and "Plan a trip" not in data["html"]


def test_session_page_timeline_and_lazy_text(store: FileStore) -> None:
    with client(store) as c:
        page = c.get("/session", params={"key": KEY})
        assert page.status_code == 200
        assert 'data-head="12"' in page.text and "web_search" in page.text
        assert LONG not in page.text  # folded and left out: loaded on demand
        assert "/api/text?" in page.text
        text = c.get("/api/text", params={"key": KEY, "seq": 4}).text
        assert "Gion Yoshiima" in text and len(text) > len(LONG) - 10
        part = c.get("/api/timeline", params={"key": KEY, "before": 5, "limit": 2}).json()
        assert (part["first"], part["last"], part["head"]) == (3, 4, 12)
        assert 'id="e3"' in part["html"] and 'id="e4"' in part["html"]  # paired, shown once
        assert c.get("/session", params={"key": "nope"}).status_code == 404
        assert c.get("/api/timeline", params={"key": "nope"}).status_code == 404


def test_model_view_and_time_travel(store: FileStore) -> None:
    with client(store) as c:
        head = c.get("/api/view", params={"key": KEY}).json()
        assert head["seq"] == 12
        then = c.get("/api/view", params={"key": KEY, "seq": 5}).json()
        assert then["seq"] == 5 and then["messages"] == 5
        assert "Plan a trip" in then["html"] and then["html"].count('data-reason="window"') == 1
        tight = c.get("/api/view", params={"key": KEY, "seq": 5, "max_tokens": 40}).json()
        assert "of 40 tokens" in tight["html"]
        after = c.get("/api/view", params={"key": KEY, "seq": 9}).json()
        assert after["html"].count('data-reason="consolidated"') == 2
        assert after["html"].count('data-reason="window"') == 3  # before the user turn #8
        assert c.get("/api/view", params={"key": KEY, "seq": 99}).status_code == 409


def test_verify_badge_names_the_first_bad_line(store: FileStore) -> None:
    with client(store) as c:
        assert c.get("/api/verify", params={"key": KEY}).json()["ok"] is True
        path = store.path_for(KEY)
        data = bytearray(path.read_bytes())
        at = data.index(b"Add a day in Nara")
        data[at : at + 3] = b"Sub"
        path.write_bytes(bytes(data))
        verdict = c.get("/api/verify", params={"key": KEY}).json()
        assert verdict["ok"] is False and verdict["line"] == 9
        assert "line 9" in verdict["html"]
        page = c.get("/session", params={"key": KEY})
        assert page.status_code == 200
        text = page.text
        assert 'class="bad-line" data-line="9"' in text  # shown in its place, and the rest too
        note = text.index('class="bad-line" data-line="9"')
        assert text.index('id="e7"') < note < text.index('id="e9"')
        assert 'id="e8"' not in text and "Nara deer park" in text


def test_redaction_and_no_hash_key(store: FileStore) -> None:
    with client(store, redaction=Redaction.parse(["tool.content", "metadata.email"])) as c:
        texts = [
            c.get("/").text,
            c.get("/session", params={"key": KEY}).text,
            c.get("/api/timeline", params={"key": KEY, "around": 4}).text,
            c.get("/api/view", params={"key": KEY, "seq": 5}).text,
            c.get("/api/text", params={"key": KEY, "seq": 11}).text,
            c.get("/api/sessions").text,
        ]
        for text in texts:
            assert "Gion Yoshiima" not in text and "late result" not in text
            assert "kim@example.org" not in text
            assert SECRET.decode() not in text and SECRET.hex() not in text
        assert "[redacted]" in texts[1]


def test_keys_that_need_quoting(store: FileStore) -> None:
    key = "odd key/with?&#<script>"
    store.session(key).append_message("user", "<b>not bold</b>")
    with client(store) as c:
        page = c.get("/session?key=" + quote(key, safe=""))
        assert page.status_code == 200
        assert "<script>" not in page.text and "<b>not bold" not in page.text
        assert "&lt;b&gt;not bold&lt;/b&gt;" in page.text


def test_the_viewer_over_a_memory_store() -> None:
    from sessionledger.eventlog import MemoryStore

    store = MemoryStore()
    store.import_bytes(KEY, fixed_log())
    with client(store) as c:
        assert c.get("/api/sessions").json()["total"] == 1
        page = c.get("/session", params={"key": KEY})
        assert page.status_code == 200 and "web_search" in page.text
        assert c.get("/api/view", params={"key": KEY, "seq": 5}).json()["seq"] == 5
        assert c.get("/api/verify", params={"key": KEY}).json()["ok"] is True
        part = c.get("/api/timeline", params={"key": KEY, "around": 6, "limit": 3}).json()
        assert (part["first"], part["last"]) == (5, 7)


@pytest.mark.postgres
def test_the_viewer_over_postgresql(dsn: str, schema: str) -> None:
    from sessionledger.eventlog import PostgresStore

    store = PostgresStore(dsn, schema=schema)
    try:
        assert store.import_bytes(KEY, fixed_log()) == "created"
        with client(store) as c:
            assert c.get("/api/sessions", params={"q": "kyoto"}).json()["total"] == 1
            page = c.get("/session", params={"key": KEY})
            assert page.status_code == 200 and 'data-head="12"' in page.text
            assert "At #12" in c.get("/api/view", params={"key": KEY}).json()["html"]
            assert c.get("/api/verify", params={"key": KEY}).json()["ok"] is True
            heading = c.get("/api/heading", params={"key": KEY}).text
            assert "Kyoto trip" in heading
    finally:
        store.close()  # the schema fixture drops the schema

"""The viewer and the HTML export against hostile logs and hostile URLs: markup planted in every
field a log carries stays text, odd query values are a 400, never a server error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install '.[web]'")

from starlette.testclient import TestClient

from sessionledger import replay
from sessionledger.eventlog import FileStore
from sessionledger.tools.web import create_app, export_html

X = "<img src=x onerror=alert(1)>\"'</script><script>alert(2)</script>"
MARKUP = ("<img src=x", "<script>alert")
KEY = "k" + X


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    with FileStore(tmp_path / "store") as store:
        with store.session(KEY) as s:
            s.update_metadata(set={"title": "T" + X, X: X, "tags": [X]})
            s.append_message("user", "U" + X, media=["/tmp/" + X])
            call = {
                "id": "c" + X,
                "type": "function",
                "function": {"name": "f" + X, "arguments": X},
            }
            s.append_message("assistant", None, tool_calls=[call], reasoning_content=X)
            s.append_message("tool", "R" + X * 200, tool_call_id="c" + X, name="f" + X)
            s.compact("S" + X, upto=1, tokens_before=10, tokens_after=1)
            s.append_message("assistant", "A" + X)
        yield store


def _markup(text: str) -> list[str]:
    return [m for m in MARKUP if m in text]


def test_markup_in_every_field_stays_text(store: FileStore) -> None:
    k = quote(KEY)
    pages = ["/", f"/session?key={k}", f"/session?key={k}&at=2", "/session?key=no" + quote(X)]
    apis = [
        "/api/sessions",
        "/api/sessions?q=img",
        f"/api/timeline?key={k}",
        f"/api/view?key={k}",
        f"/api/view?key={k}&seq=2",
        f"/api/verify?key={k}",
        "/api/timeline?key=no" + quote(X),
    ]
    texts = [f"/api/heading?key={k}"] + [
        f"/api/text?key={k}&seq={seq}&part={part}"
        for seq in range(1, 7)
        for part in ("content", "reasoning")
    ]
    with TestClient(create_app(store, verify_interval=0.05)) as c:
        for url in pages + texts:
            r = c.get(url)
            assert r.status_code in (200, 400, 404), url
            if r.headers["content-type"].startswith("text/html"):
                assert _markup(r.text) == [], url
            else:  # an error as JSON (nosniff), which the page shows as textContent
                assert r.headers["content-type"].startswith("application/json"), url
                assert r.headers["x-content-type-options"] == "nosniff"
        for url in apis:
            r = c.get(url)
            assert r.status_code in (200, 404), url
            assert _markup(str(r.json().get("html", ""))) == [], url
        # The planted text is there, as text: the page shows it, it just does not run it.
        assert "alert(2)" in c.get(f"/session?key={k}").text
    page = export_html(store, KEY).decode()
    assert _markup(page) == [] and "alert(2)" in page


@pytest.mark.parametrize("at", ["\u00b2", "9" * 5000, "abc", "-3", "1e3"])
def test_a_bad_time_travel_point_is_a_400_or_clamped(store: FileStore, at: str) -> None:
    with TestClient(create_app(store, verify_interval=0.05), raise_server_exceptions=False) as c:
        r = c.get("/session", params={"key": KEY, "at": at})
        assert r.status_code in (200, 400), r.status_code
        if r.status_code == 400:
            assert "at must be a whole number" in r.text
        if at == "-3":  # a number before the start is clamped to it
            assert r.status_code == 200


def test_markdown_export_renders_no_markup_or_link_from_the_log(store: FileStore) -> None:
    from markdown_it import MarkdownIt  # rich's dependency; CommonMark with raw HTML allowed

    with store.session("md") as s:
        s.update_metadata(set={"title": "T" + X})
        s.append_message("user", "see [here](javascript:alert(3)) ![b](http://x.invalid/b.png)")
        # Reference links and their definitions, an image by reference, a definition inside a
        # quote and a backslash that would undo an escape put in front of the bracket.
        s.append_message(
            "user",
            "see [ref] and [t][d] ![i][d] \\[x](http://x.invalid/s)\n\n"
            "[ref]: http://x.invalid/r\n[d]: javascript:alert(4)\n\n> [q]: http://x.invalid/q\n\n[q]",
        )
        s.append_message(
            "assistant", "<https://x.invalid/auto> and \\<b>bold</b>", reasoning_content=X
        )
        s.compact("S" + X, upto=1, tokens_before=10, tokens_after=1)
    for key in (KEY, "md"):
        html = MarkdownIt("commonmark").render(replay.export_markdown(store, key).decode())
        assert _markup(html) == [], key
        assert "<a " not in html and "<img" not in html and "<b>" not in html, key
    text = replay.export_markdown(store, "md").decode()
    assert "\\[here](javascript" in text and "&lt;b>" in text  # still readable as text

"""The viewer and the HTML export in a real headless browser (the system's Chromium).

Skipped, with how to install a browser, when there is none (see ``browser_support``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest
from browser_support import require_browser, viewer
from web_sample import KEY, fixed_log

from sessionledger.eventlog import FileStore
from sessionledger.tools.web import export_html

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install '.[web]'")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with FileStore(root) as s:
        assert s.import_bytes(KEY, fixed_log()) == "created"
        for i in range(3):
            s.session(f"web:user{i}").append_message("user", f"question {i}")
    return root


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert errors == []


@contextmanager
def viewing(page: Page, store: Path) -> Iterator[str]:
    """A viewer server for ``page``; the page leaves it before it stops (no stray requests)."""
    with viewer(store) as base:
        try:
            yield base
        finally:
            page.goto("about:blank")


def session_url(base: str, key: str = KEY) -> str:
    return f"{base}/session?key={quote(key, safe='')}"


def test_list_then_a_session(page: Page, store: Path) -> None:
    from playwright.sync_api import expect

    with viewing(page, store) as base:
        page.goto(base + "/")
        page.wait_for_selector("tr[data-key='telegram:42']")
        assert page.locator("#rows tr").count() == 4
        # the verify state arrives live, without a reload
        page.wait_for_selector("tr[data-key='telegram:42'] .badge.ok", timeout=10_000)
        page.fill("input[name=q]", "kyoto")
        expect(page.locator("#rows tr")).to_have_count(1)
        expect(page.locator("#count")).to_have_text("1 session")
        page.click("tr[data-key='telegram:42'] a")
        page.wait_for_selector("#session")
        expect(page.locator("h1")).to_have_text("Kyoto trip")  # the catalog's title, fetched
        call = page.locator(".call[data-cid='call_1']")
        assert "web_search" in call.inner_text()
        assert call.locator(".result[data-seq='4']").count() == 1  # paired with its result
        assert page.locator("article#e4").count() == 0  # and not shown twice
        page.wait_for_selector("#view .view-head")
        assert "At #12" in page.inner_text("#view .view-head")
        assert page.locator(".vrow.out").count() > 0  # what falls outside is listed, greyed
        # long content is folded; opening the fold loads it
        fold = call.locator("details.fold")
        assert "show all" in fold.inner_text()
        fold.locator("summary").click()
        expect(call.locator(".full")).to_contain_text("Gion Yoshiima, 28000 yen; " * 100)
        assert (
            page.locator(".ev.kind-compacted .replaced")
            .inner_text()
            .startswith("replaces 4 message(s)")
        )


def test_time_slider_moves_the_model_view(page: Page, store: Path) -> None:
    with viewing(page, store) as base:
        page.goto(session_url(base))
        page.wait_for_selector("#view .view-head")
        page.eval_on_selector(
            "#slider",
            "el => { el.value = 5; el.dispatchEvent(new Event('input', {bubbles: true})); }",
        )
        page.wait_for_selector("body[data-travelled='5']")
        assert "At #5" in page.inner_text("#view .view-head")
        assert page.inner_text("#at").startswith("#5 of #12")
        future = page.eval_on_selector_all(".ev.future", "els => els.map(e => +e.dataset.seq)")
        assert future and min(future) == 6
        assert page.locator("article#e5.future").count() == 0


def test_tail_shows_an_append_from_another_process(page: Page, store: Path) -> None:
    from playwright.sync_api import expect

    with viewing(page, store) as base:
        page.goto(session_url(base))
        page.wait_for_selector("#live.on")
        code = (
            "import sys; from sessionledger.eventlog import FileStore\n"
            "with FileStore(sys.argv[1]) as s:\n"
            "    s.session(sys.argv[2]).append_message('user', 'Appended from elsewhere')\n"
        )
        subprocess.run([sys.executable, "-c", code, str(store), KEY], check=True, timeout=60)
        page.wait_for_selector("article#e13", timeout=10_000)
        assert "Appended from elsewhere" in page.inner_text("article#e13")
        assert page.get_attribute("#slider", "max") == "13"
        expect(page.locator("#view .view-head")).to_contain_text("At #13")
        # a call, then its result from another process: the result lands in the call's box
        code = (
            "import sys; from sessionledger.eventlog import FileStore\n"
            "call = {'id': 'call_x', 'type': 'function',\n"
            "        'function': {'name': 'lookup', 'arguments': '{}'}}\n"
            "with FileStore(sys.argv[1]) as s:\n"
            "    w = s.session(sys.argv[2])\n"
            "    w.append_message('assistant', None, tool_calls=[call])\n"
            "    w.append_message('tool', 'found it', tool_call_id='call_x', name='lookup')\n"
        )
        subprocess.run([sys.executable, "-c", code, str(store), KEY], check=True, timeout=60)
        result = page.locator(".call[data-cid='call_x'] .result[data-seq='15']")
        expect(result).to_contain_text("found it", timeout=10_000)
        assert page.locator("article#e15").count() == 0


def test_verify_badge_names_the_bad_line_of_a_tampered_log(page: Page, store: Path) -> None:
    path = next(p for p in store.iterdir() if p.read_bytes().find(b"Kyoto") > 0)
    data = path.read_bytes()
    path.write_bytes(data.replace(b"Add a day in Nara", b"Sub a day in Nara"))
    with viewing(page, store) as base:
        page.goto(session_url(base))
        page.wait_for_selector("#badge .badge.bad", timeout=10_000)
        assert "line 9" in page.inner_text("#badge")
        assert "line 9" in page.inner_text(".bad-line")
        page.goto(base + "/")
        page.wait_for_selector("tr[data-key='telegram:42'] .badge.bad", timeout=10_000)
        # Each badge settles on its own (verification runs in the background, log by log).
        page.wait_for_selector("tr[data-key='web:user0'] .badge.ok", timeout=10_000)
        assert page.locator("tr[data-key='web:user0'] .badge.bad").count() == 0


def test_html_export_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    with FileStore(tmp_path / "store") as s:
        s.import_bytes(KEY, fixed_log())
        head = s.load(KEY).state.head
        out = tmp_path / "export.html"
        out.write_bytes(export_html(s, KEY, redact=["metadata.email"]))
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    assert page.inner_text("h1") == "Kyoto trip"
    assert head in page.inner_text(".head")
    assert page.get_attribute("meta[name=sessionledger-head]", "content") == f"12:{head}"
    fold = page.locator(".call[data-cid='call_1'] details.fold")
    assert not fold.locator(".full").is_visible()
    fold.locator("summary").click()  # folds open without any script
    assert fold.locator(".full").is_visible()
    assert "At #12" in page.inner_text("#view")
    assert requests == [out.as_uri()]  # nothing fetched from anywhere
    context.close()

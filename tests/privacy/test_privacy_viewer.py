"""The viewer and readable exports on an encrypted store: opened content, withheld marked."""

from __future__ import annotations

from pathlib import Path

import pytest
from privacy_support import encrypted_store

from sessionledger.replay import export_markdown

SECRET = "Secret-Answer-Quokka"


def _sample(tmp_path: Path) -> object:
    store = encrypted_store(tmp_path)
    s = store.session("k", metadata={"title": "Trip"})
    s.append_message("user", "visible question")
    s.append_message("assistant", SECRET)
    s.append_message("user", "visible follow-up")
    s.close()
    store.redact("k", 2, by="ops", reason="asked")
    return store


def test_markdown_export_marks_redacted(tmp_path: Path) -> None:
    store = _sample(tmp_path)
    text = export_markdown(store, "k").decode()  # type: ignore[arg-type]
    assert "visible question" in text and "visible follow-up" in text
    assert "[redacted]" in text and SECRET not in text


def test_web_viewer_opens_and_marks(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason="the viewer needs the web extra")
    from starlette.testclient import TestClient

    from sessionledger.tools.web import create_app

    store = _sample(tmp_path)
    with TestClient(create_app(store, verify_interval=0.05)) as c:  # type: ignore[arg-type]
        page = c.get("/session", params={"key": "k"}).text
        assert "visible question" in page and "[redacted]" in page
        assert SECRET not in page and "$sealed" not in page

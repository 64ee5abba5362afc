"""Readable exports: Markdown against a golden file, HTML deterministic, redaction, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from web_sample import KEY, LONG, fixed_log, fixed_store

from sessionledger import replay
from sessionledger.eventlog import CorruptLogError, FileStore, MemoryStore
from sessionledger.tools.cli import main
from sessionledger.tools.web import export_html

GOLDEN = Path(__file__).parent / "golden" / "telegram_42.md"


def test_markdown_matches_the_golden_file() -> None:
    assert replay.export_markdown(fixed_store(), KEY) == GOLDEN.read_bytes()


def test_markdown_pairs_calls_with_results_and_names_what_compaction_replaced() -> None:
    text = replay.export_markdown(fixed_store(), KEY).decode()
    call = text.index("**Tool call** `web_search` · `call_1`")
    assert text.index("**Result** (#4", call) > call
    assert "### #4 " not in text  # the result is shown under its call, not again
    assert "Replaces 4 message(s): #1 to #4." in text
    assert "Replaces 2 message(s): #1 to #2." in text  # the consolidation
    assert "> # Not a heading" in text  # message text cannot make headings
    assert "result of `call_9` from `lookup`; its call is not in this log." in text
    assert '```json\n{\n  "q": "Kyoto ``ryokan``"\n}\n```' in text


def test_exports_are_deterministic_and_carry_the_head() -> None:
    a, b = fixed_store(), fixed_store()
    head = a.load(KEY).state.head
    assert replay.export_markdown(a, KEY) == replay.export_markdown(b, KEY)
    html = export_html(a, KEY)
    assert html == export_html(b, KEY)
    assert f'content="12:{head}"'.encode() in html
    assert head.encode() in replay.export_markdown(a, KEY)


def test_html_export_is_self_contained() -> None:
    page = export_html(fixed_store(), KEY).decode()
    assert "<script" not in page and "<link" not in page
    assert "http://" not in page and "https://" not in page
    assert "<style>" in page and "details" in page
    assert LONG.strip() in page.replace("&#x27;", "'")  # folded, but in the file


def test_redaction_masks_the_named_fields_only() -> None:
    store = fixed_store()
    fields = ["tool.content", "metadata.email", "summary"]
    for data in (
        replay.export_markdown(store, KEY, redact=fields),
        export_html(store, KEY, redact=fields),
    ):
        text = data.decode()
        assert "Gion Yoshiima" not in text and "late result" not in text
        assert "kim@example.org" not in text
        assert "User plans Kyoto and Nara." not in text
        assert "Plan a trip to Kyoto" in text  # a user's content was not named
        assert replay.MASK in text


def test_redaction_by_field_and_role() -> None:
    r = replay.Redaction.parse(["content", "assistant.tool_calls"])
    assert r.message({"role": "user", "content": "hi"}) == {"role": "user", "content": "[redacted]"}
    assert r.message({"role": "assistant", "tool_calls": [1]})["tool_calls"] == "[redacted]"
    assert r.message({"role": "tool", "name": "x"}) == {"role": "tool", "name": "x"}
    for bad in ("", "a.b.c", "tool.", "con tent", "x.y z"):
        with pytest.raises(replay.RedactionError, match="cannot redact"):
            replay.Redaction.parse([bad])


def test_no_hash_key_material_in_exports() -> None:
    secret = b"s3cret-hash-key-0123456789"
    store = fixed_store(hash_key=secret)
    for data in (replay.export_markdown(store, KEY), export_html(store, KEY)):
        assert secret not in data and secret.hex().encode() not in data


def test_a_corrupt_log_is_refused() -> None:
    data = bytearray(fixed_log())
    at = data.index(b"Add a day in Nara")
    data[at : at + 3] = b"Sub"
    store = MemoryStore()
    store.put_bytes(KEY, bytes(data))  # planted past the store's own checks
    with pytest.raises(CorruptLogError, match="line 9"):
        replay.export_markdown(store, KEY)
    with pytest.raises(CorruptLogError):
        export_html(store, KEY)


def _file_store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with FileStore(root) as store:
        assert store.import_bytes(KEY, fixed_log()) == "created"
    return root


def test_cli_export_md_to_stdout_and_html_to_a_file(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    root = _file_store(tmp_path)
    assert main(["export", KEY, "--store", str(root), "--format", "md"]) == 0
    assert capsysbinary.readouterr().out == GOLDEN.read_bytes()
    out = tmp_path / "kyoto.html"
    args = ["export", KEY, "--store", str(root), "--format", "html", "-o", str(out)]
    assert main([*args, "--redact", "tool.content"]) == 0
    assert out.read_bytes() == export_html(fixed_store(), KEY, redact=["tool.content"])
    assert out.stat().st_mode & 0o777 == 0o600


def test_cli_export_readable_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _file_store(tmp_path)
    base = ["export", "--store", str(root)]
    cases = [
        ([*base, "--all", "--format", "md"], "exports one session"),
        ([*base, KEY, "--format", "md", "--redact", "a.b.c"], "cannot redact"),
        ([*base, KEY, "--format", "html", "--to", str(tmp_path)], "use -o FILE"),
        ([*base, KEY, "--redact", "content"], "for --format md or html"),
        ([*base, KEY], "give --to DIR"),
        ([*base, "nope", "--format", "md"], "nope"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "elsewhere.html")
    assert main([*base, KEY, "--format", "html", "-o", str(link)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere.html").exists()


def test_cli_serve_refuses_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _file_store(tmp_path)
    assert main(["serve", "--store", str(root), "--port", "70000"]) == 2
    assert "--port must be 1..65535" in capsys.readouterr().err
    assert main(["serve", "--store", str(root), "--redact", "a.b.c"]) == 2
    assert "cannot redact" in capsys.readouterr().err
    assert main(["serve", "--store", str(tmp_path / "none")]) == 2
    assert "no store at" in capsys.readouterr().err

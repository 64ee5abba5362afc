"""The published JSON Schema matches the code and validates every kind of line we write."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sessionledger.eventlog import EVENT_TYPES, FileStore, LocalKeyFile, MemoryStore
from sessionledger.eventlog._schema import line_schema
from sessionledger.replay import fork
from sessionledger.tools.cli._demo import write_conversation

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(
    line_schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)


def test_published_schema_is_current() -> None:
    published = json.loads((ROOT / "docs" / "event-schema.json").read_text(encoding="utf-8"))
    assert published == json.loads(json.dumps(line_schema())), (
        "regenerate docs/event-schema.json from eventlog._schema.line_schema()"
    )


def _every_kind_of_line(tmp_path: Path) -> list[bytes]:
    logs: list[bytes] = []
    with FileStore(tmp_path / "s", durability="none", hash_key="k") as store:
        write_conversation(store.session("demo"))
        s = store.session("all", metadata={"agent": "a"})
        s.append_message("user", [{"type": "text", "text": "hi"}, {"type": "image_url"}])
        s.append_message("assistant", "partial")
        s.retract()
        s.append_message("assistant", "ok", reasoning_content="r", thinking_blocks=[{"t": 1}])
        s.update_metadata(set={"title": "T", "n": None}, unset=["agent"])
        s.mark_consolidated(1)
        s.compact("sum", upto=1, tokens_before=10, tokens_after=2, duration=0.5, model="m", x=1)
        s.trim(1, "file_cap")
        s.record_usage(model="m", prompt_tokens=5, completion_tokens=2, call_id="r1")
        s.set_lifecycle("idle")
        s.clear(reason="new", keep=[0], unset=["title"])
        store.resume("all", 0, by="test")
        store.archive("all")
        fork(store, "demo", new_key="forked")
        for key in ("demo", "all", "forked"):
            logs.append(store.read_bytes(key))
    memory = MemoryStore()
    memory.session("m").append_message("user", "\u2028\x00 ctrl and separators")
    logs.append(memory.read_bytes("m"))
    sealed = MemoryStore(key_provider=LocalKeyFile(tmp_path / "master.key"))
    s = sealed.session("sealed", metadata={"title": "T"})
    s.append_message("user", "secret")
    s.update_metadata(set={"n": 1})
    s.compact("sum", upto=1)
    sealed.redact("sealed", 1, by="ops", reason="request")
    sealed.erase("sealed", by="ops")
    logs.append(sealed.read_bytes("sealed"))
    return [line for log in logs for line in log.splitlines()]


def test_every_line_we_write_validates(tmp_path: Path) -> None:
    lines = _every_kind_of_line(tmp_path)
    seen = set()
    for line in lines:
        doc = json.loads(line)
        errors = sorted(VALIDATOR.iter_errors(doc), key=str)
        assert not errors, f"{line[:120]!r}: {errors[0].message}"
        seen.add(doc["type"])
    tags = {t.__struct_config__.tag for t in EVENT_TYPES}
    assert tags | {"header"} <= seen, f"no line written for {tags - seen}"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(h="XYZ"),
        lambda d: d.pop("h"),
        lambda d: d.update(seq=-1),
        lambda d: d.update(ts="yesterday"),
        lambda d: d["message"].pop("role"),
    ],
)
def test_schema_rejects_malformed_lines(tmp_path: Path, mutate: object) -> None:
    line = next(json.loads(x) for x in _every_kind_of_line(tmp_path) if b'"type":"message"' in x)
    mutate(line)  # type: ignore[operator]
    assert list(VALIDATOR.iter_errors(line))

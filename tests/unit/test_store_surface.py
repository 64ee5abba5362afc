"""The stores' public methods are exactly the ones docs/store-api.md lists, store by store, and
so are the backend protocol's (abstract and with defaults)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sessionledger.eventlog import BaseStore, FileStore, MemoryStore, PostgresStore
from sessionledger.eventlog.backend import Backend

DOC = Path(__file__).resolve().parents[2] / "docs" / "store-api.md"
ROW = re.compile(r"^\| `([a-z_]+)` \|")


def documented() -> dict[str, set[str]]:
    sections: dict[str, set[str]] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), set())
        elif current is not None and (match := ROW.match(line)):
            current.add(match.group(1))
    return sections


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_every_store_has_the_documented_methods_and_no_others() -> None:
    assert public(BaseStore) == documented()["Every store"]


@pytest.mark.parametrize("cls", [FileStore, MemoryStore, PostgresStore], ids=lambda c: c.__name__)
def test_each_store_adds_only_what_its_section_lists(cls: type) -> None:
    docs = documented()
    assert public(cls) - public(BaseStore) == docs[cls.__name__]
    assert public(cls) >= public(BaseStore)


def test_the_catalog_plumbing_is_not_on_the_store() -> None:
    plumbing = {"scan_logs", "log_names", "stat_log", "read_log", "read_changes", "log_slot"}
    for cls in (BaseStore, FileStore, MemoryStore, PostgresStore):
        assert public(cls) & (plumbing | {"catalog_bytes", "put_catalog"}) == set()


def _backend_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split("## A new backend", 1)[1].split("\n## ", 1)[0]


def test_the_backend_section_names_every_backend_method_and_which_are_abstract() -> None:
    section = _backend_section()
    named = set(re.findall(r"`([a-z_]+)`", section))
    methods = {name for name in dir(Backend) if not name.startswith("_")}
    assert named - {"projections"} == methods  # the package the catalog lives in, not a method
    abstract = re.search(r"abstract operations \(([^)]*)\)", section)
    assert abstract is not None
    assert set(re.findall(r"`([a-z_]+)`", abstract.group(1))) == Backend.__abstractmethods__

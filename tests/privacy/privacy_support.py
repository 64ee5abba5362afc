"""Helpers of the privacy tests: an encrypted store, distinctive secrets, a byte grep."""

from __future__ import annotations

import os
from pathlib import Path

from sessionledger.eventlog import BaseStore, FileStore, LocalKeyFile, SessionWriter

#: Distinctive plaintexts; none may appear in any file of an encrypted store.
SECRETS = {
    "message": "Zanzibar-hospital-7731",
    "reply": "Quokka-mortgage-4410",
    "title": "Title-Okapi-9902",
    "meta": "Meta-Narwhal-1187",
    "summary": "Summary-Axolotl-5523",
    "tool": "ToolArg-Pangolin-3318",
}


def key_file(tmp_path: Path) -> LocalKeyFile:
    """A fresh master key file outside the store directory."""
    return LocalKeyFile(tmp_path / "keys" / "master.key")


def encrypted_store(tmp_path: Path, **kw: object) -> FileStore:
    """A file store under ``tmp_path/s`` encrypting with a key file in ``tmp_path/keys``."""
    provider = kw.pop("key_provider", None) or key_file(tmp_path)
    kw.setdefault("durability", "none")
    return FileStore(tmp_path / "s", key_provider=provider, **kw)  # type: ignore[arg-type]


def write_secrets(s: SessionWriter) -> None:
    """A conversation carrying every kind of secret."""
    s.update_metadata(set={"title": SECRETS["title"], "note": {"deep": [SECRETS["meta"]]}})
    s.append_message("user", f"I was at {SECRETS['message']} yesterday")
    s.append_message(
        "assistant",
        SECRETS["reply"],
        tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": SECRETS["tool"]}}],
    )
    s.append_message("tool", "ok", tool_call_id="c1")
    s.compact(f"They said {SECRETS['summary']}", upto=1)
    s.append_message("user", "second turn")


def files_containing(root: Path, needles: list[str]) -> dict[str, list[str]]:
    """For each needle found, the files under ``root`` whose bytes contain it."""
    found: dict[str, list[str]] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            for needle in needles:
                if needle.encode() in data:
                    found.setdefault(needle, []).append(str(path))
    return found


def contents(store: BaseStore, key: str) -> list[object]:
    """The live message contents of ``key`` as the store reads them back."""
    return [m.message.get("content") for m in store.load(key).state.messages]

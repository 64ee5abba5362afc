"""A crash at any byte offset: reopening gives exactly the complete events before the cut.

A real log (every kind of event, multi-byte text) is cut at EVERY byte offset; reopening it
with a fresh :class:`FileStore` must give the state of exactly the complete lines before the
cut, leave the log holding exactly those lines, and keep the cut bytes in the quarantine file.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionledger.eventlog import (
    FileStore,
    SessionState,
    decode_log,
    fold,
    verify_chain,
)

KEY = "telegram:42"


def build_log(root: Path, hash_key: str | None) -> bytes:
    with FileStore(root, durability="none", hash_key=hash_key) as store:
        s = store.session(KEY, metadata={"channel": "telegram"})
        s.append_message("user", "Plan a trip to \u4eac\u90fd \U0001f338", media=["/m.png"])
        s.append_message(
            "assistant",
            None,
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "search"}}],
        )
        s.append_message("tool", "Blossoms peak in April.", tool_call_id="c1", name="search")
        s.update_metadata(set={"title": "Kyoto"})
        s.mark_consolidated(1)
        s.compact("summary", 2, tokens_before=50, tokens_after=5)
        s.trim(1, "file_cap")
        s.append_message("assistant", "partial \u2028")
        s.retract()
        s.set_lifecycle("idle")
        s.clear()
        s.append_message("user", "again")
        data = store.read_bytes(KEY)
    store.path_for(KEY).unlink()
    return data


def quarantined(path: Path) -> list[tuple[dict[str, Any], bytes]]:
    out = []
    for line in path.read_bytes().splitlines():
        record = msgspec.json.decode(line)
        text = record.get("text")
        raw = text.encode("utf-8") if text is not None else base64.b64decode(record["base64"])
        out.append((record, raw))
    return out


@pytest.mark.parametrize("hash_key", [None, "secret"])
def test_reopen_after_a_cut_at_every_byte(tmp_path: Path, hash_key: str | None) -> None:
    root = tmp_path / "s"
    data = build_log(root, hash_key)
    key_bytes = FileStore(root, hash_key=hash_key).hash_key
    decoded = decode_log(data, key=key_bytes)
    assert decoded.header is not None and decoded.bad is None and decoded.torn is None
    header, events = decoded.header, decoded.events
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]  # offset after each line
    assert len(ends) == len(events) + 1
    states: list[SessionState] = [fold(header, events[:n]) for n in range(len(events) + 1)]

    store = FileStore(root, durability="none", hash_key=hash_key)
    log, quarantine = store.path_for(KEY), store.quarantine_path(KEY)
    for cut in range(len(data) + 1):
        log.write_bytes(data[:cut])
        quarantine.unlink(missing_ok=True)
        s = store.session(KEY)
        report = store.open_report(KEY)
        assert report is not None
        complete = sum(1 for end in ends if end <= cut)
        if complete == 0:
            # The header itself was cut: a fresh session, and the cut bytes are kept.
            assert s.seq == 0 and s.state.messages == [], cut
            assert s.state.metadata == {}  # the caller's metadata was in the lost header
            assert report.created == (cut == 0)
            fresh = log.read_bytes()
            assert verify_chain(fresh, key=key_bytes).problems == []
            assert fresh.count(b"\n") == 1
        else:
            valid = ends[complete - 1]
            assert s.state == states[complete - 1], cut
            assert log.read_bytes() == data[:valid], cut
        torn_from = ends[complete - 1] if complete else 0
        if cut > torn_from:
            assert report.torn is not None, cut
            assert report.torn.offset == torn_from and report.torn.line == complete + 1
            ((record, raw),) = quarantined(quarantine)
            assert raw == data[torn_from:cut], cut
            assert record["offset"] == torn_from and record["line"] == complete + 1
        else:
            assert report.torn is None, cut
            assert not quarantine.exists(), cut
        # The reopened log takes appends and stays a valid chain.
        seq = s.append_message("user", "after the crash")
        assert seq == s.state.seq == (events[complete - 2].seq + 1 if complete > 1 else 1)
        s.close()
        after = decode_log(log.read_bytes(), key=key_bytes)
        assert after.bad is None and after.torn is None and after.last_seq == seq
    store.close()

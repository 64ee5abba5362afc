"""What a test asserts of a log after concurrent writers: it is whole (no bad or torn line),
its hash chain holds, and its seqs run 1, 2, 3, ... with no gap or repeat."""

from __future__ import annotations

from sessionledger.eventlog import Event, MessageAppended, decode_log, verify_chain


def whole_log(data: bytes, hash_key: bytes = b"") -> list[Event]:
    """Assert that ``data`` is a whole, chained, contiguous log; return its events."""
    decoded = decode_log(data, key=hash_key)
    assert decoded.bad is None and decoded.torn is None
    assert verify_chain(data, key=hash_key).problems == []
    assert [e.seq for e in decoded.events] == list(range(1, len(decoded.events) + 1))
    return decoded.events


def check_log(data: bytes, hash_key: bytes = b"") -> list[int]:
    """Assert that ``data`` is a whole, chained, contiguous log; return its seqs."""
    return [e.seq for e in whole_log(data, hash_key)]


def contents(data: bytes) -> list[str]:
    """The contents of a whole log's messages, in order (asserting it is whole)."""
    return [e.message["content"] for e in whole_log(data) if isinstance(e, MessageAppended)]

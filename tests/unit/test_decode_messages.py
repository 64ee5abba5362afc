"""``decode_messages``: many message dicts in one decode, the same as each decoded on its own;
what it cannot decode as one batch is left to each message's first use, which raises as it
always did."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from sessionledger.eventlog import InvalidEventError, MessageAppended
from sessionledger.eventlog.codec import decode_messages

TS = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def _lazy(body: bytes, seq: int = 1) -> MessageAppended:
    """An event as a read builds it: the body's bytes, no dict yet."""
    return MessageAppended(seq=seq, ts=TS, id=f"e{seq}", body=msgspec.Raw(body))


def test_equals_decoding_each_message_alone() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "é 東京 \u2028 “q” \\ \n", "n": [1, 2.5, None, True]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "f": {"a": {}}}]},
        {},
    ]
    bodies = [msgspec.json.encode(m) for m in messages]
    batch = [_lazy(b, i + 1) for i, b in enumerate(bodies)]
    decode_messages(batch)
    assert all("message" in e.__dict__ for e in batch)
    assert [e.message for e in batch] == [_lazy(b).message for b in bodies] == messages


def test_a_decoded_message_is_kept_and_a_sealed_one_is_left_alone() -> None:
    kept = _lazy(b'{"role":"user","content":"a"}', 1)
    mine = kept.message
    sealed = _lazy(b'"ciphertext"', 2)
    opened = {"role": "user", "content": "opened"}
    sealed.__dict__["_open"] = lambda event: opened
    plain = [_lazy(b'{"content":"%d"}' % i, i + 3) for i in range(2)]
    decode_messages([kept, sealed, *plain])
    assert kept.message is mine
    assert "message" not in sealed.__dict__ and sealed.message is opened
    assert [e.message for e in plain] == [{"content": "0"}, {"content": "1"}]


@pytest.mark.parametrize(
    "bad",
    [
        b"[1]",
        b'"text"',
        b"",
        b'{"a":1},{"b":2}',
        b'{"a":',
        b"{}]",
        b"[" * 2_000 + b"]" * 2_000,
        # Two objects in one body, apart as the batch's bodies are (a newline) or not.
        b'{"a":1}\n{"b":2}',
        b'{"a":1} {"b":2}',
        b"\n",
    ],
)
def test_a_batch_with_a_bad_body_decodes_nothing_and_each_raises_as_before(bad: bytes) -> None:
    good = [_lazy(b'{"content":"x"}', 1), _lazy(b'{"content":"y"}', 3)]
    events = [good[0], _lazy(bad, 2), good[1]]
    decode_messages(events)
    assert not any("message" in e.__dict__ for e in events)
    assert [e.message for e in good] == [{"content": "x"}, {"content": "y"}]
    with pytest.raises(InvalidEventError, match="seq 2 is not a JSON object"):
        events[1].message  # noqa: B018

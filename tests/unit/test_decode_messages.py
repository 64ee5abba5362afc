"""``decode_messages``: many message dicts in one call, the same as each decoded on its own;
a body that does not decode is left to its message's first use, which raises as it always
did, and the others are decoded all the same."""

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
def test_a_bad_body_is_left_to_raise_and_the_others_are_decoded(bad: bytes) -> None:
    good = [_lazy(b'{"content":"x"}', 1), _lazy(b'{"content":"y"}', 3)]
    events = [good[0], _lazy(bad, 2), good[1]]
    decode_messages(events)
    assert "message" not in events[1].__dict__
    assert [e.__dict__.get("message") for e in good] == [{"content": "x"}, {"content": "y"}]
    with pytest.raises(InvalidEventError, match="seq 2 is not a JSON object"):
        events[1].message  # noqa: B018


@pytest.mark.parametrize(
    "bodies",
    [
        # A body with no value and one with two: the counts agree, the pairing does not.
        [b"", b'{"content":"a"} {"content":"b"}'],
        [b"  ", b'{"content":"a"}\r{"content":"b"}'],
        # One value split over two bodies, and a body with two.
        [b'{"content":', b'"a"}', b'{"content":"b"} {"content":"c"}'],
        [b'{"content":"a"', b"}", b'{"x":1}{"y":2}'],
    ],
)
def test_bodies_that_pair_up_wrong_in_one_stream_decode_nothing(bodies: list[bytes]) -> None:
    """A batch whose bodies decode, joined, into as many objects as there are events, but not
    one per body (a hand-built body with none, half of one or two): no event gets another's
    message; each raises on first use as it does alone."""
    good = _lazy(b'{"content":"x"}', 1)
    bad = [_lazy(body, i + 2) for i, body in enumerate(bodies)]
    decode_messages([good, *bad])
    assert not any("message" in e.__dict__ for e in bad)
    for event in bad:
        with pytest.raises(InvalidEventError, match=f"seq {event.seq} is not a JSON object"):
            event.message  # noqa: B018
    assert good.message == {"content": "x"}


def test_a_body_with_a_raw_newline_between_its_tokens_decodes_as_alone() -> None:
    """A line may carry JSON whitespace (a newline too) inside its body: such a body is one
    object, and the batch gives each event its own."""
    bodies = [b'{"content":"x"}', b'{"content":\n"y",\r\n"n":[1,\n2]}', b'{"content":"z"}\n ']
    events = [_lazy(body, i + 1) for i, body in enumerate(bodies)]
    decode_messages(events)
    assert [e.message for e in events] == [_lazy(b).message for b in bodies]
    assert [e.message["content"] for e in events] == ["x", "y", "z"]

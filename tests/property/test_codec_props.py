"""Codec properties: any event round-trips; any single changed byte fails verification."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import (
    END_REASONS,
    LIFECYCLE_STATES,
    TRIM_REASONS,
    Cleared,
    Compacted,
    Consolidated,
    Header,
    KnownEvent,
    LifecycleChanged,
    MessageAppended,
    MetadataChanged,
    Retracted,
    Trimmed,
    UsageRecorded,
    decode_log,
    verify_chain,
)
from sessionledger.eventlog.codec import LineDecoder, encode_lines

texts = st.text(max_size=30)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
json_dicts = st.dictionaries(texts, json_values, max_size=6)
stamps = st.datetimes(timezones=st.just(UTC))
ids = st.text(min_size=1, max_size=24)
counts = st.integers(min_value=-(2**63), max_value=2**63 - 1)
small = st.integers(min_value=0, max_value=10**9)
reasons = st.sampled_from(END_REASONS)


def _base() -> dict[str, Any]:
    return {"seq": st.just(0), "ts": stamps, "id": ids}


event_strategies: list[st.SearchStrategy[KnownEvent]] = [
    st.builds(MessageAppended.of, **_base(), message=json_dicts, tokens=small),
    st.builds(MetadataChanged, **_base(), set=json_dicts, unset=st.lists(texts, max_size=3)),
    st.builds(Consolidated, **_base(), upto=counts),
    st.builds(
        Compacted,
        **_base(),
        summary=st.text(),
        upto=counts,
        tokens_before=small,
        tokens_after=small,
        removed=small,
        kept=small,
        extra=json_dicts,
    ),
    st.builds(Trimmed, **_base(), count=counts, reason=st.sampled_from(TRIM_REASONS)),
    st.builds(Cleared, **_base(), reason=st.none() | reasons, keep=st.lists(small, max_size=3)),
    st.builds(Retracted, **_base(), count=counts),
    st.builds(
        LifecycleChanged,
        **_base(),
        state=st.sampled_from(LIFECYCLE_STATES),
        reason=st.none() | reasons,
    ),
    st.builds(
        UsageRecorded,
        **_base(),
        model=st.none() | texts,
        prompt_tokens=small,
        completion_tokens=small,
        cached_tokens=small,
        total_tokens=small,
        call_id=st.none() | texts,
    ),
]
any_event = st.one_of(event_strategies)
headers = st.builds(
    Header,
    seq=st.just(0),
    ts=stamps,
    id=ids,
    key=st.text(min_size=1, max_size=40),
    created_at=stamps,
    metadata=json_dicts,
)


def numbered(events: list[KnownEvent]) -> list[KnownEvent]:
    return [msgspec.structs.replace(e, seq=i) for i, e in enumerate(events, 1)]


def strip_h(event: Any) -> Any:
    return msgspec.structs.replace(event, h="")


@settings(max_examples=150, deadline=None)
@given(
    header=headers,
    events=st.lists(any_event, max_size=8),
    key=st.binary(max_size=64),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_round_trip(header: Header, events: list[KnownEvent], key: bytes, chunk: int) -> None:
    events = numbered(events)
    data, head = encode_lines([header, *events], key=key)
    assert data.count(b"\n") == len(events) + 1
    assert len(data.decode("utf-8").splitlines()) == len(events) + 1
    decoded = decode_log(data, key=key)
    assert decoded.bad is None and decoded.torn is None
    assert decoded.header is not None and strip_h(decoded.header) == header
    assert [strip_h(e) for e in decoded.events] == events
    assert decoded.valid_length == len(data) and decoded.head == head
    # Fed in arbitrary chunks, the incremental decoder agrees.
    dec = LineDecoder(key=key)
    fed: list[Any] = []
    for start in range(0, len(data), chunk):
        fed.extend(dec.feed(data[start : start + chunk]))
    assert dec.finish() is None and fed == decoded.events
    check = verify_chain(data, key=key)
    assert check.problems == [] and check.head == head


SAMPLE_EVENTS: list[KnownEvent] = numbered(
    [
        MessageAppended.of(
            seq=0,
            ts=datetime(2026, 11, 25, tzinfo=UTC),
            id="m1",
            message={"role": "user", "content": "Kyoto \u6771\u4eac \u2028", "media": ["a"]},
            tokens=7,
        ),
        MetadataChanged(seq=0, ts=datetime(2026, 11, 25, tzinfo=UTC), id="x", set={"t": 1}),
        Trimmed(seq=0, ts=datetime(2026, 11, 25, tzinfo=UTC), id="t", count=1, reason="truncate"),
        Cleared(seq=0, ts=datetime(2026, 11, 25, tzinfo=UTC), id="c"),
    ]
)
SAMPLE_HEADER = Header(
    seq=0,
    ts=datetime(2026, 11, 25, tzinfo=UTC),
    id="s",
    key="telegram:42",
    created_at=datetime(2026, 11, 25, tzinfo=UTC),
)
SAMPLE, _ = encode_lines([SAMPLE_HEADER, *SAMPLE_EVENTS])


def assert_detected(data: bytes, key: bytes = b"") -> None:
    assert verify_chain(data, key=key).problems, data
    decoded = decode_log(data, key=key)
    assert decoded.bad is not None or decoded.torn is not None, data


def mutate(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + bytes([value]) + data[offset + 1 :]


def test_every_single_byte_change_is_detected() -> None:
    """Exhaustive over offsets, with bit flips that keep ASCII, reach high bytes, or add lines."""
    for offset in range(len(SAMPLE)):
        old = SAMPLE[offset]
        for value in {old ^ 0x01, old ^ 0x20, old ^ 0x80, 0x0A, 0x30} - {old}:
            assert_detected(mutate(SAMPLE, offset, value))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_single_changed_byte_fails_verification(data: st.DataObject) -> None:
    offset = data.draw(st.integers(min_value=0, max_value=len(SAMPLE) - 1))
    value = data.draw(st.integers(min_value=0, max_value=255).filter(lambda v: v != SAMPLE[offset]))
    assert_detected(mutate(SAMPLE, offset, value))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_any_single_changed_byte_fails_keyed_verification(data: st.DataObject) -> None:
    key = b"secret"
    sample, _ = encode_lines([SAMPLE_HEADER, *SAMPLE_EVENTS], key=key)
    offset = data.draw(st.integers(min_value=0, max_value=len(sample) - 1))
    value = data.draw(st.integers(min_value=0, max_value=255).filter(lambda v: v != sample[offset]))
    assert_detected(mutate(sample, offset, value), key)

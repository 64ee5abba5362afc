"""The line codec and hash chain: line shape, chaining, keys, torn tails, bad lines, verify."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from sessionledger.eventlog import (
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
    UnknownEvent,
    decode_log,
    verify_chain,
)
from sessionledger.eventlog.codec import (
    SUFFIX_LEN,
    ZERO_HASH,
    LineDecoder,
    chain_hash,
    encode_line,
    encode_lines,
    normalize_key,
    split_hash,
)

TS = datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=UTC)
LINE_END = re.compile(rb',"h":"([0-9a-f]{32})"\}\n\Z')


def header(key: str = "telegram:42", **fields: Any) -> Header:
    return Header(seq=0, ts=TS, id="hdr", key=key, created_at=TS, **fields)


def message(seq: int, content: Any = "hi", role: str = "user", **fields: Any) -> MessageAppended:
    return MessageAppended.of(
        seq=seq, ts=TS, id=f"e{seq}", message={"role": role, "content": content, **fields}, tokens=5
    )


def every_kind() -> list[KnownEvent]:
    """One event of every known type, seq 1..N."""
    return [
        message(1, "Plan a trip to Kyoto", media=["/tmp/map.png"]),
        message(2, None, role="assistant", tool_calls=[{"id": "c1", "type": "function"}]),
        MetadataChanged(seq=3, ts=TS, id="e3", set={"title": "Kyoto"}, unset=["old"]),
        Consolidated(seq=4, ts=TS, id="e4", upto=1),
        Compacted(seq=5, ts=TS, id="e5", summary="s", upto=2, tokens_before=9, extra={"m": 1}),
        Trimmed(seq=6, ts=TS, id="e6", count=1, reason="file_cap"),
        Retracted(seq=7, ts=TS, id="e7", count=1),
        Cleared(seq=8, ts=TS, id="e8"),
        LifecycleChanged(seq=9, ts=TS, id="e9", state="archived", reason="archive"),
    ]


def sample_log(key: bytes = b"") -> bytes:
    data, _ = encode_lines([header(), *every_kind()], key=key)
    return data


def line_offsets(data: bytes) -> list[int]:
    """Start offset of every line."""
    starts = [0]
    for i, b in enumerate(data):
        if b == 0x0A and i + 1 < len(data):
            starts.append(i + 1)
    return starts


def custom_line(fields: bytes, prev_h: str, key: bytes = b"") -> tuple[bytes, str]:
    """A hand-made line ``{<fields>,"h":"..."}`` chained after ``prev_h``."""
    body = b"{" + fields
    h = chain_hash(prev_h, body, key)
    return body + b',"h":"' + h.encode() + b'"}\n', h


# -- encoding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("event", [header(), *every_kind()], ids=lambda e: type(e).__name__)
def test_line_shape(event: Header | KnownEvent) -> None:
    line, h = encode_line(event, ZERO_HASH)
    match = LINE_END.search(line)
    assert match is not None, line
    assert match.group(1).decode() == h
    assert line.count(b"\n") == 1
    assert line.startswith(b'{"type":"' + event.__struct_config__.tag.encode() + b'"')  # type: ignore[union-attr]
    assert len(line) - 1 - (len(line) - 1 - SUFFIX_LEN) == SUFFIX_LEN
    assert msgspec.json.decode(line)["h"] == h


def test_header_chains_from_zero_hash_and_events_chain_on() -> None:
    hline, hh = encode_line(header(), ZERO_HASH)
    assert hh == chain_hash(ZERO_HASH, hline[: -SUFFIX_LEN - 1])
    eline, eh = encode_line(message(1), hh)
    assert eh == chain_hash(hh, eline[: -SUFFIX_LEN - 1])
    data, last = encode_lines([header(), message(1)])
    assert data == hline + eline
    assert last == eh


def test_hash_depends_on_previous_hash() -> None:
    _, a = encode_line(message(1), ZERO_HASH)
    _, b = encode_line(message(1), "1" * 32)
    assert a != b


def test_existing_h_on_the_event_is_ignored() -> None:
    plain = encode_line(message(1), ZERO_HASH)
    with_h = encode_line(msgspec.structs.replace(message(1), h="f" * 32), ZERO_HASH)
    assert plain == with_h


def test_keyed_chain_differs_and_needs_the_key() -> None:
    key = normalize_key("secret")
    keyed = sample_log(key)
    plain = sample_log()
    assert keyed != plain
    good = decode_log(keyed, key=key)
    assert good.bad is None and good.torn is None
    assert len(good.events) == len(every_kind())
    for wrong in (b"", normalize_key("other")):
        bad = decode_log(keyed, key=wrong)
        assert bad.header is None
        assert bad.bad is not None and bad.bad.line == 1
        assert "hash mismatch" in bad.bad.reason
        assert verify_chain(keyed, key=wrong).problems[0].line == 1
    assert verify_chain(keyed, key=key).problems == []
    # An unkeyed log does not verify under a key either.
    assert verify_chain(plain, key=key).problems


def test_normalize_key() -> None:
    assert normalize_key(None) == b""
    assert normalize_key("abc") == b"abc" == normalize_key(b"abc")
    long = normalize_key(b"x" * 100)
    assert len(long) == 64
    assert long != normalize_key(b"x" * 101)
    # A condensed long key still works as a blake2b key.
    assert chain_hash(ZERO_HASH, b"body", long) != chain_hash(ZERO_HASH, b"body")


def test_control_characters_and_line_separators_are_escaped() -> None:
    tricky = "a\u2028b\u2029c\x00d\x1fe\nf\rg\x85h\x7fi\u00e9"
    line, _ = encode_line(message(1, tricky, **{"k\u2028\n": "v\x1e"}), ZERO_HASH)
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    assert not any(b < 0x20 for b in line[:-1])
    for raw in ("\u2028", "\u2029", "\x85", "\x7f"):
        assert raw.encode() not in line
    text = line.decode("utf-8")
    assert text.splitlines() == [text[:-1]]  # Python's splitlines sees one line, too
    data, _ = encode_lines([header(), message(1, tricky, **{"k\u2028\n": "v\x1e"})])
    decoded = decode_log(data)
    assert decoded.bad is None and decoded.torn is None
    event = decoded.events[0]
    assert isinstance(event, MessageAppended)
    assert event.message == {"role": "user", "content": tricky, "k\u2028\n": "v\x1e"}


def test_unserialisable_value_raises_encode_error() -> None:
    with pytest.raises((TypeError, msgspec.EncodeError)):
        encode_line(message(1, object()), ZERO_HASH)


# -- decoding ---------------------------------------------------------------------------------


def test_round_trip_every_kind() -> None:
    data = sample_log()
    decoded = decode_log(data)
    assert decoded.header is not None
    assert decoded.header.key == "telegram:42"
    assert decoded.bad is None and decoded.torn is None
    assert decoded.valid_length == len(data)
    assert decoded.lines == 1 + len(every_kind())
    assert decoded.last_seq == len(every_kind())
    hashes = [msgspec.json.decode(line)["h"] for line in data.splitlines()]
    assert decoded.header.h == hashes[0]
    expected = [
        msgspec.structs.replace(e, h=h) for e, h in zip(every_kind(), hashes[1:], strict=True)
    ]
    assert decoded.events == expected
    assert decoded.head == hashes[-1]


def test_header_only_log() -> None:
    data = sample_log()
    first = data[: data.index(b"\n") + 1]
    decoded = decode_log(first)
    assert decoded.header is not None and decoded.events == []
    assert decoded.last_seq == 0
    assert decoded.valid_length == len(first)


def test_decoder_fed_byte_by_byte_matches_decode_log() -> None:
    data = sample_log()
    dec = LineDecoder()
    events = []
    for i in range(len(data)):
        events.extend(dec.feed(data[i : i + 1]))
    assert dec.finish() is None
    assert dec.bad is None
    assert events == decode_log(data).events
    assert dec.offset == len(data)


def test_decoder_resumes_after_a_prefix() -> None:
    data = sample_log()
    starts = line_offsets(data)
    cut = starts[4]
    first = decode_log(data[:cut])
    tail = decode_log(
        data[cut:],
        expect_header=False,
        prev_h=first.head,
        last_seq=first.last_seq,
        offset=cut,
        first_line=first.lines + 1,
    )
    assert tail.bad is None and tail.torn is None
    assert first.events + tail.events == decode_log(data).events
    assert tail.valid_length == len(data)


@pytest.mark.parametrize("cut", [1, 10, SUFFIX_LEN, SUFFIX_LEN + 1])
def test_torn_tail_is_a_result_not_an_exception(cut: int) -> None:
    data = sample_log()
    last_start = line_offsets(data)[-1]
    decoded = decode_log(data[:-cut])
    assert decoded.bad is None
    assert decoded.torn is not None
    assert decoded.torn.offset == last_start
    assert decoded.torn.line == 1 + len(every_kind())
    assert decoded.torn.data == data[last_start:-cut]
    assert decoded.valid_length == last_start
    assert decoded.events == decode_log(data).events[:-1]


def test_bad_complete_last_line_is_a_torn_tail() -> None:
    data = bytearray(sample_log())
    last_start = line_offsets(bytes(data))[-1]
    data[last_start + 12] ^= 0x01
    decoded = decode_log(bytes(data))
    assert decoded.bad is None
    assert decoded.torn is not None
    assert "hash mismatch" in decoded.torn.reason
    assert decoded.torn.data == bytes(data[last_start:])


def test_bad_line_in_the_middle() -> None:
    data = bytearray(sample_log())
    starts = line_offsets(bytes(data))
    data[starts[3] + 15] ^= 0x01  # line 4: the third event
    decoded = decode_log(bytes(data))
    assert decoded.bad is not None
    assert decoded.bad.line == 4
    assert decoded.bad.offset == starts[3]
    assert "hash mismatch" in decoded.bad.reason
    assert decoded.torn is None
    assert len(decoded.events) == 2
    assert decoded.valid_length == starts[3]


def test_line_without_hash_in_the_middle() -> None:
    data = sample_log()
    starts = line_offsets(data)
    broken = data[: starts[2]] + b'{"hello":"world"}\n' + data[starts[2] :]
    decoded = decode_log(broken)
    assert decoded.bad is not None and decoded.bad.line == 3
    assert "no hash field" in decoded.bad.reason


def test_deleted_and_reordered_lines_are_detected() -> None:
    lines = sample_log().splitlines(keepends=True)
    deleted = b"".join(lines[:3] + lines[4:])
    bad = decode_log(deleted).bad
    assert bad is not None and bad.line == 4
    swapped = b"".join([*lines[:3], lines[4], lines[3], *lines[5:]])
    bad = decode_log(swapped).bad
    assert bad is not None and bad.line == 4


def test_unknown_event_type_is_passed_through() -> None:
    hline, hh = encode_line(header(), ZERO_HASH)
    uline, uh = custom_line(
        b'"type":"reaction","seq":1,"ts":"2026-11-25T10:00:00Z","id":"r1","emoji":"+1","n":[1,2]',
        hh,
    )
    mline, mh = encode_line(message(2), uh)
    decoded = decode_log(hline + uline + mline)
    assert decoded.bad is None and decoded.torn is None
    unknown, known = decoded.events
    assert isinstance(unknown, UnknownEvent)
    assert unknown.type == "reaction"
    assert unknown.seq == 1 and unknown.id == "r1" and unknown.h == uh
    assert unknown.ts == datetime(2026, 11, 25, 10, tzinfo=UTC)
    assert unknown.raw["emoji"] == "+1" and unknown.raw["n"] == [1, 2]
    assert "h" not in unknown.raw
    assert isinstance(known, MessageAppended) and known.h == mh
    assert decoded.head == mh


def test_known_tag_with_bad_fields_is_a_bad_line() -> None:
    hline, hh = encode_line(header(), ZERO_HASH)
    line, _ = custom_line(b'"type":"trimmed","seq":1,"ts":"2026-11-25T10:00:00Z","id":"x"', hh)
    decoded = decode_log(hline + line + hline)
    assert decoded.bad is not None and decoded.bad.line == 2
    assert "invalid event" in decoded.bad.reason


def test_unknown_tag_without_event_fields_is_a_bad_line() -> None:
    hline, hh = encode_line(header(), ZERO_HASH)
    line, _ = custom_line(b'"type":"reaction","seq":1', hh)
    decoded = decode_log(hline + line + hline)
    assert decoded.bad is not None and decoded.bad.line == 2


@pytest.mark.parametrize(("first", "second"), [(2, 3), (1, 1), (1, 3)])
def test_seq_gap_is_detected(first: int, second: int) -> None:
    data, _ = encode_lines([header(), message(first), message(second), message(second + 1)])
    decoded = decode_log(data)
    assert decoded.bad is not None
    expected_line = 2 if first != 1 else 3
    assert decoded.bad.line == expected_line
    assert "seq" in decoded.bad.reason


def test_first_line_must_be_a_header() -> None:
    data, _ = encode_lines([message(1), message(2)])
    decoded = decode_log(data)
    assert decoded.header is None
    assert decoded.bad is not None and decoded.bad.line == 1
    assert "bad header" in decoded.bad.reason


def test_header_of_another_format_is_refused() -> None:
    data, _ = encode_lines([header(format="other"), message(1)])
    decoded = decode_log(data)
    assert decoded.header is None
    assert decoded.bad is not None and "format" in decoded.bad.reason


def test_decoder_stops_after_a_bad_line() -> None:
    data = bytearray(sample_log())
    starts = line_offsets(bytes(data))
    data[starts[2] + 15] ^= 0x01
    dec = LineDecoder()
    got = dec.feed(bytes(data))
    assert len(got) == 1
    assert dec.feed(sample_log()) == []
    assert dec.bad is not None and dec.bad.line == 3
    assert dec.pending == bytes(data[starts[2] :])
    assert dec.finish() is None  # more lines follow the bad one: not a torn tail


def test_split_hash() -> None:
    line = sample_log().splitlines()[1]
    parts = split_hash(line)
    assert parts is not None
    body, h = parts
    assert body + b',"h":"' + h.encode() + b'"}' == line
    assert split_hash(line[:-1]) is None
    assert split_hash(line[:-34] + line[-34:-2].upper() + b'"}') is None
    assert split_hash(b'{"h":"x"}') is None
    assert split_hash(b"") is None


# -- verify_chain -----------------------------------------------------------------------------


def test_verify_chain_clean() -> None:
    data = sample_log()
    check = verify_chain(data)
    assert check.problems == []
    assert check.lines == 1 + len(every_kind())
    assert check.head == decode_log(data).head
    assert verify_chain(b"").problems == []


def test_verify_chain_resumes_from_prev_h() -> None:
    data = sample_log()
    cut = line_offsets(data)[3]
    head = verify_chain(data[:cut]).head
    check = verify_chain(data[cut:], prev_h=head)
    assert check.problems == [] and check.head == decode_log(data).head
    assert verify_chain(data[cut:]).problems[0].line == 1


def test_verify_chain_reports_edits() -> None:
    data = sample_log()
    starts = line_offsets(data)
    edited = bytearray(data)
    edited[starts[5] + 20] ^= 0x01
    check = verify_chain(bytes(edited))
    assert len(check.problems) == 1
    problem = check.problems[0]
    assert (problem.line, problem.offset, problem.reason) == (6, starts[5], "hash mismatch")
    no_newline = verify_chain(data[:-1]).problems
    assert no_newline[0].reason.startswith("incomplete last line")
    no_hash = verify_chain(data + b'{"x":1}\n').problems
    assert no_hash[0].reason == "no hash field" and no_hash[0].line == len(starts) + 1

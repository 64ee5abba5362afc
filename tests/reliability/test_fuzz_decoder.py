"""Hostile log bytes: the decoder, the stores' readers and verify raise only the library's errors.

The targets and mutations are ``tools.soak._fuzz`` (see its docstring); each input runs under a
time bound, so a hang fails too. Hypothesis drives random bytes and random mutation sequences;
the mutation fuzzer runs a few hundred inputs here and tens of thousands in the soak.
tests/property/test_codec_props.py already proves the codec round trip and that every changed
byte is caught; this module is about inputs no writer would produce.
"""

from __future__ import annotations

import random
import tracemalloc

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import MemoryStore, decode_log
from sessionledger.eventlog.codec import LineDecoder, normalize_key
from sessionledger.tools.soak._fuzz import (
    KEY,
    SECRET,
    check_log_input,
    deep,
    mutate,
    rechain,
    run_fuzz,
    sample_log,
)

PLAIN = sample_log()
KEYED = sample_log(SECRET)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.binary(max_size=3000))
def test_random_bytes(data: bytes) -> None:
    check_log_input(data)
    check_log_input(data, normalize_key(SECRET))


@SETTINGS
@given(st.integers(0, 2**32), st.integers(1, 8), st.booleans(), st.booleans())
@example(613765633, 1, False, True)  # invalid UTF-8 inside a message body, rechained
def test_mutated_real_logs(seed: int, rounds: int, keyed: bool, chained: bool) -> None:
    rng = random.Random(seed)
    key = normalize_key(SECRET) if keyed else b""
    data = KEYED if keyed else PLAIN
    for _ in range(rounds):
        data = mutate(data, rng)
    if chained:  # past the hash check, into JSON, events, fold and opening a writer
        data = rechain(data, key)
    check_log_input(data, key, rng=rng)


def test_the_mutation_fuzzer() -> None:
    figures = run_fuzz(250, seed=11)
    assert figures.decoder_inputs == 250 and figures.rechained > 50


def _with_line(content: bytes) -> bytes:
    """The sample log's first lines with one message whose JSON content is ``content``."""
    lines = PLAIN.split(b"\n")
    line = lines[1].replace(b'"content":"Plan', b'"content":' + content + b',"x":"Plan', 1)
    return rechain(b"\n".join([lines[0], line, *lines[2:]]))


def test_specific_hostile_lines() -> None:
    """Regressions: deep nesting raised RecursionError and an invalid UTF-8 object key raised
    UnicodeDecodeError out of the decoder; now each is a bad line (or, last, a torn tail)."""
    for content in (
        deep(100_000),
        b'{"\xff\xfe":1}',
        b'"nul \x00 byte"',
        b'"\\u0000"',
        b'"raw \xe2\x80\xa8 separator"',
        b"1" * 5000,
        b"1e99999",
        b'"\xed\xa0\x80"',
        b'"bad \xe2\x28\xa1 continuation"',
    ):
        data = _with_line(content)
        decoded = decode_log(data)
        assert decoded.header is not None
        check_log_input(data, rng=random.Random(0))
    # A raw U+2028 inside a string is valid JSON and still one line.
    ok = decode_log(_with_line(b'"a\xe2\x80\xa8b"'))
    assert ok.bad is None and ok.torn is None


def test_a_bad_line_fed_in_small_chunks_is_not_a_torn_tail() -> None:
    """Regression: fed byte by byte, a bad first line followed by more lines was reported as a
    torn tail (which opening would cut, with everything after it, into quarantine)."""
    data = b"junk\n" + PLAIN
    whole = decode_log(data)
    assert whole.bad is not None and whole.torn is None
    for step in (1, 3, 5, 6, 64):
        dec = LineDecoder()
        for pos in range(0, len(data), step):
            dec.feed(data[pos : pos + step])
        assert dec.finish() is None and dec.bad == whole.bad, step


SIZE = 8 << 20


def _peak(func: object, *args: object) -> int:
    tracemalloc.start()
    try:
        func(*args)  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_bounded_for_one_huge_line() -> None:
    """A single 8 MB line costs a small multiple of itself (measured: about 6x), torn or whole."""
    huge = _with_line(b'"' + b"q" * SIZE + b'"')
    assert decode_log(huge).bad is None
    assert _peak(decode_log, huge) < 8 * len(huge)
    store = MemoryStore()
    store.put_bytes(KEY, huge)
    assert _peak(store.load, KEY) < 10 * len(huge)
    torn = PLAIN + b"x" * SIZE
    assert _peak(decode_log, torn) < 2 * len(torn)
    assert _peak(decode_log, b"\xff" * SIZE) < SIZE

"""The sealed-body base64 codec: the fast one (pybase64) and the standard library's agree."""

from __future__ import annotations

import binascii
import functools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import _crypto


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_both_codecs_write_and_read_the_same_text(data: bytes) -> None:
    fast = _crypto._b64encode(data)
    assert fast == binascii.b2a_base64(data, newline=False)
    assert _crypto._b64decode(fast) == data == binascii.a2b_base64(fast)
    assert _crypto._b64decode(fast.decode("ascii")) == data


def test_a_nonce_encodes_without_padding() -> None:
    # The message body writes base64(nonce) + base64(ciphertext) for base64(nonce + ciphertext).
    nonce, sealed = os.urandom(12), os.urandom(37)
    assert _crypto._b64encode(nonce) + _crypto._b64encode(sealed) == _crypto._b64encode(
        nonce + sealed
    )


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(['"', "\\", " ", "\n", "}", "*", "é"]))
def test_the_strict_decoders_read_the_same_and_refuse_any_other_character(
    data: bytes, bad: str
) -> None:
    # A sealed message body is decoded strictly first; a refusal sends it to the whole-body
    # JSON decode, so each decoder must refuse exactly what is not canonical base64.
    text = _crypto._b64encode(data)
    stdlib_strict = functools.partial(binascii.a2b_base64, strict_mode=True)
    for decode in (_crypto._b64decode_strict, stdlib_strict):
        assert decode(text) == data
        assert decode(memoryview(b"xx" + text + b"yy")[2:-2]) == data
        for at in {0, len(text) // 2, len(text)}:
            with pytest.raises(ValueError):
                decode(text[:at] + bad.encode() + text[at:])

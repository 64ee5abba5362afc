"""The sealed-body base64 codec: the fast one (pybase64) and the standard library's agree."""

from __future__ import annotations

import binascii
import os

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

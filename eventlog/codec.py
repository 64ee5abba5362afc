"""The line codec and hash chain, public for the sibling packages and for tools that read bytes.

Applications read and write sessions through a store (:mod:`sessionledger.eventlog`); what is
here works one level down, on a log's bytes: encode and decode lines, split off and check the
hash, feed a :class:`LineDecoder` incrementally. The catalog, replay, the viewer and the
benchmarks use it. It is pure: bytes in, events out, no I/O.

>>> from sessionledger.eventlog.codec import ZERO_HASH, split_hash, verify_chain
>>> verify_chain(b"").problems
[]
"""

from __future__ import annotations

from ._codec import (
    SUFFIX_LEN,
    ZERO_HASH,
    ChainCheck,
    Decoded,
    LineDecoder,
    Problem,
    TornTail,
    chain_hash,
    decode_log,
    encode_line,
    encode_lines,
    normalize_key,
    split_hash,
    verify_chain,
)
from ._events import decode_messages

__all__ = (
    "SUFFIX_LEN",
    "ZERO_HASH",
    "ChainCheck",
    "Decoded",
    "LineDecoder",
    "Problem",
    "TornTail",
    "chain_hash",
    "decode_log",
    "decode_messages",
    "encode_line",
    "encode_lines",
    "normalize_key",
    "split_hash",
    "verify_chain",
)

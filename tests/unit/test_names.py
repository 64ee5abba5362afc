"""Session keys to file stems: collision-free, reversible, filesystem-safe, bounded."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import InvalidEventError
from sessionledger.eventlog._names import MAX_STEM
from sessionledger.eventlog.backend import key_to_stem, stem_to_key

SAFE = set("abcdefghijklmnopqrstuvwxyz0123456789-_~")

TRICKY_KEYS = [
    "a:b",
    "a_b",
    "a_3ab",
    "A:B",
    "a:B",
    "../x",
    "..",
    ".",
    "/",
    "a/b",
    "\x00",
    "a\x00b",
    "~",
    "-",
    "telegram:42",
    "Telegram:42",
    "k" * 4096,
    "k" * 4095 + "K",
    "\u00e9",
    unicodedata.normalize("NFD", "\u00e9"),
    "\u6771\u4eac",
    "\U0001f600",
    " ",
    "\\",
    "con",
    "nul.txt",
]


def test_documented_examples() -> None:
    assert key_to_stem("a:b") == "a_3ab"
    assert key_to_stem("a_b") == "a_5fb"
    assert key_to_stem("telegram:42") == "telegram_3a42"


def test_tricky_keys_get_distinct_safe_stems() -> None:
    stems = [key_to_stem(k) for k in TRICKY_KEYS]
    assert len(set(stems)) == len(TRICKY_KEYS)
    for key, stem in zip(TRICKY_KEYS, stems, strict=True):
        assert stem, key
        assert set(stem) <= SAFE, key
        assert len(stem) <= MAX_STEM
        assert not stem.startswith((".", "-", "~")) or key.startswith("-")
        assert "/" not in stem and "." not in stem and "\x00" not in stem
        if "~" in stem:
            assert stem_to_key(stem) is None  # hashed: the header carries the key
        else:
            assert stem_to_key(stem) == key


def test_case_only_differences_differ_case_insensitively() -> None:
    assert key_to_stem("Ab").lower() != key_to_stem("ab").lower()
    assert key_to_stem("AB").lower() != key_to_stem("aB").lower()


def test_long_keys_are_bounded_and_unique() -> None:
    a = key_to_stem("x" * 500)
    b = key_to_stem("x" * 501)
    c = key_to_stem("x" * 499 + ":")
    assert len({a, b, c}) == 3
    for stem in (a, b, c):
        assert len(stem) <= MAX_STEM and "~" in stem
    # The readable prefix never ends in half an escape.
    escaped = key_to_stem(":" * 200)
    prefix = escaped.split("~")[0]
    assert len(prefix) % 3 == 0 and prefix == "_3a" * (len(prefix) // 3)


@pytest.mark.parametrize("bad", ["", 42, None, b"bytes", "\ud800"])
def test_bad_keys_raise(bad: object) -> None:
    with pytest.raises(InvalidEventError):
        key_to_stem(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("stem", ["", "A", "a.b", "a_3", "a_zz", "a_3A", "_c3", "a b", "\u00e9"])
def test_stem_to_key_refuses_stems_it_never_produces(stem: str) -> None:
    assert stem_to_key(stem) is None


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_round_trip(key: str) -> None:
    stem = key_to_stem(key)
    assert set(stem) <= SAFE and len(stem) <= MAX_STEM
    if "~" not in stem:
        assert stem_to_key(stem) == key


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_distinct_keys_distinct_stems(a: str, b: str) -> None:
    if a != b:
        assert key_to_stem(a) != key_to_stem(b)

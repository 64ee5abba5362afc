"""Hostile session keys: every key maps to its own safe file inside the store root.

tests/unit/test_file_store_safety.py writes a fixed list of nasty keys through a store; here
hypothesis searches the whole key space (any Unicode text, NUL, separators, traversal, 4 KB
keys, NFC/NFD twins, case twins) for a key whose file name is unsafe or shared.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sessionledger.eventlog import FileStore, InvalidEventError
from sessionledger.eventlog._filebackend import LOG_SUFFIX, QUARANTINE_SUFFIX, SNAPSHOT_SUFFIX
from sessionledger.eventlog.backend import key_to_stem, stem_to_key

SETTINGS = settings(max_examples=300, deadline=None)
PIECES = [
    "..",
    "/",
    "\\",
    "\x00",
    ":",
    "_",
    ".",
    "~",
    "-",
    "%2e",
    "A",
    "a",
    "\u00e9",
    "e\u0301",
    "\U0001f338",
    "\u2028",
    "\ufeff",
    " ",
]
keys = st.one_of(
    st.text(min_size=1, max_size=60),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map("".join),
    st.builds(
        lambda c, n, tail: c * n + tail,
        st.sampled_from("a/._\u00e9"),
        st.integers(100, 4096),
        st.text(max_size=3),
    ),
)


def usable(key: str) -> bool:
    try:
        key_to_stem(key)
    except InvalidEventError:  # lone surrogates: not text a file name can carry
        return False
    return True


def check_name_is_safe(root: Path, key: str) -> str:
    stem = key_to_stem(key)
    for suffix in (LOG_SUFFIX, QUARANTINE_SUFFIX, SNAPSHOT_SUFFIX):
        name = stem + suffix
        assert "/" not in name and "\x00" not in name and not name.startswith(".")
        assert len(name.encode()) <= 255
        # Only lowercase ASCII: no case folding or Unicode normalisation by a filesystem can
        # make two names one.
        assert name.isascii() and name == name.lower()
        path = os.path.realpath(root / name)
        assert os.path.dirname(path) == os.path.realpath(root)
    back = stem_to_key(stem)
    assert back == key or (back is None and "~" in stem)
    return stem


@SETTINGS
@given(keys, keys)
def test_distinct_keys_get_distinct_safe_names(a: str, b: str) -> None:
    assume(usable(a) and usable(b))
    root = Path("/nonexistent/store")
    stem_a, stem_b = check_name_is_safe(root, a), check_name_is_safe(root, b)
    assert (stem_a == stem_b) == (a == b)


@SETTINGS
@given(st.text(min_size=1, max_size=20))
def test_normalisation_and_case_twins_stay_apart(text: str) -> None:
    assume(usable(text))
    twins = {
        text,
        unicodedata.normalize("NFC", text),
        unicodedata.normalize("NFD", text),
        unicodedata.normalize("NFKC", text),
        text.upper(),
        text.lower(),
        text.casefold(),
    }
    twins = {t for t in twins if t and usable(t)}
    assert len({key_to_stem(t) for t in twins}) == len(twins)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(keys, min_size=1, max_size=6, unique=True))
def test_a_store_keeps_every_key_in_its_own_file(tmp_path: Path, batch: list[str]) -> None:
    batch = [k for k in batch if usable(k)]
    root = tmp_path / f"s{len(os.listdir(tmp_path))}"
    with FileStore(root, durability="none") as store:
        for i, key in enumerate(batch):
            store.session(key).append_message("user", str(i))
    # Nothing was created outside the store's root, and every file in it is a plain log.
    assert all(p.is_dir() and p.name.startswith("s") for p in tmp_path.iterdir())
    files = list(root.iterdir())
    assert len(files) == len(batch)
    assert all(f.is_file() and not f.is_symlink() and f.parent == root for f in files)
    store = FileStore(root, durability="none")
    assert store.keys() == sorted(batch)
    for i, key in enumerate(batch):
        loaded = store.load(key)
        assert loaded.header.key == key and loaded.state.message_dicts[0]["content"] == str(i)


def test_long_keys_sharing_a_prefix() -> None:
    """4 KB keys that differ only in their last character get different (hashed) names."""
    base = "k" * 4095
    stems = {key_to_stem(base + c) for c in "abcdefgh/\x00."}
    assert len(stems) == 11 and all(len(s) <= 180 for s in stems)

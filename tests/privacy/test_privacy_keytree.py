"""The puncturable key tree: destroyed leaves are underivable, every other leaf is unchanged."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionledger.eventlog._keytree import ARITY, DEPTH, MAX_SEQ, KeyTree, child_seed


def _reference_leaf(root: bytes, seq: int) -> bytes:
    """A leaf derived from the root one level at a time, no cache."""
    seed = root
    for depth in range(1, DEPTH + 1):
        seed = child_seed(seed, (seq >> (4 * (DEPTH - depth))) & (ARITY - 1))
    return seed


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, MAX_SEQ), min_size=1, max_size=40), st.integers(0, 5000))
def test_cached_derivation_gives_the_reference_leaves(seqs: list[int], run: int) -> None:
    # Random jumps (the path cache reused partially or not at all) and a sequential run
    # across group boundaries (the writer's pattern) give what the plain derivation gives.
    root = os.urandom(32)
    tree = KeyTree.new(root)
    for seq in [*seqs, *range(run, run + 40), *reversed(seqs)]:
        assert tree.leaf(seq) == _reference_leaf(root, seq)


def test_leaves_are_distinct_and_stable() -> None:
    tree = KeyTree.new(os.urandom(32))
    leaves = [tree.leaf(s) for s in range(300)]
    assert len(set(leaves)) == 300
    again = KeyTree.decode(tree.encode())
    assert [again.leaf(s) for s in range(300)] == leaves
    assert tree.leaf(MAX_SEQ) is not None
    assert tree.leaf(MAX_SEQ + 1) is None
    assert tree.leaf(-1) is None


@settings(max_examples=60, deadline=None)
@given(
    redact=st.lists(st.integers(1, 5000), max_size=6),
    erase=st.one_of(st.none(), st.integers(0, 5000)),
)
def test_puncturing_destroys_exactly_what_it_names(redact: list[int], erase: int | None) -> None:
    tree = KeyTree.new(os.urandom(32))
    probe = sorted({0, 1, 15, 16, 17, 255, 256, 4095, 4096, 5000, 5001, 70000, *redact})
    before = {s: tree.leaf(s) for s in probe}
    for seq in redact:
        tree = tree.punctured(seq, seq)
    if erase is not None:
        tree = tree.punctured(0, erase)
    tree = KeyTree.decode(tree.encode())
    for seq in probe:
        gone = seq in redact or (erase is not None and seq <= erase)
        assert tree.destroyed(seq) == gone
        assert tree.leaf(seq) == (None if gone else before[seq])
    # No node left can derive a destroyed leaf: every remaining node's range avoids them.
    for node in tree.nodes:
        for seq in redact:
            assert not node.start <= seq < node.start + node.span
    assert len(tree.nodes) <= 1 + 16 * 8 * (len(redact) + 1)


def test_only_prefixes_and_single_seqs_are_destroyed() -> None:
    tree = KeyTree.new(os.urandom(32))
    with pytest.raises(ValueError):
        tree.punctured(5, 9)
    with pytest.raises(ValueError):
        KeyTree.new(b"short")

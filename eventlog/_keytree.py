"""A session's data key as a puncturable key tree (pure: no I/O, no cipher).

Every event of an encrypted session has its own 32-byte key: the leaf for its ``seq`` of a
16-ary tree of depth 8 (seqs 0 .. 2**32 - 1) whose root is the session's random data key. A
child seed is ``blake2b(digit, key=parent)``, so a node's seed derives every leaf under it, and
nothing derives a node from its children or siblings.

Invariants:
- A tree is a set of nodes ``(depth, prefix, seed)`` whose ranges are disjoint. A new session's
  tree is its root alone. Destroying the keys of ``lo..hi`` (:meth:`KeyTree.punctured`) replaces
  every node overlapping that range by those of its descendants that lie wholly outside it: what
  remains derives every other leaf, and no leaf of ``lo..hi`` (at most 15 nodes per level and
  range end are kept, so a redaction costs at most 240 seeds).
- Erasing a session destroys ``0..seq`` of its erasure event; redacting a message destroys its
  seq. The tree also records which seqs were destroyed, so a reader can tell "destroyed on
  purpose" (read back as erased or redacted) from "missing" (an error).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Final

import msgspec

ARITY_BITS: Final = 4
ARITY: Final = 1 << ARITY_BITS
DEPTH: Final = 8
MAX_SEQ: Final = (1 << (ARITY_BITS * DEPTH)) - 1
SEED_LEN: Final = 32
_PERSON: Final = b"sl-keytree"
_CACHE_LIMIT: Final = 1024


_DIGITS: Final = [bytes((d,)) for d in range(ARITY)]
#: What a node's seed hashes for :meth:`KeyTree.node_key` (never a child's one digit byte).
_NODE_KEY_INPUT: Final = b"\x10window"


def child_seed(seed: bytes, digit: int) -> bytes:
    """The seed of child ``digit`` (0..15) of a node with ``seed``."""
    return blake2b(_DIGITS[digit], key=seed, digest_size=SEED_LEN, person=_PERSON).digest()


def _keyed(seed: bytes) -> blake2b:
    """blake2b keyed with ``seed``, before any data: ``copy()``, ``update(digit)`` and
    ``digest()`` give :func:`child_seed` without keying a new hash each time."""
    return blake2b(key=seed, digest_size=SEED_LEN, person=_PERSON)


class Node(msgspec.Struct, array_like=True, frozen=True):
    """One node of the tree: it derives the leaves ``start .. start + span - 1``."""

    depth: int
    prefix: int
    seed: bytes

    @property
    def span(self) -> int:
        """How many leaves (seqs) the node covers."""
        return 1 << (ARITY_BITS * (DEPTH - self.depth))

    @property
    def start(self) -> int:
        """The first seq the node covers."""
        return self.prefix * self.span


class TreeRecord(msgspec.Struct, kw_only=True):
    """What a key record holds once unwrapped (its msgpack is what the master key wraps)."""

    nodes: list[Node] = []
    #: Seqs destroyed one by one (redactions), ascending.
    redacted: list[int] = []
    #: Every seq up to this one was destroyed (an erasure); -1: none.
    erased_upto: int = -1


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(TreeRecord).decode


@dataclass(slots=True)
class KeyTree:
    """The remaining nodes of one session's key tree, with a cache of derived inner nodes.

    The cache (keyed blake2b states of inner nodes the tree derived) belongs to this object
    alone; :meth:`punctured` returns a new tree with an empty one, so dropping the old tree
    drops every cached state that could derive a destroyed leaf.
    """

    nodes: list[Node]
    redacted: list[int] = field(default_factory=list)
    erased_upto: int = -1
    _starts: list[int] = field(default_factory=list)
    #: Group (``seq >> ARITY_BITS``) -> keyed state of the depth-7 node deriving its 16 leaves.
    _groups: dict[int, blake2b] = field(default_factory=dict)
    #: Per depth, the last inner node derived there: ``(prefix, keyed state)``, so the next
    #: group derives from its nearest cached ancestor (siblings cost one step each).
    _path: list[tuple[int, blake2b] | None] = field(default_factory=lambda: [None] * DEPTH)
    #: The last group used, and its state (the writer's next seq is almost always in it).
    _group: int = -1
    _group_state: blake2b | None = None

    def __post_init__(self) -> None:
        self.nodes.sort(key=lambda n: n.start)
        self._starts = [n.start for n in self.nodes]

    @classmethod
    def new(cls, root: bytes) -> KeyTree:
        """A whole tree from a random root seed."""
        if len(root) != SEED_LEN:
            raise ValueError(f"a root seed has {SEED_LEN} bytes, not {len(root)}")
        return cls([Node(0, 0, root)])

    @classmethod
    def decode(cls, data: bytes) -> KeyTree:
        """The tree a record's unwrapped bytes hold (raises ``msgspec.DecodeError``)."""
        rec = _decode(data)
        for node in rec.nodes:
            if not (0 <= node.depth <= DEPTH and len(node.seed) == SEED_LEN):
                raise msgspec.DecodeError("a key tree node is malformed")
            if not 0 <= node.prefix < ARITY**node.depth:
                raise msgspec.DecodeError("a key tree node is out of range")
        return cls(list(rec.nodes), list(rec.redacted), rec.erased_upto)

    def encode(self) -> bytes:
        """The bytes a record wraps."""
        return _encode(
            TreeRecord(nodes=self.nodes, redacted=self.redacted, erased_upto=self.erased_upto)
        )

    def destroyed(self, seq: int) -> bool:
        """Whether the key of ``seq`` was destroyed on purpose (erased or redacted)."""
        if seq <= self.erased_upto:
            return True
        i = bisect.bisect_left(self.redacted, seq)
        return i < len(self.redacted) and self.redacted[i] == seq

    def leaf(self, seq: int) -> bytes | None:
        """The key of event ``seq``, or None when no remaining node derives it."""
        group = seq >> ARITY_BITS
        state = self._group_state if group == self._group else self._groups.get(group)
        if state is None:
            return self._leaf_uncached(seq)
        if group != self._group:
            self._group, self._group_state = group, state
        h = state.copy()
        h.update(_DIGITS[seq & (ARITY - 1)])
        return h.digest()

    def node_key(self, depth: int, prefix: int) -> bytes | None:
        """A key derived from the seed of node ``(depth, prefix)`` (the leaves ``prefix *
        16**(8 - depth)`` on), or None when no remaining node derives that node: once any
        leaf under it was destroyed, this key is gone with it (every ancestor of a destroyed
        leaf is destroyed too).

        It is ``blake2b(b"\\x10window", key=<that node's seed>, person="sl-keytree")``: no
        child derivation hashes that input (a child's is one digit byte), so it derives
        nothing else."""
        if not 0 <= depth < DEPTH or not 0 <= prefix < ARITY**depth:
            return None
        start = prefix << (ARITY_BITS * (DEPTH - depth))
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return None
        node = self.nodes[i]
        if node.depth > depth or start >= node.start + node.span:
            return None  # split (a leaf under the node was destroyed), or not in the tree
        seed = node.seed
        for d in range(node.depth + 1, depth + 1):
            seed = child_seed(seed, (prefix >> (ARITY_BITS * (depth - d))) & (ARITY - 1))
        return blake2b(_NODE_KEY_INPUT, key=seed, digest_size=SEED_LEN, person=_PERSON).digest()

    def _leaf_uncached(self, seq: int) -> bytes | None:
        if not 0 <= seq <= MAX_SEQ:
            return None
        i = bisect.bisect_right(self._starts, seq) - 1
        if i < 0:
            return None
        node = self.nodes[i]
        if seq >= node.start + node.span:
            return None
        if node.depth == DEPTH:
            return node.seed  # a lone leaf left by a redaction nearby (not cached)
        # Start from the deepest inner node on seq's path already derived, else the node.
        depth, state = node.depth, None
        path = self._path
        for d in range(DEPTH - 1, node.depth, -1):
            cached = path[d]
            if cached is not None and cached[0] == seq >> (ARITY_BITS * (DEPTH - d)):
                depth, state = d, cached[1]
                break
        if state is None:
            state = _keyed(node.seed)
        for d in range(depth + 1, DEPTH):
            h = state.copy()
            h.update(_DIGITS[(seq >> (ARITY_BITS * (DEPTH - d))) & (ARITY - 1)])
            state = _keyed(h.digest())
            path[d] = (seq >> (ARITY_BITS * (DEPTH - d)), state)
        group = seq >> ARITY_BITS
        if len(self._groups) >= _CACHE_LIMIT:
            self._groups.clear()
        self._groups[group] = state
        self._group, self._group_state = group, state
        h = state.copy()
        h.update(_DIGITS[seq & (ARITY - 1)])
        return h.digest()

    def punctured(self, lo: int, hi: int) -> KeyTree:
        """A tree with the keys of seqs ``lo..hi`` destroyed (and recorded as destroyed)."""
        if lo > hi or (lo != 0 and lo != hi):
            raise ValueError(f"only 0..seq or one seq can be destroyed, not {lo}..{hi}")
        kept: list[Node] = []
        for node in self.nodes:
            _split(node, lo, hi, kept)
        redacted = list(self.redacted)
        erased = self.erased_upto
        if lo == 0:
            erased = max(erased, hi)
            redacted = [s for s in redacted if s > erased]
        elif not self.destroyed(lo):
            bisect.insort(redacted, lo)
        return KeyTree(kept, redacted, erased)


def _split(node: Node, lo: int, hi: int, out: list[Node]) -> None:
    start, end = node.start, node.start + node.span - 1
    if end < lo or start > hi:
        out.append(node)
        return
    if lo <= start and end <= hi:
        return  # wholly destroyed
    for digit in range(ARITY):
        _split(
            Node(node.depth + 1, node.prefix * ARITY + digit, child_seed(node.seed, digit)),
            lo,
            hi,
            out,
        )

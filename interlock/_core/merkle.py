"""RFC 9162 (Certificate Transparency 2.0) Merkle tree hashing: roots, proofs, appends.

The receipt log is a Merkle tree over its receipts, hashed exactly as RFC 9162 §2.1 says,
so any SHA-256 implementation can check it: a leaf is `SHA-256(0x00 || data)`, a node
`SHA-256(0x01 || left || right)`, and the tree of n leaves splits at the largest power of
two smaller than n. The 0x00/0x01 prefixes keep a leaf from passing for a node.

Everything here works on leaf HASHES (32 bytes each), never on the leaves' data: a caller
hashes each receipt once with `leaf_hash` and keeps the hash. `Frontier` is the compact
state a writer needs to append and to compute the root in O(log n) hashes; the proof
functions read the whole list of leaf hashes (a verifier's job, not the hot path).

The verifiers follow RFC 9162 §2.1.3.2 and §2.1.4.2 step by step and answer False,
never raise, whatever they are given: a proof read from a store or a file is untrusted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Final

HASH_SIZE: Final = 32
"""Bytes in every hash here (SHA-256)."""

EMPTY_ROOT: Final[bytes] = hashlib.sha256(b"").digest()
"""The root of the tree of no leaves: SHA-256 of the empty string (RFC 9162 §2.1.1)."""


def leaf_hash(data: bytes) -> bytes:
    """The hash of one leaf: SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than `n` (n > 1): where RFC 9162 splits a tree."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle Tree Hash (RFC 9162 §2.1.1) of the tree whose leaf hashes are `leaves`.

    Computed level by level (an odd last node moves up unpaired), which builds the same
    tree as the RFC's recursive split, in n - 1 node hashes and no recursion.
    """
    level = list(leaves)
    if not level:
        return EMPTY_ROOT
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


class Frontier:
    """The compact state of a tree: its size and the roots of its perfect subtrees.

    A tree of `size` leaves is, left to right, one perfect subtree per set bit of `size`
    (largest first); their roots are all a writer needs to append a leaf or to compute
    the tree's root, in O(log size) hashes. `hashes` are those roots, left to right.
    """

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"a frontier's size is a whole number >= 0, got {size!r}")
        hashes = list(hashes)
        expected = bin(size).count("1")
        if len(hashes) != expected:
            raise ValueError(
                f"a frontier of size {size} holds {expected} subtree hashes (one per set bit "
                f"of the size), got {len(hashes)}"
            )
        for i, h in enumerate(hashes):
            if not isinstance(h, bytes) or len(h) != HASH_SIZE:
                raise ValueError(f"a frontier's hash {i} is not {HASH_SIZE} bytes")
        self._size = size
        self._hashes = hashes

    def __repr__(self) -> str:
        return f"Frontier(size={self._size}, root={self.root().hex()})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return self._size == other._size and self._hashes == other._hashes

    __hash__ = None  # type: ignore[assignment]  # mutable: appends change it

    @property
    def size(self) -> int:
        """How many leaves the tree holds."""
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """The roots of the perfect subtrees, left to right (largest first)."""
        return tuple(self._hashes)

    def append(self, leaf_hash: bytes) -> None:
        """Add the leaf whose hash is `leaf_hash` at the right end of the tree."""
        if not isinstance(leaf_hash, bytes) or len(leaf_hash) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {leaf_hash!r}")
        self._hashes.append(leaf_hash)
        # Each trailing set bit of the old size is a perfect subtree the same height as the
        # one just completed: merge them, as binary addition carries.
        carry = self._size
        while carry & 1:
            right = self._hashes.pop()
            self._hashes[-1] = node_hash(self._hashes[-1], right)
            carry >>= 1
        self._size += 1

    def root(self) -> bytes:
        """The tree's root: `root()` of every leaf appended (EMPTY_ROOT when none)."""
        if not self._hashes:
            return EMPTY_ROOT
        r = self._hashes[-1]
        for h in reversed(self._hashes[:-1]):
            r = node_hash(h, r)
        return r

    def to_text(self) -> str:
        """The frontier as compact JSON: `{"size": n, "hashes": [hex, ...]}`."""
        return json.dumps(
            {"size": self._size, "hashes": [h.hex() for h in self._hashes]},
            separators=(",", ":"),
        )

    @classmethod
    def from_text(cls, text: str) -> Frontier:
        """The frontier `to_text` wrote; `ValueError` saying what is wrong otherwise."""
        try:
            data = json.loads(text)
        except (ValueError, TypeError, RecursionError):
            # Nested past the parser's limit is text that is not a frontier like any other.
            raise ValueError("a frontier's text is not JSON") from None
        if not isinstance(data, dict) or set(data) != {"size", "hashes"}:
            raise ValueError('a frontier\'s text is JSON {"size": n, "hashes": [hex, ...]}')
        hexes = data["hashes"]
        if not isinstance(hexes, list) or not all(isinstance(h, str) for h in hexes):
            raise ValueError("a frontier's hashes are a list of hex strings")
        try:
            hashes = [bytes.fromhex(h) for h in hexes]
        except ValueError:
            raise ValueError("a frontier's hashes are not all hex") from None
        return cls(data["size"], hashes)


def _checked_leaves(leaves: Sequence[bytes]) -> None:
    for i, h in enumerate(leaves):
        if not isinstance(h, bytes) or len(h) != HASH_SIZE:
            raise ValueError(f"leaf hash {i} is not {HASH_SIZE} bytes")


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """The audit path PATH(index, D[n]) of RFC 9162 §2.1.3.1 in the tree of `leaves`.

    From the leaf's sibling up to the root's other child. `ValueError` when `index` is
    not a leaf of the tree.
    """
    n = len(leaves)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ValueError(f"no leaf {index!r} in a tree of {n} leaves")
    _checked_leaves(leaves)
    top_down: list[bytes] = []
    lo, hi = 0, n
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            top_down.append(root(leaves[lo + k : hi]))
            hi = lo + k
        else:
            top_down.append(root(leaves[lo : lo + k]))
            lo += k
    return top_down[::-1]


def consistency_proof(size1: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(size1, D[n]) of RFC 9162 §2.1.4.1: the tree of `leaves` extends its first
    `size1` leaves. Empty when size1 is 0 or n; `ValueError` when size1 is not in 0..n."""
    n = len(leaves)
    if isinstance(size1, bool) or not isinstance(size1, int) or not 0 <= size1 <= n:
        raise ValueError(f"no tree of {size1!r} leaves inside a tree of {n} leaves")
    _checked_leaves(leaves)
    if size1 in (0, n):
        return []
    # SUBPROOF(m, D[lo:hi], b), unrolled: each step descends into one half and records the
    # other half's root; where the old tree is a whole subtree, that subtree's root closes
    # the proof unless it is the old tree itself (b: the verifier already has that root).
    top_down: list[bytes] = []
    lo, hi, whole = 0, n, True
    while True:
        if size1 - lo == hi - lo:
            if not whole:
                top_down.append(root(leaves[lo:hi]))
            break
        k = _split(hi - lo)
        if size1 - lo <= k:
            top_down.append(root(leaves[lo + k : hi]))
            hi = lo + k
        else:
            top_down.append(root(leaves[lo : lo + k]))
            lo += k
            whole = False
    return top_down[::-1]


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether `proof` shows the leaf hash `leaf` at `index` in the tree of `size` leaves
    whose root is `root` (RFC 9162 §2.1.3.2). False on any mismatch or malformed input."""
    try:
        path = list(proof)
    except TypeError:
        return False
    if not (_is_hash(leaf) and _is_hash(root) and _is_count(index) and _is_count(size)):
        return False
    if index >= size or not all(_is_hash(p) for p in path):
        return False
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether `proof` shows the tree of `size2` leaves with root `root2` extends the tree
    of `size1` leaves with root `root1` (RFC 9162 §2.1.4.2). Equal sizes need equal roots
    and an empty proof; size1 0 is consistent with anything, by an empty proof. False on
    any mismatch or malformed input."""
    try:
        path = list(proof)
    except TypeError:
        return False
    if not (_is_count(size1) and _is_count(size2) and _is_hash(root1) and _is_hash(root2)):
        return False
    if size1 > size2 or not all(_is_hash(p) for p in path):
        return False
    if size1 == size2:
        return not path and root1 == root2
    if size1 == 0:
        return not path
    if not path:
        return False
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == root1 and sr == root2

"""RFC 9162 Merkle hashing: known answers from the reference code, then every size and index.

The known-answer vectors are those of the Certificate Transparency reference code, as kept
by transparency-dev/merkle (Apache-2.0):
- leaves, node hashes, roots for sizes 0..8 and the compact trees:
  https://github.com/transparency-dev/merkle/blob/main/testonly/constants.go
- inclusion and consistency proofs:
  https://github.com/transparency-dev/merkle/blob/main/proof/verify_test.go
(the same 8-leaf tree as google/certificate-transparency's merkle_tree_test.cc).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest

from interlock._core.merkle import (
    EMPTY_ROOT,
    Frontier,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
]
LEAVES = [leaf_hash(d) for d in LEAF_INPUTS]

NODE_HASHES = [
    [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
        "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    ],
    [
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    ],
    [
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    ["5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"],
]

ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]

# (level, index) into NODE_HASHES, per tree size: constants.go's CompactTrees.
COMPACT: list[list[tuple[int, int]]] = [
    [],
    [(0, 0)],
    [(1, 0)],
    [(1, 0), (0, 2)],
    [(2, 0)],
    [(2, 0), (0, 4)],
    [(2, 0), (1, 2)],
    [(2, 0), (1, 2), (0, 6)],
    [(3, 0)],
]

# verify_test.go's inclusionProofs: (leaf index from 1 as the Go file counts, size, path).
INCLUSION = [
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        2,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (1, 1, []),
]

# verify_test.go's consistencyProofs: (size1, size2, proof).
CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]

SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def _h(hexes: Sequence[str]) -> list[bytes]:
    return [bytes.fromhex(h) for h in hexes]


def _mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.1 written as the RFC does (recursively): the reference for `root`."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _flipped(proof: Sequence[bytes], element: int, bit: int) -> list[bytes]:
    changed = bytearray(proof[element])
    changed[bit // 8] ^= 1 << (bit % 8)
    return [*proof[:element], bytes(changed), *proof[element + 1 :]]


def _path_shape(index: int, size: int) -> list[bool]:
    """The sides of an inclusion path, leaf up (True: the sibling is on the left), as
    §2.1.3.2 walks them: two sizes with the same shape take the same proof."""
    sides = []
    fn, sn = index, size - 1
    while sn:
        sides.append(bool(fn & 1) or fn == sn)
        if fn == sn and not fn & 1:
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        fn, sn = fn >> 1, sn >> 1
    return sides


def _consistency_shape(size1: int, size2: int) -> tuple[int, list[bool]]:
    """The proof's length and the sides §2.1.4.2 combines it on, for size1 < size2."""
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    sides = []
    while sn:
        sides.append(bool(fn & 1) or fn == sn)
        if fn == sn and not fn & 1:
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        fn, sn = fn >> 1, sn >> 1
    return len(consistency_proof(size1, BIG[:size2])), sides


BIG = [leaf_hash(i.to_bytes(4, "big")) for i in range(128)]
BIG_ROOTS = [root(BIG[:n]) for n in range(129)]


# -- known answers --------------------------------------------------------------------


def test_leaf_and_node_hashes_are_the_reference_ones() -> None:
    """Leaf and node hashes equal the reference tree's level 0 and level 1."""
    assert [h.hex() for h in LEAVES] == NODE_HASHES[0]
    level1 = [node_hash(LEAVES[i], LEAVES[i + 1]).hex() for i in range(0, 8, 2)]
    assert level1 == NODE_HASHES[1]
    assert EMPTY_ROOT.hex() == ROOTS[0]


def test_roots_of_sizes_0_to_8_are_the_reference_ones() -> None:
    """root() of the first n reference leaves is the published root, n = 0..8."""
    assert [root(LEAVES[:n]).hex() for n in range(9)] == ROOTS


def test_root_equals_the_rfc_recursive_definition_at_every_size_to_70() -> None:
    """The level-by-level root equals the RFC's recursive split for sizes 0..70."""
    for n in range(71):
        assert BIG_ROOTS[n] == _mth(BIG[:n]), n


def test_frontier_holds_the_reference_compact_trees() -> None:
    """After each append the frontier's hashes are constants.go's compact tree."""
    frontier = Frontier()
    assert frontier.to_text() == '{"size":0,"hashes":[]}' and frontier.root() == EMPTY_ROOT
    for n in range(1, 9):
        frontier.append(LEAVES[n - 1])
        expected = [NODE_HASHES[level][i] for level, i in COMPACT[n]]
        assert [h.hex() for h in frontier.hashes] == expected, n
        assert frontier.root().hex() == ROOTS[n]


@pytest.mark.parametrize(("leaf", "size", "path"), INCLUSION)
def test_inclusion_proofs_are_the_reference_ones(leaf: int, size: int, path: list[str]) -> None:
    """inclusion_proof builds the published path, which verifies against the root."""
    proof = inclusion_proof(leaf - 1, LEAVES[:size])
    assert proof == _h(path)
    assert verify_inclusion(LEAVES[leaf - 1], leaf - 1, size, proof, bytes.fromhex(ROOTS[size]))


@pytest.mark.parametrize(("size1", "size2", "path"), CONSISTENCY)
def test_consistency_proofs_are_the_reference_ones(size1: int, size2: int, path: list[str]) -> None:
    """consistency_proof builds the published proof, which verifies between the roots."""
    proof = consistency_proof(size1, LEAVES[:size2])
    assert proof == _h(path)
    root1, root2 = bytes.fromhex(ROOTS[size1]), bytes.fromhex(ROOTS[size2])
    assert verify_consistency(size1, size2, root1, root2, proof)


def test_consistency_edge_cases_of_the_reference_verifier() -> None:
    """verify_test.go's TestVerifyConsistency table: equal sizes, size 0, time travel."""
    r1, r2 = hashlib.sha256(b"don't care 1").digest(), hashlib.sha256(b"don't care 2").digest()
    assert not verify_consistency(0, 0, r1, r2, [])
    assert not verify_consistency(1, 1, r1, r2, [])
    assert verify_consistency(0, 0, r1, r1, [])
    assert verify_consistency(0, 1, r1, r2, [])
    assert verify_consistency(1, 1, r2, r2, [])
    assert not verify_consistency(1, 0, r1, r2, [])
    assert not verify_consistency(2, 1, r1, r2, [])
    assert not verify_consistency(1, 2, r1, r2, [])
    assert not verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])
    assert not verify_consistency(0, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])
    assert not verify_consistency(1, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])


def test_single_leaf_inclusion_of_the_reference_verifier() -> None:
    """verify_test.go's single-entry and empty-tree cases: only leaf == root verifies."""
    h = leaf_hash(b"data")
    assert verify_inclusion(h, 0, 1, [], h)
    assert not verify_inclusion(h, 0, 1, [], b"")
    assert not verify_inclusion(b"", 0, 1, [], h)
    for index, size in [(0, 0), (0, 1), (1, 0), (2, 1)]:
        assert not verify_inclusion(SOME_HASH, index, size, [], EMPTY_ROOT)
        assert not verify_inclusion(SOME_HASH, index, size, [], b"")


# -- every size, every index ----------------------------------------------------------


def test_every_inclusion_proof_to_size_70_verifies_and_no_corruption_does() -> None:
    """Each leaf of each tree of 1..70 leaves proves in; a flipped bit in any element, a
    wrong index, size, leaf or root, a removed, added or inserted element each fail."""
    for size in range(1, 71):
        leaves, top = BIG[:size], BIG_ROOTS[size]
        for index in range(size):
            proof = inclusion_proof(index, leaves)
            leaf = leaves[index]
            shape = _path_shape(index, size)
            assert verify_inclusion(leaf, index, size, proof, top), (index, size)
            for e in range(len(proof)):
                # Every bit for small trees; one bit per element elsewhere, its place moving
                # with the index so the run covers all 256 positions.
                bits = range(256) if size <= 8 else [(index * 31 + e * 7) % 256]
                for bit in bits:
                    assert not verify_inclusion(leaf, index, size, _flipped(proof, e, bit), top)
            for wrong_index in {index - 1, index + 1, index ^ 2, size}:
                if wrong_index >= 0 and wrong_index != index:
                    assert not verify_inclusion(leaf, wrong_index, size, proof, top)
            for wrong_size in {size - 1, size + 1, size * 2, size // 2}:
                # The root does not commit to the size (test_the_root_does_not_commit_to_
                # the_size): a wrong size whose path has the same shape can pass, so the
                # size must come from the signed head. Any other wrong size fails.
                if index < wrong_size and _path_shape(index, wrong_size) == shape:
                    continue
                assert not verify_inclusion(leaf, index, wrong_size, proof, top)
            other = BIG[(index + 1) % size] if size > 1 else SOME_HASH
            assert not verify_inclusion(other, index, size, proof, top)
            assert not verify_inclusion(leaf, index, size, proof, SOME_HASH)
            assert not verify_inclusion(leaf, index, size, [*proof, top], top)
            assert not verify_inclusion(leaf, index, size, [top, *proof], top)
            if proof:
                assert not verify_inclusion(leaf, index, size, proof[:-1], top)
            if len(proof) > 1:
                inserted = [proof[0], SOME_HASH, *proof[1:]]
                assert not verify_inclusion(leaf, index, size, inserted, top)


def test_every_consistency_proof_to_size_40_verifies_and_no_corruption_does() -> None:
    """Each pair size1 <= size2 <= 40 proves consistent; wrong sizes, swapped or wrong
    roots, a flipped bit, a missing, extra or repeated element each fail."""
    for size2 in range(41):
        for size1 in range(size2 + 1):
            proof = consistency_proof(size1, BIG[:size2])
            r1, r2 = BIG_ROOTS[size1], BIG_ROOTS[size2]
            assert verify_consistency(size1, size2, r1, r2, proof), (size1, size2)
            if not proof:  # size1 0 or size1 == size2: nothing to corrupt but the roots
                assert size1 in (0, size2)
                if size1 == size2:
                    assert not verify_consistency(size1, size2, r1, SOME_HASH, proof)
                continue
            shape = _consistency_shape(size1, size2)
            for wrong1 in {size1 - 1, size1 + 1, size1 ^ 2}:
                if 0 < wrong1 != size1:
                    assert not verify_consistency(wrong1, size2, r1, r2, proof)
            for wrong2 in {size2 - 1, size2 + 1, size2 * 2, size2 // 2}:
                # As for inclusion: only a size2 of the same proof shape may pass.
                if size1 < wrong2 and _consistency_shape(size1, wrong2) == shape:
                    continue
                assert not verify_consistency(size1, wrong2, r1, r2, proof)
            assert not verify_consistency(size1, size2, r2, r1, proof)
            assert not verify_consistency(size1, size2, SOME_HASH, r2, proof)
            assert not verify_consistency(size1, size2, r1, SOME_HASH, proof)
            assert not verify_consistency(size1, size2, r1, r2, [])
            assert not verify_consistency(size1, size2, r1, r2, proof[:-1])
            for extra in (r1, r2):
                assert not verify_consistency(size1, size2, r1, r2, [*proof, extra])
                assert not verify_consistency(size1, size2, r1, r2, [extra, *proof])
            assert not verify_consistency(size1, size2, r1, r2, [proof[0], *proof])
            for e in range(len(proof)):
                bit = (size1 * 13 + size2 * 5 + e) % 256
                assert not verify_consistency(size1, size2, r1, r2, _flipped(proof, e, bit))


def test_a_changed_leaf_before_size1_breaks_consistency() -> None:
    """A log that rewrote any of the first size1 leaves cannot prove it extends the old
    head: its own consistency proof fails against the old root, for all pairs to 40."""
    for size2 in range(1, 41):
        for size1 in range(1, size2 + 1):
            old_root = BIG_ROOTS[size1]
            # Every leaf while the trees are small; the first, middle and last after.
            changed_at = range(size1) if size2 <= 16 else {0, size1 // 2, size1 - 1}
            for j in changed_at:
                rewritten = [*BIG[:j], leaf_hash(b"rewritten"), *BIG[j + 1 : size2]]
                new_root = root(rewritten)
                proof = consistency_proof(size1, rewritten)
                assert not verify_consistency(size1, size2, old_root, new_root, proof), (
                    size1,
                    size2,
                    j,
                )


def test_the_root_does_not_commit_to_the_size() -> None:
    """RFC 9162's root alone does not fix the tree's size: leaf 0's proof in the tree of 3
    verifies as a proof in a tree of 4 whose last two leaves hash to leaf 2. So the size a
    proof is checked at must come from a signed head, never from the proof's bearer."""
    proof = inclusion_proof(0, LEAVES[:3])
    top = bytes.fromhex(ROOTS[3])
    assert verify_inclusion(LEAVES[0], 0, 3, proof, top)
    assert verify_inclusion(LEAVES[0], 0, 4, proof, top)
    assert not verify_inclusion(LEAVES[0], 0, 5, proof, top)


def test_frontier_matches_root_and_round_trips_at_every_size() -> None:
    """After each of 70 appends the frontier's root is root() of the leaves so far, and
    its text reads back to an equal frontier that keeps appending the same way."""
    frontier = Frontier()
    for n in range(71):
        assert frontier.size == n
        assert frontier.root() == BIG_ROOTS[n]
        assert len(frontier.hashes) == bin(n).count("1")
        again = Frontier.from_text(frontier.to_text())
        assert again == frontier and again.root() == BIG_ROOTS[n]
        assert Frontier(n, frontier.hashes) == frontier
        if n < 70:
            again.append(BIG[n])
            frontier.append(BIG[n])
            assert again == frontier


def test_a_large_tree_is_fast_and_agrees_with_its_frontier() -> None:
    """100,000 leaves: root() and 100,000 appends agree (and neither recurses per leaf)."""
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(100_000)]
    frontier = Frontier()
    for h in leaves:
        frontier.append(h)
    assert frontier.root() == root(leaves)
    assert verify_inclusion(
        leaves[77_777], 77_777, 100_000, inclusion_proof(77_777, leaves), frontier.root()
    )


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not json", "not JSON"),
        ("[]", "JSON"),
        ('{"size": 1}', "JSON"),
        ('{"size": 1, "hashes": [], "x": 1}', "JSON"),
        ('{"size": 3, "hashes": ["' + "00" * 32 + '"]}', "holds 2 subtree hashes"),
        ('{"size": 1, "hashes": ["zz"]}', "not all hex"),
        ('{"size": 1, "hashes": ["00"]}', "not 32 bytes"),
        ('{"size": 1, "hashes": [1]}', "list of hex strings"),
        ('{"size": -1, "hashes": []}', "whole number"),
        ('{"size": true, "hashes": ["' + "00" * 32 + '"]}', "whole number"),
        ('{"size": 1.0, "hashes": ["' + "00" * 32 + '"]}', "whole number"),
    ],
)
def test_a_text_that_is_not_a_frontier_is_refused_in_words(text: str, words: str) -> None:
    """from_text names what is wrong with a text that is not a frontier."""
    with pytest.raises(ValueError, match=words):
        Frontier.from_text(text)


def test_frontier_refuses_a_leaf_hash_that_is_not_32_bytes() -> None:
    """append takes only 32-byte hashes, so a caller cannot append raw data by mistake."""
    frontier = Frontier()
    with pytest.raises(ValueError, match="32 bytes"):
        frontier.append(b"receipt text")
    assert frontier.size == 0


def test_proof_builders_refuse_positions_outside_the_tree() -> None:
    """inclusion_proof and consistency_proof say which position is not in the tree."""
    with pytest.raises(ValueError, match="no leaf 8 in a tree of 8 leaves"):
        inclusion_proof(8, LEAVES)
    with pytest.raises(ValueError, match="no leaf -1"):
        inclusion_proof(-1, LEAVES)
    with pytest.raises(ValueError, match="no tree of 9 leaves inside a tree of 8"):
        consistency_proof(9, LEAVES)
    with pytest.raises(ValueError, match="leaf hash 1 is not 32 bytes"):
        inclusion_proof(0, [LEAVES[0], b"short"])


def test_verifiers_answer_false_and_never_raise_on_malformed_input() -> None:
    """Untrusted proofs of the wrong type or shape are a False, not an exception."""
    good = inclusion_proof(5, LEAVES)
    top = bytes.fromhex(ROOTS[8])
    bad_inputs: list[tuple[object, object, object, object, object]] = [
        (LEAVES[5], 5, 8, None, top),
        (LEAVES[5], 5, 8, [*good[:-1], "d37e"], top),
        (LEAVES[5], 5, 8, [*good[:-1], good[-1][:31]], top),
        (LEAVES[5], -1, 8, good, top),
        (LEAVES[5], 5, -8, good, top),
        (LEAVES[5], True, 8, good, top),
        (LEAVES[5], 5.0, 8, good, top),
        (LEAVES[5].hex(), 5, 8, good, top),
        (LEAVES[5], 5, 8, good, top.hex()),
        (LEAVES[5], 5, 8, 12, top),
    ]
    for args in bad_inputs:
        assert verify_inclusion(*args) is False  # type: ignore[arg-type]
    proof = consistency_proof(6, LEAVES)
    r6, r8 = bytes.fromhex(ROOTS[6]), bytes.fromhex(ROOTS[8])
    assert verify_consistency(6, 8, r6, r8, proof) is True
    bad_consistency: list[tuple[object, object, object, object, object]] = [
        (6, 8, r6, r8, None),
        (6, 8, r6, r8, [*proof[:-1], b""]),
        (-6, 8, r6, r8, proof),
        (6, 8.0, r6, r8, proof),
        (6, 8, r6.hex(), r8, proof),
        (6, 8, r6, r8, 3),
        (False, 8, r6, r8, proof),
    ]
    for args in bad_consistency:
        assert verify_consistency(*args) is False  # type: ignore[arg-type]

"""`python -m interlock proof` and `verify --keys --anchor` as their own processes.

The proof is checked here the way docs/receipts.md tells anyone to: SHA-256 and Ed25519
only (`hashlib` and `cryptography`, none of interlock), so another implementation can.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pycose.keys.curves import Ed25519
from pycose.keys.okp import OKPKey
from pycose.messages.sign1message import Sign1Message

from interlock import SigningKey
from tests.unit.test_receipt_log import KEY, World, _keys

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    return subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip


def _raw(key: SigningKey) -> Ed25519PublicKey:
    """The public key as `cryptography` alone knows it (from its 32 raw bytes)."""
    return Ed25519PublicKey.from_public_bytes(key.public.raw)


def _sig_structure(payload: bytes, key_id: str, content_type: str) -> bytes:
    """COSE's Sig_structure for Signature1 (RFC 9052 §4.4), CBOR written out by hand."""

    def head(major: int, n: int) -> bytes:
        if n < 24:
            return bytes([major << 5 | n])
        if n < 256:
            return bytes([major << 5 | 24, n])
        if n < 65536:
            return bytes([major << 5 | 25]) + n.to_bytes(2, "big")
        return bytes([major << 5 | 26]) + n.to_bytes(4, "big")

    def text(s: str) -> bytes:
        return head(3, len(s.encode())) + s.encode()

    def data(b: bytes) -> bytes:
        return head(2, len(b)) + b

    kid = key_id.encode()
    # {1: -8 (EdDSA), 3: content type, 4: key id}
    protected = bytes([0xA3, 0x01, 0x27, 0x03]) + text(content_type) + bytes([0x04]) + data(kid)
    return bytes([0x84]) + text("Signature1") + data(protected) + data(b"") + data(payload)


def _check(proof: dict[str, object], public: Ed25519PublicKey) -> None:
    """The documented check: signatures, leaf hash, inclusion path to the head's root."""
    receipt = proof["receipt"]
    head = proof["tree_head"]
    assert isinstance(receipt, dict) and isinstance(head, dict)
    body = str(receipt["body"]).encode()
    head_body = str(head["body"]).encode()
    key_id = json.loads(body)["key_id"]
    for payload, signature, kind in (
        (body, receipt["signature"], "application/interlock-receipt+json"),
        (head_body, head["signature"], "application/interlock-tree-head+json"),
    ):
        public.verify(
            base64.urlsafe_b64decode(str(signature)), _sig_structure(payload, key_id, kind)
        )
    leaf = hashlib.sha256(b"\x00" + body).digest()
    assert leaf.hex() == proof["leaf_hash"]
    index, size = int(str(proof["leaf_index"])), int(json.loads(head_body)["size"])
    fn, sn, r = index, size - 1, leaf
    for sibling in (bytes.fromhex(str(h)) for h in proof["inclusion_proof"]):  # type: ignore[attr-defined]
        assert sn != 0
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + sibling + r).digest()
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = hashlib.sha256(b"\x01" + r + sibling).digest()
        fn, sn = fn >> 1, sn >> 1
    assert sn == 0 and r.hex() == json.loads(head_body)["root"]


def test_a_proof_checks_with_sha256_and_ed25519_alone(tmp_path: Path) -> None:
    """Every action's proof from the command checks by the documented procedure; a proof
    with its receipt edited, or checked under another key, does not."""
    world = World(tmp_path)
    world.store.close()
    for aid in world.actions:
        done = _cli("proof", aid, str(world.path), "--json")
        assert done.returncode == 0, done.stderr
        proof = json.loads(done.stdout)
        _check(proof, _raw(KEY))
    edited = json.loads(json.dumps(proof))
    edited["receipt"]["body"] = edited["receipt"]["body"].replace('"amount":1000', '"amount":10')
    try:
        _check(edited, _raw(KEY))
        raise AssertionError("an edited receipt passed the check")
    except InvalidSignature:
        pass
    try:
        _check(proof, _raw(SigningKey.generate()))
        raise AssertionError("another key's check passed")
    except InvalidSignature:
        pass


def test_the_proofs_cose_exports_verify_in_pycose(tmp_path: Path) -> None:
    """The proof's COSE_Sign1 exports of the receipt and the head are the same signatures:
    an independent COSE library decodes and verifies them with the public key."""
    world = World(tmp_path, sends=2)
    world.store.close()
    done = _cli("proof", world.actions[0], str(world.path), "--json")
    proof = json.loads(done.stdout)
    for part in ("receipt", "tree_head"):
        message = Sign1Message.decode(base64.urlsafe_b64decode(proof[part]["cose_sign1"]))
        assert message.payload == proof[part]["body"].encode()
        message.key = OKPKey(crv=Ed25519, x=KEY.public.raw)
        assert message.verify_signature()
        message.key = OKPKey(crv=Ed25519, x=SigningKey.generate().public.raw)
        assert not message.verify_signature()


def test_proof_of_what_has_no_logged_receipt_says_so(tmp_path: Path) -> None:
    """An action the store lacks, and one whose receipt is not in a head yet: exit 1, in
    words."""
    world = World(tmp_path, sends=1)
    world.gate.log.every = 100
    late = world.send()
    world.store.close()
    missing = _cli("proof", "act_nothing_here", str(world.path))
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "is not in the store" in missing.stderr
    unlogged = _cli("proof", late, str(world.path))
    assert unlogged.returncode == 1 and "not in a signed tree head yet" in unlogged.stderr


def test_verify_with_the_key_list_and_the_anchor(tmp_path: Path) -> None:
    """`verify --keys --anchor` holds on a whole store; after a writer holding the key
    rewrites a receipt and rebuilds the heads, it fails naming the receipt, while verify
    without the anchor still holds (what only the anchor can see)."""
    world = World(tmp_path)
    world.store.close()
    keys = tmp_path / "keys.json"
    _keys().save(keys)
    anchor = str(tmp_path / "elsewhere" / "heads.jsonl")

    whole = _cli("verify", str(world.path), "--keys", str(keys), "--anchor", anchor)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert "5 receipts (5 signed with the gate's Ed25519 key) hold" in whole.stdout
    assert (
        "log: 5 receipts under 5 signed tree heads; compared with 5 anchored heads" in whole.stdout
    )

    world.rewrite(2, KEY, amount=999)
    world.rebuild_heads(KEY)
    alone = _cli("verify", str(world.path), "--keys", str(keys))
    assert alone.returncode == 0, alone.stdout
    caught = _cli("verify", str(world.path), "--keys", str(keys), "--anchor", anchor)
    assert caught.returncode == 1
    assert f"receipt of action {world.actions[2]} at log position 2 was altered" in caught.stdout
    missing = _cli("verify", str(world.path), "--anchor", str(tmp_path / "nowhere.jsonl"))
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr

"""The gate's Ed25519 key, the verifier's key list, and the COSE_Sign1 shape of a signature."""

from __future__ import annotations

import base64
import json
import pickle
import re
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pycose.headers import KID, ContentType
from pycose.keys.curves import Ed25519
from pycose.keys.okp import OKPKey
from pycose.messages.sign1message import Sign1Message

from interlock._core.errors import ConfigError
from interlock._core.signing import (
    ENV_SIGNING_KEY,
    ENV_VERIFY_KEYS,
    HEAD_TYPE,
    RECEIPT_TYPE,
    KeyEntry,
    KeyList,
    PublicKey,
    SigningKey,
    cbor,
    cose_sign1,
    key_list_from_env,
    protected_header,
    sig_structure,
    signing_key_from_env,
)

BODY = b'{"action":"a1","amount":1200,"v":1}'
T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z


def _flip(text: str) -> str:
    """`text` (base64url of a signature) with one bit of the signature flipped."""
    raw = bytearray(base64.urlsafe_b64decode(text))
    raw[10] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).decode()


# -- signatures ------------------------------------------------------------------------


def test_a_signature_verifies_under_its_public_key_and_content_type_only() -> None:
    """A receipt's signature verifies as a receipt, never as a tree head, nor under
    another key, nor over another body."""
    key, other = SigningKey.generate(), SigningKey.generate()
    sig = key.sign(BODY, RECEIPT_TYPE)
    assert key.public.verify(BODY, RECEIPT_TYPE, sig)
    assert not key.public.verify(BODY, HEAD_TYPE, sig)
    assert not other.public.verify(BODY, RECEIPT_TYPE, sig)
    assert not key.public.verify(BODY + b" ", RECEIPT_TYPE, sig)
    assert not key.public.verify(BODY.replace(b"1200", b"9200"), RECEIPT_TYPE, sig)
    assert not key.public.verify(BODY, RECEIPT_TYPE, _flip(sig))
    head_sig = key.sign(BODY, HEAD_TYPE)
    assert key.public.verify(BODY, HEAD_TYPE, head_sig)
    assert not key.public.verify(BODY, RECEIPT_TYPE, head_sig)


def test_verify_answers_false_on_any_bad_signature_text() -> None:
    """Text that is not the canonical base64url of 64 bytes is a False, never a raise."""
    key = SigningKey.generate()
    sig = key.sign(BODY, RECEIPT_TYPE)
    unpadded = sig.rstrip("=")
    std_alphabet = base64.b64encode(base64.urlsafe_b64decode(sig)).decode()
    bad: list[object] = [
        "",
        "not base64!",
        unpadded,
        sig + "A",
        sig[:-4],
        None,
        42,
        sig.encode(),
        "é" * 88,
    ]
    if std_alphabet != sig:
        bad.append(std_alphabet)
    for text in bad:
        assert key.public.verify(BODY, RECEIPT_TYPE, text) is False  # type: ignore[arg-type]
    assert key.public.verify("body", RECEIPT_TYPE, sig) is False  # type: ignore[arg-type]
    assert key.public.verify(BODY, None, sig) is False  # type: ignore[arg-type]
    assert key.public.verify(BODY, RECEIPT_TYPE, sig) is True


def test_the_key_id_is_signed_so_a_signature_cannot_be_moved_to_another_key_id() -> None:
    """The protected header carries the key id: the raw signature checks over the header
    naming its own key and not over one naming another key id."""
    key = SigningKey.generate()
    sig = base64.urlsafe_b64decode(key.sign(BODY, RECEIPT_TYPE))
    own = sig_structure(protected_header(key.key_id, RECEIPT_TYPE), BODY)
    moved = sig_structure(protected_header("ed25519:0000000000000000", RECEIPT_TYPE), BODY)
    raw_public = Ed25519PublicKey.from_public_bytes(key.public.raw)
    raw_public.verify(sig, own)  # raises if this were not exactly what was signed
    with pytest.raises(InvalidSignature):
        raw_public.verify(sig, moved)


# -- COSE ------------------------------------------------------------------------------


def test_cbor_encodes_the_rfc_8949_examples() -> None:
    """The encoder's output for RFC 8949 Appendix A's examples of the kinds it takes."""
    examples: list[tuple[object, str]] = [
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (1000, "1903e8"),
        (1000000, "1a000f4240"),
        (1000000000000, "1b000000e8d4a51000"),
        (-1, "20"),
        (-1000, "3903e7"),
        (b"", "40"),
        (b"\x01\x02\x03\x04", "4401020304"),
        ("", "60"),
        ("IETF", "6449455446"),
        ("\u00fc", "62c3bc"),
        ([], "80"),
        ([1, [2, 3], [4, 5]], "8301820203820405"),
        ({}, "a0"),
        ({1: 2, 3: 4}, "a201020304"),
        ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
    ]
    for value, encoded in examples:
        assert cbor(value).hex() == encoded, value  # type: ignore[arg-type]
    # Deterministic: map keys sorted by their encoding, whatever the insertion order.
    assert cbor({4: b"k", 1: -8, 3: "t"}) == cbor({1: -8, 3: "t", 4: b"k"})
    with pytest.raises(TypeError, match="booleans"):
        cbor(True)


def test_the_protected_header_is_the_deterministic_cose_map() -> None:
    """{1: -8, 3: content type, 4: key id bytes}, keys in order 1, 3, 4."""
    header = protected_header("ed25519:0123456789abcdef", "t/x")
    assert header.hex() == (
        "a3"
        + "01"
        + "27"
        + "03"
        + "63"
        + b"t/x".hex()
        + "04"
        + "58"
        + "18"
        + b"ed25519:0123456789abcdef".hex()
    )


def test_pycose_verifies_our_cose_sign1_and_rejects_a_changed_payload() -> None:
    """An independent COSE library (pycose) decodes our COSE_Sign1, reads its headers,
    verifies it with the public key alone, and fails it when one payload byte changes."""
    key = SigningKey.generate()
    sig = key.sign(BODY, RECEIPT_TYPE)
    message = cose_sign1(BODY, sig, key.key_id, RECEIPT_TYPE)
    assert message[0] == 0xD2  # CBOR tag 18: COSE_Sign1
    decoded = Sign1Message.decode(message)
    assert decoded.payload == BODY
    assert decoded.phdr_encoded == protected_header(key.key_id, RECEIPT_TYPE)
    assert decoded.get_attr(KID) == key.key_id.encode()
    assert decoded.get_attr(ContentType) == RECEIPT_TYPE
    decoded.key = OKPKey(crv=Ed25519, x=key.public.raw)
    assert decoded.verify_signature()

    changed = bytearray(BODY)
    changed[5] ^= 1
    forged = cose_sign1(bytes(changed), sig, key.key_id, RECEIPT_TYPE)
    decoded = Sign1Message.decode(forged)
    decoded.key = OKPKey(crv=Ed25519, x=key.public.raw)
    assert not decoded.verify_signature()
    as_head = Sign1Message.decode(cose_sign1(BODY, sig, key.key_id, HEAD_TYPE))
    as_head.key = OKPKey(crv=Ed25519, x=key.public.raw)
    assert not as_head.verify_signature()
    other = Sign1Message.decode(message)
    other.key = OKPKey(crv=Ed25519, x=SigningKey.generate().public.raw)
    assert not other.verify_signature()


def test_cose_sign1_refuses_a_signature_that_is_not_one() -> None:
    """Exporting needs the 64 signature bytes: anything else is refused in words."""
    with pytest.raises(ValueError, match="base64url text of 64 bytes"):
        cose_sign1(BODY, "c2hvcnQ=", "ed25519:0123456789abcdef", RECEIPT_TYPE)


# -- keys on disk ----------------------------------------------------------------------


def test_a_saved_key_loads_back_the_same_and_is_private_to_its_owner(tmp_path: Path) -> None:
    """save writes mode 0600 PEM; load gives a key that signs what the first verifies."""
    key = SigningKey.generate()
    path = tmp_path / "signing-key.pem"
    key.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = SigningKey.load(path)
    assert again.key_id == key.key_id and again.public == key.public
    assert key.public.verify(BODY, RECEIPT_TYPE, again.sign(BODY, RECEIPT_TYPE))


def test_save_refuses_an_existing_file_and_a_symlink(tmp_path: Path) -> None:
    """A key is never overwritten, nor written through a link (even a dangling one)."""
    first, second = SigningKey.generate(), SigningKey.generate()
    path = tmp_path / "signing-key.pem"
    first.save(path)
    with pytest.raises(ConfigError, match="already exists: a signing key is never overwritten"):
        second.save(path)
    assert SigningKey.load(path).key_id == first.key_id
    target = tmp_path / "elsewhere.pem"
    link = tmp_path / "link.pem"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="already exists"):
        second.save(link)
    assert not target.exists()
    target.write_text("kept")
    with pytest.raises(ConfigError, match="already exists"):
        second.save(link)
    assert target.read_text() == "kept"


def test_load_says_what_is_wrong_with_the_file_and_never_echoes_it(tmp_path: Path) -> None:
    """Missing, unreadable, not PEM, and not Ed25519: each in words, none quoting the file."""
    with pytest.raises(ConfigError, match=r"no signing key at .*keygen"):
        SigningKey.load(tmp_path / "absent.pem")
    with pytest.raises(ConfigError, match="cannot read the signing key"):
        SigningKey.load(tmp_path)  # a directory
    secretish = tmp_path / "garbage.pem"
    secretish.write_text(
        "-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n"
    )
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key") as bad:
        SigningKey.load(secretish)
    assert "U0VDUkVU" not in str(bad.value)
    ec = tmp_path / "ec.pem"
    ec.write_bytes(
        generate_private_key(SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ConfigError, match="not Ed25519"):
        SigningKey.load(ec)


def test_repr_str_and_pickle_never_give_the_private_key(tmp_path: Path) -> None:
    """Printing or logging a SigningKey shows its key id only; pickling it is refused."""
    key = SigningKey.generate()
    path = tmp_path / "k.pem"
    key.save(path)
    pem = path.read_text()
    der_body = "".join(pem.splitlines()[1:-1])
    private = serialization.load_pem_private_key(pem.encode(), None)
    assert isinstance(private, Ed25519PrivateKey)
    private_raw = private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    for shown in (repr(key), str(key), f"{key}", repr([key])):
        assert key.key_id in shown
        assert der_body not in shown and "PRIVATE" not in shown
        assert private_raw.hex() not in shown
        assert base64.urlsafe_b64encode(private_raw).decode().rstrip("=") not in shown
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(key)


def test_a_public_key_round_trips_through_text_and_refuses_other_text() -> None:
    """to_text/from_text keep the key and its id; bad text is refused in words."""
    public = SigningKey.generate().public
    again = PublicKey.from_text(public.to_text())
    assert again == public and again.key_id == public.key_id and len(public.raw) == 32
    assert public.key_id.startswith("ed25519:") and len(public.key_id) == 24
    for bad in ["", "abc", public.to_text()[:-2], public.to_text() + "AA"]:
        with pytest.raises(ConfigError, match="base64url text of 32 bytes"):
            PublicKey.from_text(bad)


# -- the key list ----------------------------------------------------------------------


def test_a_key_list_round_trips_through_its_file(tmp_path: Path) -> None:
    """save then load keeps every key and window; the file is the documented JSON."""
    a, b = SigningKey.generate(), SigningKey.generate()
    keys = KeyList()
    keys.add(a.public)
    keys.add(b.public, valid_from=T0)
    keys.retire(a.key_id, T0)
    path = tmp_path / "keys.json"
    keys.save(path)
    data = json.loads(path.read_text())
    assert data == {
        "v": 1,
        "keys": [
            {
                "key_id": a.key_id,
                "public_key": a.public.to_text(),
                "valid_from": None,
                "valid_until": T0,
            },
            {
                "key_id": b.key_id,
                "public_key": b.public.to_text(),
                "valid_from": T0,
                "valid_until": None,
            },
        ],
    }
    again = KeyList.load(path)
    assert again.entries == keys.entries
    assert again.get(a.key_id) == KeyEntry(a.public, None, T0)
    assert again.get("ed25519:0000000000000000") is None


def test_rotation_old_receipts_still_verify_and_new_ones_by_the_old_key_do_not() -> None:
    """Retire key A at T0 and add B from T0: A's signatures before T0 pass, A's after T0
    fail as retired, B's before T0 fail as not yet valid, B's after pass."""
    a, b = SigningKey.generate(), SigningKey.generate()
    keys = KeyList()
    keys.add(a.public)
    before = (a.key_id, T0 - 60, BODY, RECEIPT_TYPE, a.sign(BODY, RECEIPT_TYPE))
    assert keys.problem(*before) is None
    keys.retire(a.key_id, T0)
    keys.add(b.public, valid_from=T0)
    assert keys.problem(*before) is None
    after = keys.problem(a.key_id, T0 + 60, BODY, RECEIPT_TYPE, a.sign(BODY, RECEIPT_TYPE))
    assert after == (
        f"signed at 2026-05-28T20:27:40Z by key {a.key_id}, which the key list says was "
        "retired at 2026-05-28T20:26:40Z"
    )
    at_retirement = keys.problem(a.key_id, T0, BODY, RECEIPT_TYPE, a.sign(BODY, RECEIPT_TYPE))
    assert at_retirement is not None and "retired" in at_retirement
    early = keys.problem(b.key_id, T0 - 1, BODY, RECEIPT_TYPE, b.sign(BODY, RECEIPT_TYPE))
    assert early == (
        f"signed at 2026-05-28T20:26:39Z by key {b.key_id}, which the key list says is not "
        "yet valid until 2026-05-28T20:26:40Z"
    )
    assert keys.problem(b.key_id, T0, BODY, RECEIPT_TYPE, b.sign(BODY, RECEIPT_TYPE)) is None


def test_problem_names_each_way_a_signature_fails() -> None:
    """Unsigned, unknown key, altered body, wrong content type, signature by another key
    under this key's id: each gets its own words."""
    a, stranger = SigningKey.generate(), SigningKey.generate()
    keys = KeyList()
    keys.add(a.public)
    sig = a.sign(BODY, RECEIPT_TYPE)
    assert keys.problem(a.key_id, T0, BODY, RECEIPT_TYPE, sig) is None
    assert keys.problem(None, T0, BODY, RECEIPT_TYPE, sig) == "not signed"
    assert keys.problem(a.key_id, T0, BODY, RECEIPT_TYPE, None) == "not signed"
    assert keys.problem(stranger.key_id, T0, BODY, RECEIPT_TYPE, sig) == (
        f"signed by key {stranger.key_id}, which the key list does not name"
    )
    mismatch = (
        f"its signature does not match its body under key {a.key_id} (altered, or signed "
        "by someone else)"
    )
    assert keys.problem(a.key_id, T0, BODY + b"x", RECEIPT_TYPE, sig) == mismatch
    assert keys.problem(a.key_id, T0, BODY, HEAD_TYPE, sig) == mismatch
    forged = stranger.sign(BODY, RECEIPT_TYPE)
    assert keys.problem(a.key_id, T0, BODY, RECEIPT_TYPE, forged) == mismatch
    assert keys.problem(a.key_id, T0, BODY, RECEIPT_TYPE, _flip(sig)) == mismatch
    assert keys.problem(a.key_id, T0, BODY, RECEIPT_TYPE, "garbage") == mismatch
    for not_a_time in (float("nan"), float("inf"), "2026-05-28", None):
        words = keys.problem(a.key_id, not_a_time, BODY, RECEIPT_TYPE, sig)  # type: ignore[arg-type]
        assert words is not None and "which is not a time" in words
    # A key id read from a store is shown escaped, so it cannot move the cursor.
    odd = keys.problem("ed25519:\x1b[2J", T0, BODY, RECEIPT_TYPE, sig)
    assert odd is not None and "\x1b" not in odd and "\\x1b" in odd


def test_key_list_changes_are_checked() -> None:
    """Adding a key twice, retiring an unknown or retired key, or before its start: refused."""
    a = SigningKey.generate()
    keys = KeyList()
    keys.add(a.public, valid_from=T0)
    with pytest.raises(ConfigError, match="already in the key list"):
        keys.add(a.public)
    with pytest.raises(ConfigError, match="not in the key list: nothing to retire"):
        keys.retire("ed25519:0000000000000000", T0)
    with pytest.raises(ConfigError, match="cannot retire before that"):
        keys.retire(a.key_id, T0 - 1)
    keys.retire(a.key_id, T0 + 1)
    with pytest.raises(ConfigError, match="already retired at 2026-05-28T20:26:41Z"):
        keys.retire(a.key_id, T0 + 2)
    with pytest.raises(ConfigError, match="twice"):
        KeyList([KeyEntry(a.public), KeyEntry(a.public)])


def _entry(key: SigningKey, **changes: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "key_id": key.key_id,
        "public_key": key.public.to_text(),
        "valid_from": None,
        "valid_until": None,
    }
    entry.update(changes)
    return entry


def test_a_bad_key_list_file_is_refused_naming_the_file_and_the_entry(tmp_path: Path) -> None:
    """Each way a keys.json can be wrong gets words naming the file and the entry."""
    a, b = SigningKey.generate(), SigningKey.generate()
    path = tmp_path / "keys.json"
    cases: list[tuple[str, str]] = [
        ("{", "is not JSON"),
        ('{"v": 2, "keys": []}', "not a version 1 key list"),
        ('{"v": 1}', 'has no "keys" list'),
        ('{"v": 1, "keys": [3]}', "entry 0: not an object"),
        (
            json.dumps({"v": 1, "keys": [_entry(a), _entry(a, public_key="xx")]}),
            "entry 1: a public key is the base64url text of 32 bytes",
        ),
        (
            json.dumps({"v": 1, "keys": [_entry(a, key_id=b.key_id)]}),
            f"entry 0: key_id '{b.key_id}' is not the id of its public key",
        ),
        (
            json.dumps({"v": 1, "keys": [_entry(a, valid_from="yesterday")]}),
            "entry 0 .*valid_from and valid_until are times",
        ),
        (
            json.dumps({"v": 1, "keys": [_entry(a, valid_until=True)]}),
            "valid_from and valid_until are times",
        ),
        (
            json.dumps({"v": 1, "keys": [_entry(a, valid_from=T0, valid_until=T0 - 1)]}),
            "retired at .* before it was valid from",
        ),
        (json.dumps({"v": 1, "keys": [_entry(a), _entry(a)]}), "entry 1: key .* listed twice"),
    ]
    for text, words in cases:
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"key list {re.escape(str(path))}.*{words}"):
            KeyList.load(path)
    with pytest.raises(ConfigError, match=r"no key list at .*keygen"):
        KeyList.load(tmp_path / "absent.json")


def test_key_list_save_replaces_the_file_whole(tmp_path: Path) -> None:
    """Saving over an old list leaves the new one and no temporary file beside it."""
    path = tmp_path / "keys.json"
    first = KeyList()
    first.add(SigningKey.generate().public)
    first.save(path)
    second = KeyList(first.entries)
    second.add(SigningKey.generate().public)
    second.save(path)
    assert KeyList.load(path).entries == second.entries
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


# -- the environment -------------------------------------------------------------------


def test_keys_from_the_environment(tmp_path: Path) -> None:
    """Unset or empty: None. Set: the key and the list. A bad path names the variable."""
    assert signing_key_from_env({}) is None
    assert signing_key_from_env({ENV_SIGNING_KEY: ""}) is None
    assert key_list_from_env({}) is None
    assert key_list_from_env({ENV_VERIFY_KEYS: ""}) is None
    key = SigningKey.generate()
    key.save(tmp_path / "k.pem")
    keys = KeyList()
    keys.add(key.public)
    keys.save(tmp_path / "keys.json")
    env = {ENV_SIGNING_KEY: str(tmp_path / "k.pem"), ENV_VERIFY_KEYS: str(tmp_path / "keys.json")}
    loaded, trusted = signing_key_from_env(env), key_list_from_env(env)
    assert loaded is not None and trusted is not None
    sig = loaded.sign(BODY, HEAD_TYPE)
    assert trusted.problem(loaded.key_id, T0, BODY, HEAD_TYPE, sig) is None
    with pytest.raises(ConfigError, match=f"{ENV_SIGNING_KEY}: no signing key at"):
        signing_key_from_env({ENV_SIGNING_KEY: str(tmp_path / "nope.pem")})
    with pytest.raises(ConfigError, match=f"{ENV_VERIFY_KEYS}: no key list at"):
        key_list_from_env({ENV_VERIFY_KEYS: str(tmp_path / "nope.json")})

"""The gate's Ed25519 signing key, the key list a verifier trusts, and the COSE shape.

The gate signs each receipt and each tree head with its Ed25519 key; anyone checks them
with the public key alone, so no worker holds a secret that could rewrite the past
(unlike the HMAC key every worker shared). A signature is over the COSE_Sign1 (RFC 9052)
Sig_structure of the payload, with a protected header naming the algorithm (EdDSA), the
content type and the key id: the detached signature stored IS a COSE_Sign1 signature,
so `cose_sign1` exports a receipt in the IETF SCITT drafts' shape for free, and any COSE
library checks it. The content type is signed, so a receipt's signature can never pass
as a tree head's (`RECEIPT_TYPE`, `HEAD_TYPE`).

Keys rotate: a `KeyList` names every public key a verifier trusts with the window it was
valid in; a signature made at a time outside its key's window does not count.

The private key lives in one PEM file (PKCS 8, unencrypted, mode 0600) that only the gate
reads (`INTERLOCK_SIGNING_KEY`); the key list (`INTERLOCK_VERIFY_KEYS`) is public.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeAlias

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from interlock._core.errors import ConfigError

RECEIPT_TYPE: Final = "application/interlock-receipt+json"
"""The content type a receipt is signed under (the COSE protected header's label 3)."""

HEAD_TYPE: Final = "application/interlock-tree-head+json"
"""The content type a signed tree head is signed under."""

ENV_SIGNING_KEY: Final = "INTERLOCK_SIGNING_KEY"
"""The path of the gate's private key (PEM, PKCS 8): only the gate reads it."""

ENV_VERIFY_KEYS: Final = "INTERLOCK_VERIFY_KEYS"
"""The path of the key list (JSON) a verifier trusts."""

KEY_LIST_VERSION: Final = 1
"""The version of keys.json this module reads and writes (its `v`)."""

# COSE (RFC 9052 §3.1, RFC 9053 §2.2): header labels and the EdDSA algorithm id.
_ALG, _CONTENT_TYPE, _KID = 1, 3, 4
_EDDSA = -8
_SIGN1_TAG = 18

_KEY_ID = re.compile(r"ed25519:[0-9a-f]{16}\Z")


def key_id_of(public_key: Ed25519PublicKey) -> str:
    """The id a signature names its key by: `ed25519:` and 16 hex of the key's SHA-256
    (an approver's key and the gate's receipt key alike)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


# -- a minimal deterministic CBOR encoder (RFC 8949 §4.2.1) ---------------------------

CborValue: TypeAlias = int | bytes | str | list[Any] | dict[Any, Any]


def _cbor_head(major: int, n: int) -> bytes:
    """A CBOR item's head: its major type and argument, in the shortest form."""
    if n < 24:
        return bytes([major << 5 | n])
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * size):
            return bytes([major << 5 | extra]) + n.to_bytes(size, "big")
    raise ValueError(f"CBOR cannot encode {n}: too large")


def cbor(value: CborValue) -> bytes:
    """The deterministic CBOR encoding of an int, bytes, text, list or dict of those.

    Shortest heads, definite lengths, map keys in the bytewise order of their encodings
    (RFC 8949 §4.2.1): one value, one encoding, so a signature over it is reproducible.
    """
    if isinstance(value, bool):
        raise TypeError("this CBOR encoder takes no booleans")
    if isinstance(value, int):
        return _cbor_head(0, value) if value >= 0 else _cbor_head(1, -1 - value)
    if isinstance(value, bytes):
        return _cbor_head(2, len(value)) + value
    if isinstance(value, str):
        text = value.encode()
        return _cbor_head(3, len(text)) + text
    if isinstance(value, list):
        return _cbor_head(4, len(value)) + b"".join(cbor(v) for v in value)
    if isinstance(value, dict):
        items = sorted((cbor(k), cbor(v)) for k, v in value.items())
        return _cbor_head(5, len(items)) + b"".join(k + v for k, v in items)
    raise TypeError(f"this CBOR encoder takes no {type(value).__name__}")


def protected_header(key_id: str, content_type: str) -> bytes:
    """The COSE protected header: CBOR {1: -8 (EdDSA), 3: content type, 4: key id bytes}."""
    return cbor({_ALG: _EDDSA, _CONTENT_TYPE: content_type, _KID: key_id.encode()})


def sig_structure(protected: bytes, payload: bytes) -> bytes:
    """What is signed (RFC 9052 §4.4): CBOR ["Signature1", protected, h'', payload]."""
    return cbor(["Signature1", protected, b"", payload])


def cose_sign1(payload: bytes, signature: str, key_id: str, content_type: str) -> bytes:
    """The COSE_Sign1 message (CBOR tag 18) carrying `payload` and its stored signature.

    Any COSE library verifies it with the public key: the stored signature was made over
    this message's Sig_structure. `ValueError` when `signature` is not base64url of 64
    bytes.
    """
    raw = _signature_bytes(signature)
    if raw is None:
        raise ValueError("a signature is the base64url text of 64 bytes")
    message = [protected_header(key_id, content_type), {}, payload, raw]
    return _cbor_head(6, _SIGN1_TAG) + cbor(message)


# -- keys ----------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def _unb64(text: object, size: int) -> bytes | None:
    """The `size` bytes `text` is the canonical base64url of, or None."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), altchars=b"-_", validate=True)
    except (ValueError, binascii.Error):
        return None
    # Only the canonical text: one signature has one spelling, so a store cannot hold two
    # texts of the same signature (or stray bits in the padding).
    if len(raw) != size or _b64(raw) != text:
        return None
    return raw


def _signature_bytes(signature: object) -> bytes | None:
    return _unb64(signature, 64)


class PublicKey:
    """An Ed25519 public key: what a verifier holds to check the gate's signatures."""

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        self.raw: bytes = key.public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        """The key's 32 raw bytes."""
        self.key_id: str = key_id_of(key)
        """`ed25519:` and 16 hex of the key's SHA-256: what a signature names it by."""
        self._prefixes: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"PublicKey({self.key_id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and self.raw == other.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def to_text(self) -> str:
        """The key as text: base64url of its 32 raw bytes."""
        return _b64(self.raw)

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        """The key `to_text` wrote; `ConfigError` saying so when `text` is not one."""
        raw = _unb64(text, 32)
        if raw is None:
            raise ConfigError(
                "a public key is the base64url text of 32 bytes (as keys.json holds it); "
                f"got {text!r:.60}"
            )
        try:
            return cls(Ed25519PublicKey.from_public_bytes(raw))
        except ValueError:
            raise ConfigError(f"{text!r} is not an Ed25519 public key") from None

    def verify(self, payload: bytes, content_type: str, signature: str) -> bool:
        """Whether `signature` is this key's over `payload` under `content_type`.

        False on any bad input (not base64url, wrong length, wrong types), never raises.
        """
        raw = _signature_bytes(signature)
        if raw is None or not isinstance(payload, bytes) or not isinstance(content_type, str):
            return False
        # `sig_structure` up to the payload is the same for every payload of one content
        # type: built once, as verify() checks a signature per receipt.
        prefix = self._prefixes.get(content_type)
        if prefix is None:
            protected = protected_header(self.key_id, content_type)
            prefix = self._prefixes[content_type] = sig_structure(protected, b"")[:-1]
        signed = prefix + _cbor_head(2, len(payload)) + payload
        try:
            self._key.verify(raw, signed)
        except InvalidSignature:
            return False
        return True


class SigningKey:
    """The gate's Ed25519 private key: signs receipts and tree heads.

    Keep it with the gate only. Its repr names the key id, never the key.
    """

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public = PublicKey(key.public_key())
        """The public half, for the key list."""

    def __repr__(self) -> str:
        return f"SigningKey({self.public.key_id})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        # Pickling would write the private key wherever the pickle goes (a log, a queue).
        raise TypeError("a SigningKey is not pickled: load it from its file where needed")

    @property
    def key_id(self) -> str:
        """The key id signatures name this key by (`ed25519:<16 hex>`)."""
        return self.public.key_id

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        """The key in the PEM file (PKCS 8, unencrypted) at `path`; `ConfigError` in words."""
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise ConfigError(
                f"no signing key at {path}: create one with `python -m interlock keygen DIR`"
            ) from None
        except OSError as e:
            raise ConfigError(
                f"cannot read the signing key at {path} ({e.strerror}): check the path and "
                "that this user may read it"
            ) from None
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            # The parser's message may quote the file; say only what it is not.
            raise ConfigError(
                f"{path} is not an unencrypted PEM private key (PKCS 8): give the file "
                "`python -m interlock keygen` wrote"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(
                f"{path} holds a private key that is not Ed25519: receipts are signed with "
                "Ed25519 (`python -m interlock keygen DIR` makes one)"
            )
        return cls(key)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the key as PEM (PKCS 8) to a NEW file at `path`, readable by its owner only.

        Refuses (`ConfigError`) an existing file or a symlink at `path`: a key is never
        overwritten, nor written through a link to somewhere else.
        """
        pem = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            raise ConfigError(
                f"{path} already exists: a signing key is never overwritten (receipts it "
                "signed would no longer verify); move it away or choose another path"
            ) from None
        except OSError as e:
            raise ConfigError(f"cannot create {path} ({e.strerror})") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            Path(path).unlink(missing_ok=True)
            raise ConfigError(f"cannot write {path} ({e.strerror}); nothing was kept") from None

    def sign(self, payload: bytes, content_type: str) -> str:
        """The base64url Ed25519 signature over the COSE Sig_structure of `payload`."""
        signed = sig_structure(protected_header(self.key_id, content_type), payload)
        return _b64(self._key.sign(signed))


# -- the key list --------------------------------------------------------------------


def _when(at: float) -> str:
    """`at` (seconds since the epoch) as ISO 8601 UTC to the second."""
    try:
        moment = datetime.datetime.fromtimestamp(at, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{at!r} (not a time)"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _named(key_id: str) -> str:
    """A key id from a store, safe to show: odd ones are quoted (escaping control chars)."""
    return key_id if _KEY_ID.match(key_id) else repr(key_id)


@dataclass(frozen=True)
class KeyEntry:
    """One trusted key and its validity window: from `valid_from` (None: always) until
    `valid_until` (None: still valid), seconds since the epoch."""

    public: PublicKey
    valid_from: float | None = None
    valid_until: float | None = None

    @property
    def key_id(self) -> str:
        """The key's id."""
        return self.public.key_id

    def to_dict(self) -> dict[str, Any]:
        """The entry as keys.json holds it."""
        return {
            "key_id": self.key_id,
            "public_key": self.public.to_text(),
            "valid_from": self.valid_from,
            "valid_until": self.valid_until,
        }


def _time_or_none(value: object) -> bool:
    return value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    )


class KeyList:
    """The public keys a verifier trusts, each with the window it was valid in."""

    def __init__(self, entries: Iterable[KeyEntry] = ()) -> None:
        self._entries: dict[str, KeyEntry] = {}
        for entry in entries:
            if entry.key_id in self._entries:
                raise ConfigError(f"key {entry.key_id} is in the key list twice")
            self._entries[entry.key_id] = entry

    def __repr__(self) -> str:
        return f"KeyList({', '.join(self._entries)})"

    @property
    def entries(self) -> tuple[KeyEntry, ...]:
        """The entries, in the order they were added."""
        return tuple(self._entries.values())

    def get(self, key_id: str) -> KeyEntry | None:
        """The entry of `key_id`, or None when the list does not name it."""
        return self._entries.get(key_id)

    def add(self, public: PublicKey, valid_from: float | None = None) -> None:
        """Trust `public` from `valid_from` (None: for any time before its retirement)."""
        if public.key_id in self._entries:
            raise ConfigError(f"key {public.key_id} is already in the key list")
        if not _time_or_none(valid_from):
            raise ConfigError(f"valid_from is a time in seconds or None, got {valid_from!r}")
        self._entries[public.key_id] = KeyEntry(public, valid_from)

    def retire(self, key_id: str, at: float) -> None:
        """Stop trusting `key_id` for signatures made at `at` or later (older ones stand)."""
        entry = self._entries.get(key_id)
        if entry is None:
            raise ConfigError(f"key {_named(key_id)} is not in the key list: nothing to retire")
        if not _time_or_none(at) or at is None:
            raise ConfigError(f"a retirement time is a time in seconds, got {at!r}")
        if entry.valid_until is not None:
            raise ConfigError(f"key {key_id} was already retired at {_when(entry.valid_until)}")
        if entry.valid_from is not None and at < entry.valid_from:
            raise ConfigError(
                f"key {key_id} is valid from {_when(entry.valid_from)}: it cannot retire "
                f"before that ({_when(at)})"
            )
        self._entries[key_id] = replace(entry, valid_until=at)

    def problem(
        self,
        key_id: str | None,
        at: float,
        payload: bytes,
        content_type: str,
        signature: str | None,
    ) -> str | None:
        """None when `signature` is a valid signature of `payload` made at `at` by a key of
        this list within its window; otherwise what is wrong, in words."""
        if key_id is None or signature is None:
            return "not signed"
        entry = self._entries.get(key_id) if isinstance(key_id, str) else None
        if entry is None:
            return f"signed by key {_named(str(key_id))}, which the key list does not name"
        # The signature first: a time that is not signed says nothing.
        if not entry.public.verify(payload, content_type, signature):
            return (
                f"its signature does not match its body under key {key_id} (altered, or "
                "signed by someone else)"
            )
        if at is None or not _time_or_none(at):
            return f"signed by key {key_id} at {at!r}, which is not a time: no window holds it"
        if entry.valid_from is not None and at < entry.valid_from:
            return (
                f"signed at {_when(at)} by key {key_id}, which the key list says is not yet "
                f"valid until {_when(entry.valid_from)}"
            )
        if entry.valid_until is not None and at >= entry.valid_until:
            return (
                f"signed at {_when(at)} by key {key_id}, which the key list says was retired "
                f"at {_when(entry.valid_until)}"
            )
        return None

    def to_text(self) -> str:
        """The list as keys.json holds it."""
        body = {"v": KEY_LIST_VERSION, "keys": [e.to_dict() for e in self._entries.values()]}
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_text(cls, text: str, where: str = "the key list") -> KeyList:
        """The list `to_text` wrote; `ConfigError` naming `where` and the bad entry."""
        try:
            data = json.loads(text)
        except ValueError:
            raise ConfigError(f"{where} is not JSON: give the keys.json keygen wrote") from None
        if not isinstance(data, dict) or data.get("v") != KEY_LIST_VERSION:
            raise ConfigError(
                f'{where} is not a version {KEY_LIST_VERSION} key list ({{"v": 1, "keys": '
                "[...]}})"
            )
        keys = data.get("keys")
        if not isinstance(keys, list):
            raise ConfigError(f'{where} has no "keys" list')
        entries: list[KeyEntry] = []
        for i, item in enumerate(keys):
            if not isinstance(item, dict):
                raise ConfigError(f"{where}, entry {i}: not an object")
            try:
                encoded = item.get("public_key")
                if not isinstance(encoded, str):
                    raise ConfigError("a public key is the base64url text of 32 bytes")
                public = PublicKey.from_text(encoded)
            except ConfigError as e:
                raise ConfigError(f"{where}, entry {i}: {e}") from None
            if item.get("key_id") != public.key_id:
                raise ConfigError(
                    f"{where}, entry {i}: key_id {item.get('key_id')!r:.40} is not the id of "
                    f"its public key ({public.key_id}): the entry was altered"
                )
            start, end = item.get("valid_from"), item.get("valid_until")
            if not (_time_or_none(start) and _time_or_none(end)):
                raise ConfigError(
                    f"{where}, entry {i} ({public.key_id}): valid_from and valid_until are "
                    "times in seconds since the epoch, or null"
                )
            if start is not None and end is not None and end < start:
                raise ConfigError(
                    f"{where}, entry {i} ({public.key_id}): retired at {_when(end)}, before "
                    f"it was valid from {_when(start)}"
                )
            if public.key_id in (e.key_id for e in entries):
                raise ConfigError(f"{where}, entry {i}: key {public.key_id} is listed twice")
            entries.append(KeyEntry(public, start, end))
        return cls(entries)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KeyList:
        """The key list in the JSON file at `path`; `ConfigError` naming the file."""
        try:
            text = Path(path).read_text()
        except FileNotFoundError:
            raise ConfigError(
                f"no key list at {path}: `python -m interlock keygen DIR` writes DIR/keys.json"
            ) from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read the key list at {path} ({e})") from None
        return cls.from_text(text, f"key list {path}")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the list to `path`, replacing it whole (a reader never sees half a list)."""
        target = Path(path)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.to_text())
                f.flush()
                os.fsync(f.fileno())
            os.chmod(temp, 0o644)  # public: whoever verifies reads it
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def signing_key_from_env(env: Mapping[str, str] | None = None) -> SigningKey | None:
    """The key at `INTERLOCK_SIGNING_KEY`, or None when it is unset or empty."""
    path = (os.environ if env is None else env).get(ENV_SIGNING_KEY)
    if not path:
        return None
    try:
        return SigningKey.load(path)
    except ConfigError as e:
        raise ConfigError(f"{ENV_SIGNING_KEY}: {e}") from None


def key_list_from_env(env: Mapping[str, str] | None = None) -> KeyList | None:
    """The key list at `INTERLOCK_VERIFY_KEYS`, or None when it is unset or empty."""
    path = (os.environ if env is None else env).get(ENV_VERIFY_KEYS)
    if not path:
        return None
    try:
        return KeyList.load(path)
    except ConfigError as e:
        raise ConfigError(f"{ENV_VERIFY_KEYS}: {e}") from None

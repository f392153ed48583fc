"""Signed approvals: an approver's Ed25519 key grants, the gate's trust list checks.

Anyone who can write the store can write a lease row. So a lease counts only when an
approver signed it: `Approver` holds a private key and grants leases signed over
`Lease.signed_bytes()` (a domain line, then the canonical JSON of everything the lease
authorizes: id, kind, target, currency, cap, exact, expiry, grantor, grant time, key id;
never its spend, reservations or revocation, which the store changes as it is used).
`Approvers` is the gate's trust list of public keys; the gate refuses, at every send and
resend, a lease whose signature does not verify under a key in it.

What a signature proves: that the holder of that key authorized exactly these fields. It
says nothing of whether the action is wise, or of the world's state; and nothing of a
lease's spend, which the store keeps (verify checks it against the actions' settlements).

The private key lives with whoever grants (a person's tool, the demo's engine), never in
a worker: a worker holds public keys only. `UNSIGNED_APPROVALS` is the explicit, named
opt-in to accept unsigned leases (tests about something else, migrating a store granted
before signatures): under it a store writer can mint an approval, as before.

Revoking needs no signature: taking authority away is always allowed.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from interlock._core.errors import ConfigError, LeaseError
from interlock._core.leases import Lease, approval_bytes
from interlock._core.signing import key_id_of

ENV_APPROVERS = "INTERLOCK_APPROVERS"
"""The approvers' public key files (PEM), separated by the path separator (`:`)."""


class Approver:
    """Someone who grants approvals: a name and an Ed25519 private key.

    Keep the key with the granting side (a person's tool, a supervisor), never in a worker:
    whoever holds it can authorize refunds.
    """

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        if not isinstance(name, str) or not name.strip() or not name.isprintable():
            raise ConfigError(f"an approver's name must be printable text, got {name!r}")
        self.name = name
        self._key = private_key
        self.public_key = private_key.public_key()
        self.key_id = key_id_of(self.public_key)

    def __repr__(self) -> str:
        return f"Approver({self.name!r}, key {self.key_id})"

    @classmethod
    def generate(cls, name: str) -> Approver:
        """A new approver with a fresh key."""
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, name: str, path: str | os.PathLike[str]) -> Approver:
        """The approver whose private key (PEM, PKCS 8, unencrypted) is at `path`."""
        try:
            key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(f"approver key {path}: cannot be read ({e})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"approver key {path}: not an Ed25519 private key")
        return cls(name, key)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the private key to a new file `path`, readable by its owner only (0600)."""
        pem = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)

    def public_pem(self) -> bytes:
        """The public key as PEM: what a gate's `Approvers` is given."""
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def sign(self, lease: Lease) -> Lease:
        """`lease`, granted by this approver and signed over what it authorizes."""
        unsigned = replace(lease, granted_by=self.name, key_id=None, signature=None)
        signature = self._key.sign(approval_bytes({**unsigned.authorized(), "key_id": self.key_id}))
        return replace(
            unsigned, key_id=self.key_id, signature=base64.urlsafe_b64encode(signature).decode()
        )

    def grant(
        self,
        *,
        kind: str,
        target: str,
        cap: int | None = None,
        amount: int | None = None,
        currency: str | None = None,
        expires_in_s: float | None = None,
        expires_at: float | None = None,
        lease_id: str | None = None,
        now: float | None = None,
    ) -> Lease:
        """A signed lease for actions of `kind` on `target`: up to `cap` cents, or exactly
        `amount` cents once (an exact approval). Store it with `store.grant_lease`.

        Give `expires_in_s` or `expires_at`; `now` defaults to the wall clock.
        """
        if (cap is None) == (amount is None):
            raise LeaseError(lease_id or "(new)", "give either cap= (up to) or amount= (exactly)")
        if (expires_in_s is None) == (expires_at is None):
            raise LeaseError(lease_id or "(new)", "give either expires_in_s= or expires_at=")
        granted_at = time.time() if now is None else now
        limit = amount if amount is not None else cap
        until = expires_at if expires_at is not None else granted_at + (expires_in_s or 0.0)
        assert limit is not None
        lease = Lease(
            id=lease_id or "lease_" + uuid.uuid4().hex,
            kind=kind,
            target=target,
            cap=limit,
            expires_at=until,
            granted_by=self.name,
            granted_at=granted_at,
            currency=currency,
            exact=amount is not None,
        )
        return self.sign(lease)


class Approvers:
    """The approvers a gate trusts: their public keys, by key id.

    `problem(lease)` says why a lease is not a valid approval from one of them (None when
    it is). `UNSIGNED_APPROVALS` (or `allow_unsigned=True` beside keys, to migrate a store)
    also accepts leases with no signature: a store writer can then mint one.
    """

    ENV_NAME: ClassVar[str] = ENV_APPROVERS
    """The environment variable `from_env` reads: the approvers' public key files."""

    def __init__(
        self, public_keys: Iterable[Ed25519PublicKey] = (), *, allow_unsigned: bool = False
    ) -> None:
        self.keys: Mapping[str, Ed25519PublicKey] = {key_id_of(k): k for k in public_keys}
        self.allow_unsigned = allow_unsigned
        if not self.keys and not allow_unsigned:
            raise ConfigError(
                "Approvers needs at least one public key; to accept unsigned approvals "
                "(tests, migration) pass interlock.UNSIGNED_APPROVALS instead"
            )

    def __repr__(self) -> str:
        unsigned = ", allow_unsigned=True" if self.allow_unsigned else ""
        return f"Approvers({sorted(self.keys)}{unsigned})"

    @classmethod
    def of(cls, *approvers: Approver) -> Approvers:
        """The trust list of these approvers' public keys."""
        return cls(a.public_key for a in approvers)

    @classmethod
    def load(cls, *paths: str | os.PathLike[str]) -> Approvers:
        """The trust list from PEM public key files (each may hold several keys)."""
        keys: list[Ed25519PublicKey] = []
        for path in paths:
            try:
                text = Path(path).read_bytes()
            except OSError as e:
                raise ConfigError(f"approvers' keys {path}: cannot be read ({e})") from None
            keys.extend(_public_keys(text, str(path)))
        return cls(keys)

    @classmethod
    def from_pem(cls, *pems: bytes) -> Approvers:
        """The trust list from PEM public keys (`Approver.public_pem()`), as bytes."""
        return cls(k for pem in pems for k in _public_keys(pem, "PEM"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Approvers | None:
        """The trust list named by `INTERLOCK_APPROVERS` (key files), or None when unset."""
        value = (os.environ if env is None else env).get(ENV_APPROVERS, "").strip()
        if not value:
            return None
        return cls.load(*[p for p in value.split(os.pathsep) if p])

    def problem(self, lease: Lease) -> str | None:
        """Why `lease` is not a valid approval from a trusted approver, or None."""
        if lease.damaged is not None:
            return None  # the lease check refuses it, saying it is damaged
        if lease.signature is None or lease.key_id is None:
            if self.allow_unsigned:
                return None
            return (
                f"approval {lease.id} is not signed: only an approver's signed grant "
                "authorizes a send (a store writer could have written it)"
            )
        key = self.keys.get(lease.key_id)
        if key is None and self.allow_unsigned:
            return None  # no stronger than an unsigned lease, which this list accepts
        if key is None:
            return (
                f"approval {lease.id} is signed by key {lease.key_id}, which is not one of "
                "this gate's approvers"
            )
        try:
            signature = base64.urlsafe_b64decode(lease.signature.encode())
            key.verify(signature, lease.signed_bytes())
        except (InvalidSignature, ValueError):
            return (
                f"approval {lease.id}: its signature does not verify under key "
                f"{lease.key_id} (the approval was altered or forged)"
            )
        return None

    def describe(self, lease: Lease) -> str:
        """What the check found, for a receipt: `signed by <grantor> (key <id>)`."""
        if lease.key_id is None:
            return "unsigned, accepted: this gate takes unsigned approvals"
        if lease.key_id not in self.keys:
            return f"signed by unknown key {lease.key_id}, accepted as unsigned"
        return f"signed by {lease.granted_by} (key {lease.key_id})"


def _public_keys(text: bytes, where: str) -> list[Ed25519PublicKey]:
    """The Ed25519 public keys of PEM text (one or several blocks); `ConfigError` if none."""
    marker = b"-----END PUBLIC KEY-----"
    keys = []
    for block in (b + marker for b in text.split(marker) if b.strip()):
        try:
            key = serialization.load_pem_public_key(block)
        except ValueError as e:
            raise ConfigError(f"approvers' keys {where}: not a PEM public key ({e})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"approvers' keys {where}: holds a key that is not Ed25519")
        keys.append(key)
    if not keys:
        raise ConfigError(f"approvers' keys {where}: holds no PEM public key")
    return keys


UNSIGNED_APPROVALS = Approvers(allow_unsigned=True)
"""The explicit opt-in to accept unsigned approvals: for tests about something else and for
migrating a store granted before signatures. It gives up the defence against a store
writer: anyone who can write the store can then mint an approval the gate acts on."""

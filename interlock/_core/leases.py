"""Approvals as leases: scoped, capped, expiring, revocable, and spent as actions settle.

A lease lets actions of one kind on one target spend up to `cap` cents before
`expires_at`, in one currency: `cap` is in that currency's smallest unit, and an action in
another currency is refused under it. Every check fails closed. Reservations are keyed by
action: a recovery reuses its own, a refusal releases it, a send turns it into spent money.

A lease without a currency (stored by an older version, or granted without one) is a
lease in US dollars: older versions' words and defaults said dollars, so that is what its
cents meant. An action in any other currency is refused under it; grant such an approval
again with its `currency` (docs/design.md §4, the migration).

A lease is checked when it is made (`LeaseError` naming the field, so nothing is granted):
ids as an `Intent` checks them, whole cents in range, finite times, expiry after the
grant. A lease that was stored bad anyway (by an older version, or by hand) is read back
as *damaged*: every action under it is refused, saying so, instead of raising on each
attempt and staying pending for good (docs/design.md §4).

A lease may be *exact*: it authorizes one action of exactly `cap` cents, once (the amount
must equal the cap, and the store lets one action reserve and spend it). A signed lease
carries its approver's `key_id` and an Ed25519 `signature` over `signed_bytes()`: the
canonical JSON of what it authorizes (never its spend, reservations or revocation), which
`interlock/_core/approvals.py` makes and checks.
"""

from __future__ import annotations

import hashlib
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from interlock._core.errors import UNREADABLE, LeaseError
from interlock._core.money import currency_problem
from interlock._core.receipts import canonical_json, load_json

APPROVAL_DOMAIN = b"interlock-approval-v1\n"
"""Prefixed to the canonical JSON an approval's signature covers, so that no other signed
text of ours (a receipt, a tree head) can be passed off as an approval."""
# What an approval authorizes, and so what its signature covers: never its spend, its
# reservations or its revocation, which the store changes as it is used.
AUTHORIZED_FIELDS = (
    "id", "kind", "target", "currency", "cap", "exact",
    "expires_at", "granted_by", "granted_at", "key_id",
)  # fmt: skip

# The same rules an Intent holds its ids and amount to (interlock/_core/journal.py): ids go
# into HTTP headers, metadata and SQL; amounts are whole cents below 10^10.
_ID_CHARS = frozenset(string.ascii_letters + string.digits + string.punctuation)
_MAX_ID_LENGTH = 200
_MAX_CENTS = 10**10
# What a lease without a currency is read as (see the module docstring).
LEGACY_CURRENCY = "usd"


@dataclass(frozen=True)
class Lease:
    """An approval for actions of `kind` on `target`, capped at `cap` cents of `currency`
    (None: `LEGACY_CURRENCY`, see the module docstring)."""

    id: str
    kind: str
    target: str
    cap: int
    expires_at: float
    granted_by: str
    granted_at: float
    spent: int = 0
    revoked_at: float | None = None
    revoked_by: str | None = None
    reservations: Mapping[str, int] = field(default_factory=dict)
    # Lowercase ISO code of the money it covers; None for a lease stored before currencies,
    # read as `LEGACY_CURRENCY`.
    currency: str | None = None
    # One action of exactly `cap` cents, once.
    exact: bool = False
    # The approver's key id and Ed25519 signature over `signed_bytes()`; None when unsigned.
    key_id: str | None = None
    signature: str | None = None
    # The id of the receipt its revocation wrote (`python -m interlock revoke`); None when
    # not revoked, or revoked without one (through the library, or by an older version).
    revocation_receipt: int | None = None
    # Set only by `from_dict` for a stored lease that fails these checks: what is wrong.
    damaged: str | None = field(default=None, compare=False)
    # The stored data of a damaged lease, written back as it was (nothing is lost).
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.damaged is None:
            problem = self.invalid()
            if problem is not None:
                raise LeaseError(str(self.id)[:_MAX_ID_LENGTH], problem)

    def invalid(self) -> str | None:
        """What makes this lease unusable (a field and what to give instead), or None."""
        for name in ("id", "target"):
            problem = _id_problem(getattr(self, name))
            if problem is not None:
                return f"{name} {problem}"
        for name in ("kind", "granted_by"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or not value.isprintable():
                return f"{name} must be a non-empty printable string, got {value!r}"
        problem = _cents_problem("cap", self.cap) or _cents_problem("spent", self.spent, zero=True)
        if problem is not None:
            return problem
        if not isinstance(self.reservations, Mapping):
            return "reservations must map action ids to cents"
        for aid, cents in self.reservations.items():
            problem = _id_problem(aid)
            if problem is not None:
                return f"a reservation's action id {problem}"
            problem = _cents_problem(f"the reservation of {aid}", cents)
            if problem is not None:
                return problem
        for name in ("granted_at", "expires_at", "revoked_at"):
            value = getattr(self, name)
            if value is None and name == "revoked_at":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{name} must be a time in seconds, got {value!r}"
            if not math.isfinite(value):
                return f"{name} must be a finite time in seconds, got {value!r}"
        if not self.expires_at > self.granted_at:
            return f"expires_at ({self.expires_at}) must come after granted_at ({self.granted_at})"
        if self.revoked_by is not None and not isinstance(self.revoked_by, str):
            return f"revoked_by must be a string, got {self.revoked_by!r}"
        if self.currency is not None:
            problem = currency_problem(self.currency)
            if problem is not None:
                return f"currency {problem}"
        if not isinstance(self.exact, bool):
            return f"exact must be true or false, got {self.exact!r}"
        for name in ("key_id", "signature"):
            value = getattr(self, name)
            if value is not None and _id_problem(value) is not None:
                return f"{name} {_id_problem(value)}"
        receipt = self.revocation_receipt
        if receipt is not None and (isinstance(receipt, bool) or not isinstance(receipt, int)):
            return f"revocation_receipt must be a receipt's id, got {receipt!r}"
        if (self.key_id is None) != (self.signature is None):
            return "key_id and signature go together: both set (signed) or neither (unsigned)"
        return None

    def authorized(self) -> dict[str, Any]:
        """What this approval authorizes: the fields its signature covers (its times as
        floats, as the store reads them back, so a lease granted with whole seconds
        verifies the same before and after it was stored)."""
        fields = {name: getattr(self, name) for name in AUTHORIZED_FIELDS}
        for name in ("expires_at", "granted_at"):
            if isinstance(fields[name], int) and not isinstance(fields[name], bool):
                fields[name] = float(fields[name])
        return fields

    def signed_bytes(self) -> bytes:
        """The bytes an approver signs: a domain line, then `authorized()` as canonical JSON."""
        return approval_bytes(self.authorized())

    def digest(self) -> str:
        """SHA-256 of `signed_bytes()`: names exactly what was checked, for commit 2."""
        return hashlib.sha256(self.signed_bytes()).hexdigest()

    @property
    def revoked(self) -> bool:
        """Whether someone revoked it."""
        return self.revoked_at is not None

    def available_for(self, action_id: str) -> int:
        """Cents this action may use: the cap less what was spent and others reserved."""
        others = sum(a for aid, a in self.reservations.items() if aid != action_id)
        return self.cap - self.spent - others

    def problem(
        self,
        *,
        kind: str,
        target: str,
        amount: int,
        action_id: str,
        now: float,
        currency: str | None = None,
    ) -> str | None:
        """Why this lease does not cover the action, or None when it does.

        `currency` is the action's (None: it records none, an older version's intent)."""
        if self.damaged is not None:
            return (
                f"approval {self.id} is damaged in the store ({self.damaged}): "
                "grant a new approval, and check the store"
            )
        if self.revoked:
            return f"approval revoked by {self.revoked_by or 'someone'}"
        if now >= self.expires_at:
            return "approval expired"
        if kind != self.kind or target != self.target:
            return f"approval covers {self.kind} on {self.target}, not {kind} on {target}"
        mine = lease_currency(self)
        if currency is not None and currency != mine:
            return (
                f"approval is in {mine.upper()}, the action is in {currency.upper()}: "
                f"grant an approval in {currency.upper()}"
            )
        if self.exact:
            if amount != self.cap:
                return f"approval is for exactly {self.cap}, not {amount}"
            used = self.spent > 0 or any(aid != action_id for aid in self.reservations)
            if used:
                return "exact approval already used by another action: it covers one, once"
        available = self.available_for(action_id)
        if amount > available:
            return f"amount {amount} exceeds what the approval has left ({available} of {self.cap})"
        return None

    def to_dict(self) -> dict[str, Any]:
        """The lease as JSON-ready data (a damaged one as it was stored; the revocation's
        receipt only when it has one, so a lease without one is stored as before)."""
        if self.raw is not None:
            return dict(self.raw)
        data = {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "cap": self.cap,
            "expires_at": self.expires_at,
            "granted_by": self.granted_by,
            "granted_at": self.granted_at,
            "spent": self.spent,
            "revoked_at": self.revoked_at,
            "revoked_by": self.revoked_by,
            "reservations": dict(self.reservations),
            "currency": self.currency,
            "exact": self.exact,
            "key_id": self.key_id,
            "signature": self.signature,
        }
        if self.revocation_receipt is not None:
            data["revocation_receipt"] = self.revocation_receipt
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Lease:
        """A lease from `to_dict` data; a damaged one (see `damaged`) if it fails its checks."""
        try:
            return cls._parse(data)
        except UNREADABLE as e:  # a LeaseError from its checks is a LookupError
            lease_id = str(data.get("id", "")) if isinstance(data, Mapping) else ""
            return cls(lease_id, "", "", 0, 0.0, "", 0.0, damaged=str(e) or type(e).__name__,
                       raw=dict(data) if isinstance(data, Mapping) else {})  # fmt: skip

    @classmethod
    def from_text(cls, lease_id: str, text: object) -> Lease:
        """A lease from its row's key and stored JSON text, never raising: text that is not
        a JSON object, or one naming another lease, reads back damaged under the row's key
        (the row keeps its text: a damaged lease is never written back)."""
        try:
            data = load_json(text) if isinstance(text, (str, bytes)) else text
        except ValueError as e:
            data, why = None, f"its stored text is not JSON ({e})"
        else:
            why = "its stored text is not a JSON object"
        if isinstance(data, Mapping):
            if data.get("id") == lease_id:
                return cls.from_dict(data)
            why = f"its row is keyed {lease_id} but its stored data names {data.get('id')!r}"
        return cls(lease_id, "", "", 0, 0.0, "", 0.0, damaged=why)

    @classmethod
    def _parse(cls, data: Mapping[str, Any]) -> Lease:
        return cls(
            id=str(data["id"]),
            kind=str(data["kind"]),
            target=str(data["target"]),
            cap=_whole("cap", data["cap"]),
            expires_at=_time("expires_at", data["expires_at"]),
            granted_by=str(data["granted_by"]),
            granted_at=_time("granted_at", data["granted_at"]),
            spent=_whole("spent", data.get("spent", 0)),
            revoked_at=None
            if data.get("revoked_at") is None
            else _time("revoked_at", data["revoked_at"]),
            revoked_by=data.get("revoked_by"),
            reservations={
                str(k): _whole(f"the reservation of {k}", v)
                for k, v in dict(data.get("reservations") or {}).items()
            },
            currency=data.get("currency"),
            exact=data.get("exact", False),
            key_id=data.get("key_id"),
            signature=data.get("signature"),
            revocation_receipt=data.get("revocation_receipt"),
        )

    def with_reservation(self, action_id: str, amount: int | None) -> Lease:
        """A copy with this action's reservation set (or dropped, for None)."""
        reservations = dict(self.reservations)
        if amount is None:
            reservations.pop(action_id, None)
        else:
            reservations[action_id] = amount
        return replace(self, reservations=reservations)


def approval_bytes(authorized: Mapping[str, Any]) -> bytes:
    """What an approval's signature covers: the domain line, then `authorized` (the lease's
    `AUTHORIZED_FIELDS`) as canonical JSON."""
    return APPROVAL_DOMAIN + canonical_json(dict(authorized)).encode()


def _whole(name: str, value: object) -> int:
    """Stored cents as an int; a float that is not whole (or not finite) is not cents."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number of cents, got {value!r}")
    return value


def _time(name: str, value: object) -> float:
    """A stored time as a float (the checks then ask that it be finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a time in seconds, got {value!r}")
    return float(value)


def _id_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > _MAX_ID_LENGTH:
        return f"is {len(value)} characters long; at most {_MAX_ID_LENGTH}"
    if _ID_CHARS.issuperset(value):
        return None
    bad = next((c for c in value if c not in _ID_CHARS), None)
    if bad is not None:
        return f"contains {bad!r}; use printable ASCII without whitespace"
    return None


def _cents_problem(name: str, value: object, *, zero: bool = False) -> str | None:
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{name} must be a whole number of cents, got {value!r}"
    if not low <= value < _MAX_CENTS:
        return f"{name} must be from {low} to below {_MAX_CENTS} cents, got {value}"
    return None


def lease_currency(lease: Lease) -> str:
    """The currency a lease's cents are in (`LEGACY_CURRENCY` for one stored without one)."""
    return lease.currency or LEGACY_CURRENCY


def approval_problem(
    lease: Lease | None,
    *,
    kind: str,
    target: str,
    amount: int,
    action_id: str,
    now: float,
    currency: str | None = None,
) -> str | None:
    """Why no approval covers this action (a missing lease included), or None when one does."""
    if lease is None:
        return "no such approval"
    return lease.problem(
        kind=kind, target=target, amount=amount, action_id=action_id, now=now, currency=currency
    )

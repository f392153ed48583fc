"""Approvals as leases: scoped, capped, expiring, revocable, and spent as actions settle.

A lease lets actions of one kind on one target spend up to `cap` cents before
`expires_at`. Every check fails closed. Reservations are keyed by action: a recovery
reuses its own, a refusal releases it, a send turns it into spent money.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Lease:
    """An approval for actions of `kind` on `target`, capped at `cap` cents."""

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

    @property
    def revoked(self) -> bool:
        """Whether someone revoked it."""
        return self.revoked_at is not None

    def available_for(self, action_id: str) -> int:
        """Cents this action may use: the cap less what was spent and others reserved."""
        others = sum(a for aid, a in self.reservations.items() if aid != action_id)
        return self.cap - self.spent - others

    def problem(
        self, *, kind: str, target: str, amount: int, action_id: str, now: float
    ) -> str | None:
        """Why this lease does not cover the action, or None when it does."""
        if self.revoked:
            return f"approval revoked by {self.revoked_by or 'someone'}"
        if now >= self.expires_at:
            return "approval expired"
        if kind != self.kind or target != self.target:
            return f"approval covers {self.kind} on {self.target}, not {kind} on {target}"
        available = self.available_for(action_id)
        if amount > available:
            return f"amount {amount} exceeds what the approval has left ({available} of {self.cap})"
        return None

    def to_dict(self) -> dict[str, Any]:
        """The lease as JSON-ready data."""
        return {
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
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Lease:
        """A lease from `to_dict` data."""
        return cls(
            id=str(data["id"]),
            kind=str(data["kind"]),
            target=str(data["target"]),
            cap=int(data["cap"]),
            expires_at=float(data["expires_at"]),
            granted_by=str(data["granted_by"]),
            granted_at=float(data["granted_at"]),
            spent=int(data.get("spent", 0)),
            revoked_at=None if data.get("revoked_at") is None else float(data["revoked_at"]),
            revoked_by=data.get("revoked_by"),
            reservations={str(k): int(v) for k, v in dict(data.get("reservations") or {}).items()},
        )

    def with_reservation(self, action_id: str, amount: int | None) -> Lease:
        """A copy with this action's reservation set (or dropped, for None)."""
        reservations = dict(self.reservations)
        if amount is None:
            reservations.pop(action_id, None)
        else:
            reservations[action_id] = amount
        return replace(self, reservations=reservations)


def approval_problem(
    lease: Lease | None, *, kind: str, target: str, amount: int, action_id: str, now: float
) -> str | None:
    """Why no approval covers this action (a missing lease included), or None when one does."""
    if lease is None:
        return "no such approval"
    return lease.problem(kind=kind, target=target, amount=amount, action_id=action_id, now=now)

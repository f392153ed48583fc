"""What an engine hands a worker: the case, where its decision is kept, the model it asks.

The engine writes the case (a file for a worker process, the object for an in-process or
Temporal one) and sets the worker's environment; the worker reads both. Both sides name
these here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# `INTERLOCK_AGENT` of a worker started to act on a saved decision: no model, no key.
AGENT_NONE = "none"
# The model a worker asks when its environment names none (`ENV_MODEL`).
DEFAULT_MODEL = "claude-sonnet-4-5"
ENV_MODEL = "INTERLOCK_MODEL"


@dataclass(frozen=True)
class Case:
    """One support case for one column: its payment, its approval and the request."""

    case_id: str
    column: str
    payment_intent: str
    lease_id: str
    amount: int
    request: str

    def to_dict(self) -> dict[str, Any]:
        """The case as JSON-ready data."""
        return {
            "case_id": self.case_id,
            "column": self.column,
            "payment_intent": self.payment_intent,
            "lease_id": self.lease_id,
            "amount": self.amount,
            "request": self.request,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Case:
        """A case from `to_dict` data."""
        return cls(
            case_id=str(data["case_id"]),
            column=str(data["column"]),
            payment_intent=str(data["payment_intent"]),
            lease_id=str(data["lease_id"]),
            amount=int(data["amount"]),
            request=str(data["request"]),
        )

    @property
    def metadata(self) -> dict[str, str]:
        """What the agent's refunds carry in their metadata."""
        return {"case": self.case_id, "column": self.column}


def decision_path(home: Path, case: Case) -> Path:
    """Where the standard and checked workers save a case's decision under `home`."""
    return home / "decisions" / f"{case.case_id}-{case.column}.json"

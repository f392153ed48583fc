"""What an engine hands a worker: the case, where its decision is kept, the model it asks.

The engine writes the case (a file for a worker process, the object for an in-process or
Temporal one) and sets the worker's environment; the worker reads both. Both sides name
these here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock import PostgresStore, is_postgres_url

# `INTERLOCK_AGENT` of a worker started to act on a saved decision: no model, no key.
AGENT_NONE = "none"
# The model a worker asks when its environment names none (`ENV_MODEL`).
DEFAULT_MODEL = "claude-sonnet-4-5"
ENV_MODEL = "INTERLOCK_MODEL"
# The library's setting that names the gate's receipt key file (a path, never the key):
# the engine sets it for the interlock column's worker only.
ENV_SIGNING_KEY = "INTERLOCK_SIGNING_KEY"


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


def anchor_path(home: Path, store: str | None = None) -> Path:
    """The file under `home` where the interlock column's gate anchors the receipt log of
    the journal at `store` (None: the default, `home/interlock.sqlite3`): a folder of its
    own, apart from the journal's, so a writer of the journal (or of its folder's files)
    does not rewrite it with the journal.

    One file per journal: heads anchored from one journal's log, checked against another
    journal's (a run with `--store postgresql://...` after runs on the default file, or on
    a new database), would read as a log rewritten after it was anchored. The default
    journal keeps `heads.jsonl`; another one's file is named by a digest of its location
    (a URL without its password; a path made absolute)."""
    folder = home / "anchor"
    if store is None:
        return folder / "heads.jsonl"
    if is_postgres_url(store) or "://" in store:
        where = PostgresStore.describe(store)
    else:
        where = str(Path(store).resolve())
        if where == str((home / "interlock.sqlite3").resolve()):
            return folder / "heads.jsonl"
    return folder / f"heads-{hashlib.sha256(where.encode()).hexdigest()[:16]}.jsonl"


def decision_path(home: Path, case: Case) -> Path:
    """Where the standard and checked workers save a case's decision under `home`."""
    return home / "decisions" / f"{case.case_id}-{case.column}.json"

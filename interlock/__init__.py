"""Interlock: make an AI agent's irreversible action safe to send, resend and recover.

An agent decided a refund. Between the decision and the send the worker can die, people
can act, and a retry can come hours later. `Gate` journals the intent, claims the action,
re-checks the approval and the state the decision was based on, finds its own earlier
send instead of sending twice, and writes a receipt of what it checked; `verify` checks
the receipts against each other and against Stripe.
"""

import importlib as _importlib
import typing as _typing

from interlock._approvals import UNSIGNED_APPROVALS, Approver, Approvers
from interlock._claims import Owner
from interlock._config import Timing
from interlock._effects import (
    ACTION_METADATA_KEY,
    CustomEffect,
    Effect,
    Found,
    ListsSends,
    Observation,
    Sent,
    StripeRefund,
    StripeTransfer,
)
from interlock._errors import (
    ActionError,
    ConfigError,
    IntentError,
    InterlockError,
    LeaseError,
    PaymentsAuthError,
    PaymentsError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    SchemaVersionError,
    StoreError,
)
from interlock._events import Event, GateEvent
from interlock._gate import REASON_WORLD_CHANGED, Gate, GateOptions, Outcome, new_action_id
from interlock._journal import (
    ActionState,
    Intent,
    Settlement,
    Store,
)
from interlock._leases import Lease
from interlock._money import format_amount
from interlock._payments import (
    Payment,
    Payments,
    Refund,
    Transfer,
    Transfers,
    is_test_key,
    refunds_fingerprint,
    transfers_fingerprint,
)
from interlock._receipts import Check, Receipt
from interlock._store_memory import MemoryStore
from interlock._store_postgres import PostgresStore, is_postgres_url
from interlock._store_sqlite import SQLiteStore
from interlock._stores import open_store
from interlock._verify import VerifyResult, verify

if _typing.TYPE_CHECKING:
    from interlock._stripe import (
        StripePayments,
        make_stripe_client,
    )

# Names whose module is imported on first use: the stripe SDK takes a large share of
# `import interlock` (it loads requests, and aiohttp when installed), and a process that
# only reads a store never calls Stripe.
_LAZY = {
    "make_stripe_client": "interlock._stripe",
    "StripePayments": "interlock._stripe",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'interlock' has no attribute {name!r}")
    loaded = _importlib.import_module(module)
    # Every lazy name of that module at once, so the next lookup is a plain global.
    globals().update({n: getattr(loaded, n) for n, m in _LAZY.items() if m == module})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [  # noqa: RUF022 - sorted case-insensitively, as httpx does
    "ACTION_METADATA_KEY",
    "ActionError",
    "ActionState",
    "Approver",
    "Approvers",
    "Check",
    "ConfigError",
    "CustomEffect",
    "Effect",
    "Event",
    "format_amount",
    "Found",
    "Gate",
    "GateEvent",
    "GateOptions",
    "Intent",
    "IntentError",
    "InterlockError",
    "is_postgres_url",
    "is_test_key",
    "Lease",
    "LeaseError",
    "ListsSends",
    "make_stripe_client",
    "MemoryStore",
    "new_action_id",
    "Observation",
    "open_store",
    "Outcome",
    "Owner",
    "Payment",
    "Payments",
    "PaymentsAuthError",
    "PaymentsError",
    "PaymentsRejectedError",
    "PaymentsUnsettledError",
    "PostgresStore",
    "REASON_WORLD_CHANGED",
    "Receipt",
    "Refund",
    "refunds_fingerprint",
    "SchemaVersionError",
    "Sent",
    "Settlement",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StripePayments",
    "StripeRefund",
    "StripeTransfer",
    "Timing",
    "Transfer",
    "Transfers",
    "transfers_fingerprint",
    "UNSIGNED_APPROVALS",
    "verify",
    "VerifyResult",
]

"""Interlock: make an AI agent's irreversible action safe to send, resend and recover.

An agent decided a refund. Between the decision and the send the worker can die, people
can act, and a retry can come hours later. `Gate` journals the intent, claims the action,
re-checks the approval and the state the decision was based on, finds its own earlier
send instead of sending twice, and writes a receipt of what it checked; `verify` checks
the receipts against each other and against Stripe.
"""

import typing as _typing

from interlock._core.approvals import UNSIGNED_APPROVALS, Approver, Approvers
from interlock._core.claims import Owner
from interlock._core.config import Timing
from interlock._core.effects import (
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
from interlock._core.errors import (
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
from interlock._core.events import Event, GateEvent
from interlock._core.gate import REASON_WORLD_CHANGED, Gate, GateOptions, Outcome, new_action_id
from interlock._core.heads import TreeHead
from interlock._core.journal import (
    ActionState,
    Intent,
    Settlement,
    Store,
)
from interlock._core.lazy import lazy_names as _lazy_names
from interlock._core.leases import Lease
from interlock._core.log import LogStatus
from interlock._core.money import format_amount
from interlock._core.payments import (
    Payment,
    Payments,
    Refund,
    Transfer,
    Transfers,
    is_test_key,
    refunds_fingerprint,
    transfers_fingerprint,
)
from interlock._core.receipts import Check, Receipt
from interlock._core.signing import KeyList, PublicKey, SigningKey
from interlock._stores.memory import MemoryStore
from interlock._stores.open import open_store
from interlock._stores.postgres import PostgresStore, is_postgres_url
from interlock._stores.sqlite import SQLiteStore

if _typing.TYPE_CHECKING:
    from interlock._core.anchors import (
        Anchor,
        AnchoredHead,
        AnchorError,
        FileAnchor,
        HttpWitness,
        TimestampAnchor,
    )
    from interlock._core.verify import VerifyResult, verify
    from interlock._stripe.adapter import (
        StripePayments,
        make_stripe_client,
    )

# Names whose module is imported on first use: the stripe SDK takes a large share of
# `import interlock` (it loads requests, and aiohttp when installed), and a process that
# only reads a store never calls Stripe. The anchors load urllib's HTTP client and TLS,
# which a gate that publishes no head does not need.
_ANCHORS = "interlock._core.anchors"
_LAZY = {
    "Anchor": _ANCHORS,
    "AnchoredHead": _ANCHORS,
    "AnchorError": _ANCHORS,
    "FileAnchor": _ANCHORS,
    "HttpWitness": _ANCHORS,
    "TimestampAnchor": _ANCHORS,
    "make_stripe_client": "interlock._stripe.adapter",
    "StripePayments": "interlock._stripe.adapter",
    # An auditor's, never a worker's: a restarted worker does not pay for it.
    "verify": "interlock._core.verify",
    "VerifyResult": "interlock._core.verify",
}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

__all__ = [  # noqa: RUF022 - sorted case-insensitively, as httpx does
    "ACTION_METADATA_KEY",
    "ActionError",
    "ActionState",
    "Anchor",
    "AnchoredHead",
    "AnchorError",
    "Approver",
    "Approvers",
    "Check",
    "ConfigError",
    "CustomEffect",
    "Effect",
    "Event",
    "FileAnchor",
    "format_amount",
    "Found",
    "Gate",
    "GateEvent",
    "GateOptions",
    "HttpWitness",
    "Intent",
    "IntentError",
    "InterlockError",
    "is_postgres_url",
    "is_test_key",
    "KeyList",
    "Lease",
    "LeaseError",
    "ListsSends",
    "LogStatus",
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
    "PublicKey",
    "REASON_WORLD_CHANGED",
    "Receipt",
    "Refund",
    "refunds_fingerprint",
    "SchemaVersionError",
    "Sent",
    "Settlement",
    "SigningKey",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StripePayments",
    "StripeRefund",
    "StripeTransfer",
    "TimestampAnchor",
    "Timing",
    "Transfer",
    "Transfers",
    "transfers_fingerprint",
    "TreeHead",
    "UNSIGNED_APPROVALS",
    "verify",
    "VerifyResult",
]

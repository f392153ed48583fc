"""Interlock: make an AI agent's irreversible action safe to send, resend and recover.

An agent decided a refund. Between the decision and the send the worker can die, people
can act, and a retry can come hours later. `Gate` journals the intent, claims the action,
re-checks the approval and the state the decision was based on, finds its own earlier
send instead of sending twice, and writes a receipt of what it checked; `verify` checks
the receipts against each other and against Stripe.
"""

from interlock._claims import Claim, Owner
from interlock._config import Switches, Timing
from interlock._effects import ACTION_METADATA_KEY, Effect, Found, Observation, StripeRefund
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
from interlock._gate import REASON_NO_TARGET, REASON_WORLD_CHANGED, Gate, Outcome, new_action_id
from interlock._journal import (
    ActionState,
    Intent,
    JournalRecord,
    Settlement,
    Store,
)
from interlock._leases import Lease
from interlock._payments import (
    COUNTING_REFUND_STATUSES,
    Payment,
    Payments,
    Refund,
    refunds_fingerprint,
)
from interlock._receipts import Check, Receipt
from interlock._store_memory import MemoryStore
from interlock._store_postgres import PostgresStore, is_postgres_url, redact_dsn
from interlock._store_sqlite import SQLiteStore
from interlock._stores import describe_store, open_store
from interlock._stripe import (
    DeadlineHTTPClient,
    StripePayments,
    make_stripe_client,
    payment_from_stripe,
    refund_from_stripe,
)
from interlock._verify import VerifyResult, verify

__all__ = [  # noqa: RUF022 - sorted case-insensitively, as httpx does
    "ACTION_METADATA_KEY",
    "ActionError",
    "ActionState",
    "Check",
    "Claim",
    "ConfigError",
    "COUNTING_REFUND_STATUSES",
    "DeadlineHTTPClient",
    "describe_store",
    "Effect",
    "Found",
    "Gate",
    "Intent",
    "IntentError",
    "InterlockError",
    "is_postgres_url",
    "JournalRecord",
    "Lease",
    "LeaseError",
    "make_stripe_client",
    "MemoryStore",
    "new_action_id",
    "Observation",
    "open_store",
    "Outcome",
    "Owner",
    "Payment",
    "payment_from_stripe",
    "Payments",
    "PaymentsAuthError",
    "PaymentsError",
    "PaymentsRejectedError",
    "PaymentsUnsettledError",
    "PostgresStore",
    "REASON_NO_TARGET",
    "REASON_WORLD_CHANGED",
    "Receipt",
    "redact_dsn",
    "Refund",
    "refund_from_stripe",
    "refunds_fingerprint",
    "SchemaVersionError",
    "Settlement",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StripePayments",
    "StripeRefund",
    "Switches",
    "Timing",
    "verify",
    "VerifyResult",
]

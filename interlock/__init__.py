"""Interlock: make an AI agent's irreversible action safe to send, resend and recover.

See `Gate` for the send path, `verify` for checking the receipts afterwards.
"""

from interlock._errors import (
    ActionError,
    ClaimError,
    ClaimHeldError,
    ClaimLostError,
    ConfigError,
    InterlockError,
    LeaseError,
    PaymentsError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    SchemaVersionError,
    StoreError,
)
from interlock._payments import Payment, Payments, Refund, refunds_fingerprint
from interlock._stripe import DeadlineHTTPClient, StripePayments, make_stripe_client

__all__ = [
    "ActionError",
    "ClaimError",
    "ClaimHeldError",
    "ClaimLostError",
    "ConfigError",
    "DeadlineHTTPClient",
    "InterlockError",
    "LeaseError",
    "make_stripe_client",
    "Payment",
    "Payments",
    "PaymentsError",
    "PaymentsRejectedError",
    "PaymentsUnsettledError",
    "Refund",
    "refunds_fingerprint",
    "SchemaVersionError",
    "StoreError",
    "StripePayments",
]

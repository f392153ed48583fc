"""The demo's payments: an in-memory Stripe model, served over HTTP or called in-process."""

from interlock_demo.payments.emulator import StripeEmulator
from interlock_demo.payments.inprocess import InProcessPayments
from interlock_demo.payments.model import PaymentsModel

__all__ = ["InProcessPayments", "PaymentsModel", "StripeEmulator"]

"""The testing kit: certify your own effect, and the doubles the library's own tests use.

- `certify`, `run_cell`, `cells` and their reports (`interlock.testing.certification`):
  every crash point x provider answer x outage, judged per cell, for your `Effect`;
- `CrashPoint` and `CRASH_POINTS`: where a worker dies, at a gate event or a step of its own;
- `PaymentsModel`, `InProcessPayments`, `StripeEmulator` and `serve_emulator`: Stripe's
  refunds, transfers and payouts in memory, in-process or over loopback HTTP for the real
  `stripe` SDK, with faults a test arms: `PaymentsModel.add_fault(kind, stage=...,
  hold_ms=..., count=..., payment_intent=..., on_start=..., on_commit=...)` (the kinds
  `FAULT_KINDS`, each kind's stages `FAULT_STAGES`: `hold` after or before the commit or
  never committing, `error_500` after the commit, before execution or with no refund,
  and `error_429`, `garbled_2xx`, `drop`, `trickle`, `read_401` ... `read_500`) returns a
  `Fault` whose events (`started`, `committed`, `ended`) a test waits on, and whose hooks
  `on_start` and `on_commit` run in the request's thread at those moments (a worker
  killed the instant Stripe saved its refund). The guide `docs/guides/testing.md` runs an
  example;
- `NoLookup` and `Emulate24h`: an effect wrapped to emulate a gate without its lookup, or
  a retry after Stripe pruned the idempotency key. Test doubles, never for production;
- `WitnessServer` and `TimestampAuthority`: a loopback HTTP witness and a loopback RFC 3161
  timestamp authority, for testing the anchors (`HttpWitness`, `TimestampAnchor`).

Names load on first use, so a worker that needs only `CrashPoint` does not import the
Stripe model and the emulator.
"""

import typing as _typing

from interlock._core.lazy import lazy_names as _lazy_names
from interlock.testing.crash_points import CrashPoint

if _typing.TYPE_CHECKING:
    from interlock._core.events import event_problem
    from interlock.testing.certification import (
        ANSWERS,
        CLAIMING_REPORTS,
        CRASH_POINTS,
        OUTAGES,
        UNSETTLED_REPORTS,
        Cell,
        CellResult,
        Certification,
        EffectWorld,
        cells,
        certify,
        run_cell,
        truthful,
    )
    from interlock.testing.emulation import Emulate24h, NoLookup
    from interlock.testing.emulator import TOKEN_ENV, StripeEmulator, serve_emulator
    from interlock.testing.inprocess import InProcessPayments
    from interlock.testing.model import (
        FAULT_KINDS,
        FAULT_STAGES,
        Fault,
        PaymentsModel,
        Reply,
        new_id,
    )
    from interlock.testing.tsa import TimestampAuthority
    from interlock.testing.witness import WitnessServer

_CERTIFICATION = "interlock.testing.certification"
_LAZY = {
    "ANSWERS": _CERTIFICATION,
    "CLAIMING_REPORTS": _CERTIFICATION,
    "CRASH_POINTS": _CERTIFICATION,
    "OUTAGES": _CERTIFICATION,
    "UNSETTLED_REPORTS": _CERTIFICATION,
    "Cell": _CERTIFICATION,
    "CellResult": _CERTIFICATION,
    "Certification": _CERTIFICATION,
    "EffectWorld": _CERTIFICATION,
    "cells": _CERTIFICATION,
    "certify": _CERTIFICATION,
    "run_cell": _CERTIFICATION,
    "truthful": _CERTIFICATION,
    "event_problem": "interlock._core.events",
    "Emulate24h": "interlock.testing.emulation",
    "NoLookup": "interlock.testing.emulation",
    "TOKEN_ENV": "interlock.testing.emulator",
    "StripeEmulator": "interlock.testing.emulator",
    "serve_emulator": "interlock.testing.emulator",
    "InProcessPayments": "interlock.testing.inprocess",
    "FAULT_KINDS": "interlock.testing.model",
    "FAULT_STAGES": "interlock.testing.model",
    "Fault": "interlock.testing.model",
    "PaymentsModel": "interlock.testing.model",
    "Reply": "interlock.testing.model",
    "new_id": "interlock.testing.model",
    "TimestampAuthority": "interlock.testing.tsa",
    "WitnessServer": "interlock.testing.witness",
}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

__all__ = [
    "ANSWERS",
    "CLAIMING_REPORTS",
    "CRASH_POINTS",
    "FAULT_KINDS",
    "FAULT_STAGES",
    "OUTAGES",
    "TOKEN_ENV",
    "UNSETTLED_REPORTS",
    "Cell",
    "CellResult",
    "Certification",
    "CrashPoint",
    "EffectWorld",
    "Emulate24h",
    "Fault",
    "InProcessPayments",
    "NoLookup",
    "PaymentsModel",
    "Reply",
    "StripeEmulator",
    "TimestampAuthority",
    "WitnessServer",
    "cells",
    "certify",
    "event_problem",
    "new_id",
    "run_cell",
    "serve_emulator",
    "truthful",
]

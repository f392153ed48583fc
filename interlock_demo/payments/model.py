"""An in-memory model of the slice of Stripe the demo uses.

One model with two faces: `emulator.py` serves it over HTTP to the real `stripe` SDK, and
`inprocess.py` calls it directly (mock mode and unit tests). Objects and errors have
Stripe's shapes; ids are random like Stripe's so that stores and runs never collide.

Idempotency follows Stripe's v1 rules: the status and body of the first request that began
executing are saved under its key and replayed (`Idempotent-Replayed: true`); the same key
with other parameters is a 400 `idempotency_error`; the same key while the first request is
still running is a 409; keys are pruned 24 hours after first use, by the model's clock,
which tests can advance. Validation errors are not saved, as at Stripe.

Faults for crash tests apply to the next refund requests: hold the answer after the
refund and its idempotent answer are saved (the answer is slow on its way back; a retry
meanwhile gets the replay), or with `commit=False` hold before committing (a slow request
whose key stays in progress: a retry meanwhile gets 409), answer 500 with or without
committing, or drop the connection after committing. A fault's `committed` event tells
the caller when the refund is in.
"""

from __future__ import annotations

import itertools
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

IDEMPOTENCY_KEY_TTL_S = 24 * 3600
FAULT_KINDS = ("hold", "error_500", "drop")
REFUND_STATUSES = ("pending", "requires_action", "succeeded", "failed", "canceled")
_COUNTING = ("pending", "requires_action", "succeeded")

JSONObj = dict[str, Any]


def new_id(prefix: str) -> str:
    """A random id in Stripe's style, such as `re_3Qx...`."""
    return f"{prefix}_{secrets.token_urlsafe(18).replace('-', 'x').replace('_', 'z')}"


class StripeModelError(Exception):
    """An answer in Stripe's error envelope.

    `saved` says whether the idempotency layer keeps it: Stripe saves results only once
    an endpoint began executing, so a validation error is not saved.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        saved: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.saved = saved

    def envelope(self) -> JSONObj:
        """The JSON body Stripe answers with."""
        error: JSONObj = {"type": self.type, "message": self.message}
        if self.code is not None:
            error["code"] = self.code
        if self.param is not None:
            error["param"] = self.param
        return {"error": error}


@dataclass
class Fault:
    """A fault armed for the next refund request(s)."""

    id: str
    kind: str
    hold_ms: int = 0
    commit: bool = True
    remaining: int = 1
    committed: threading.Event = field(default_factory=threading.Event)
    # Set when a request takes the fault: from then on its key is in progress.
    started: threading.Event = field(default_factory=threading.Event)
    fired: int = 0
    payment_intent: str | None = None
    # Called in-process once the refund and its idempotency result are saved (mock crashes).
    on_commit: Callable[[], None] | None = None

    def matches(self, params: JSONObj) -> bool:
        """Whether this fault applies to a refund request with these parameters."""
        return self.payment_intent is None or params.get("payment_intent") == self.payment_intent

    def describe(self) -> JSONObj:
        """The fault as the control interface shows it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "hold_ms": self.hold_ms,
            "commit": self.commit,
            "remaining": self.remaining,
            "fired": self.fired,
            "committed": self.committed.is_set(),
            "payment_intent": self.payment_intent,
        }


@dataclass
class Reply:
    """What a face sends back: status, JSON body, and how to deliver it."""

    status: int
    body: JSONObj
    replayed: bool = False
    drop: bool = False
    idempotency_key: str | None = None


@dataclass
class _KeyEntry:
    endpoint: str
    params: JSONObj
    created: float
    done: bool = False
    status: int = 0
    body: JSONObj = field(default_factory=dict)


class PaymentsModel:
    """Payment intents and refunds, Stripe's idempotency layer, a clock and faults.

    Thread-safe: the HTTP face calls it from many threads at once.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._offset = 0.0
        self._lock = threading.RLock()
        self._intents: dict[str, JSONObj] = {}
        self._refunds: dict[str, JSONObj] = {}
        self._order = itertools.count()
        self._seq: dict[str, int] = {}
        self._keys: dict[str, _KeyEntry] = {}
        self._faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []

    # -- clock -------------------------------------------------------------------------

    def now(self) -> float:
        """The model's time: the wall clock plus whatever tests advanced it by."""
        return self._clock() + self._offset

    def advance(self, seconds: float) -> float:
        """Move the model's clock forward (for idempotency-key expiry); returns now()."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError("the clock only moves forward, by a finite number of seconds")
        with self._lock:
            self._offset += seconds
            return self.now()

    # -- faults ------------------------------------------------------------------------

    def add_fault(
        self,
        kind: str,
        *,
        hold_ms: int = 0,
        commit: bool = True,
        count: int = 1,
        payment_intent: str | None = None,
        on_commit: Callable[[], None] | None = None,
    ) -> Fault:
        """Arm a fault for the next `count` refund-create requests (of one payment, if given)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; use one of {', '.join(FAULT_KINDS)}")
        if count < 1 or hold_ms < 0:
            raise ValueError("a fault needs count >= 1 and hold_ms >= 0")
        fault = Fault(
            id=new_id("flt"),
            kind=kind,
            hold_ms=hold_ms,
            commit=commit,
            remaining=count,
            payment_intent=payment_intent,
            on_commit=on_commit,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def faults(self) -> list[Fault]:
        """Every fault armed so far, spent ones included."""
        with self._lock:
            return list(self._faults)

    def fault(self, fault_id: str) -> Fault | None:
        """One fault by id."""
        with self._lock:
            return next((f for f in self._faults if f.id == fault_id), None)

    def clear_faults(self) -> None:
        """Disarm every fault."""
        with self._lock:
            for f in self._faults:
                f.remaining = 0

    def _take_fault(self, params: JSONObj) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if f.remaining > 0 and f.matches(params):
                    f.remaining -= 1
                    f.fired += 1
                    f.started.set()
                    return f
        return None

    # -- requests ----------------------------------------------------------------------

    def post(self, endpoint: str, params: JSONObj, idempotency_key: str | None = None) -> Reply:
        """Handle a POST (`payment_intents` or `refunds`) through the idempotency layer."""
        handlers: dict[str, Callable[[JSONObj], JSONObj]] = {
            "payment_intents": self._create_payment_intent,
            "refunds": self._create_refund,
        }
        handler = handlers.get(endpoint)
        if handler is None:
            err = StripeModelError(404, f"Unrecognized request URL (POST: /v1/{endpoint}).")
            return Reply(err.status, err.envelope())
        with self._lock:
            self.requests.append(("POST", endpoint))
            if idempotency_key is not None:
                replay = self._idempotency_check(endpoint, params, idempotency_key)
                if replay is not None:
                    return replay
        fault = self._take_fault(params) if endpoint == "refunds" else None
        status, body, saved, drop, committed = self._execute(handler, params, fault)
        if idempotency_key is not None:
            with self._lock:
                entry = self._keys.get(idempotency_key)
                if entry is not None and not entry.done:
                    if saved:
                        entry.done, entry.status, entry.body = True, status, body
                    else:
                        del self._keys[idempotency_key]
        if fault is not None and committed:
            # Stripe has finished: the refund and the key's saved answer are in. Only the
            # answer is still on its way back (a hold), or lost (a drop), or a 500.
            fault.committed.set()
            if fault.kind == "hold" and fault.commit:
                time.sleep(fault.hold_ms / 1000)
            if fault.on_commit is not None:
                fault.on_commit()
        return Reply(status, body, drop=drop, idempotency_key=idempotency_key)

    def _idempotency_check(self, endpoint: str, params: JSONObj, key: str) -> Reply | None:
        now = self.now()
        for k in [k for k, e in self._keys.items() if now - e.created >= IDEMPOTENCY_KEY_TTL_S]:
            del self._keys[k]
        entry = self._keys.get(key)
        if entry is None:
            self._keys[key] = _KeyEntry(endpoint, params, created=now)
            return None
        if entry.endpoint != endpoint or entry.params != params:
            err = StripeModelError(
                400,
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than '{key}' if you meant to "
                "execute a different request.",
                type="idempotency_error",
            )
            return Reply(err.status, err.envelope(), idempotency_key=key)
        if not entry.done:
            err = StripeModelError(
                409,
                "There is currently another in-progress request using this Idempotent Key "
                "(that probably means you submitted twice, and the other request is still "
                f"going through): {key}. Please try again later.",
                code="idempotency_key_in_use",
            )
            return Reply(err.status, err.envelope(), idempotency_key=key)
        return Reply(entry.status, entry.body, replayed=True, idempotency_key=key)

    def _execute(
        self, handler: Callable[[JSONObj], JSONObj], params: JSONObj, fault: Fault | None
    ) -> tuple[int, JSONObj, bool, bool, bool]:
        """Run a handler under a fault; returns (status, body, saved, drop, committed)."""
        kind = fault.kind if fault is not None else None
        if fault is not None and not fault.commit:
            if kind == "error_500":
                # A 500 before the endpoint began executing: nothing committed or saved.
                return 500, _server_error().envelope(), False, False, False
            if kind == "hold":
                # A slow request: it holds before committing, its key in progress meanwhile.
                time.sleep(fault.hold_ms / 1000)
        try:
            body = handler(params)
        except StripeModelError as e:
            return e.status, e.envelope(), e.saved, False, False
        if kind == "drop":
            return 200, body, True, True, True
        if kind == "error_500":
            # A 500 after the refund was committed: Stripe saves and replays the 500.
            return 500, _server_error().envelope(), True, False, True
        return 200, body, True, False, fault is not None

    def get_payment_intent(self, intent_id: str) -> Reply:
        """GET /v1/payment_intents/{id}."""
        with self._lock:
            self.requests.append(("GET", "payment_intents"))
            intent = self._intents.get(intent_id)
            if intent is None:
                err = _missing("payment_intent", intent_id, param="intent")
                return Reply(err.status, err.envelope())
            return Reply(200, dict(intent))

    def list_refunds(self, query: Mapping[str, str]) -> Reply:
        """GET /v1/refunds with payment_intent, limit, starting_after and ending_before."""
        with self._lock:
            self.requests.append(("GET", "refunds"))
            try:
                limit = int(query.get("limit", "10"))
            except ValueError:
                limit = -1
            if not 1 <= limit <= 100:
                err = StripeModelError(
                    400,
                    "Invalid limit: must be an integer between 1 and 100.",
                    param="limit",
                )
                return Reply(err.status, err.envelope())
            pi = query.get("payment_intent")
            if pi is not None and pi not in self._intents:
                err = _missing("payment_intent", pi, param="payment_intent")
                return Reply(err.status, err.envelope())
            rows = [r for r in self._refunds.values() if pi is None or r["payment_intent"] == pi]
            rows.sort(key=lambda r: (r["created"], self._seq[r["id"]]), reverse=True)
            after, before = query.get("starting_after"), query.get("ending_before")
            ids = [r["id"] for r in rows]
            for cursor, name in ((after, "starting_after"), (before, "ending_before")):
                if cursor is not None and cursor not in ids:
                    err = _missing("refund", cursor, param=name)
                    return Reply(err.status, err.envelope())
            if after is not None:
                rows = rows[ids.index(after) + 1 :]
                page, has_more = rows[:limit], len(rows) > limit
            elif before is not None:
                rows = rows[: ids.index(before)]
                page, has_more = rows[-limit:], len(rows) > limit
            else:
                page, has_more = rows[:limit], len(rows) > limit
            return Reply(
                200,
                {
                    "object": "list",
                    "data": [dict(r) for r in page],
                    "has_more": has_more,
                    "url": "/v1/refunds",
                },
            )

    def set_refund_status(self, refund_id: str, status: str) -> JSONObj:
        """Move a refund to another status (as Stripe does when a refund settles or fails)."""
        if status not in REFUND_STATUSES:
            raise ValueError(f"unknown refund status {status!r}")
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                raise KeyError(refund_id)
            refund["status"] = status
            return dict(refund)

    # -- handlers (called outside the idempotency lock, each takes the lock itself) -----

    def _create_payment_intent(self, p: JSONObj) -> JSONObj:
        amount = _positive_int(p, "amount")
        currency = p.get("currency")
        if not isinstance(currency, str) or not currency:
            raise StripeModelError(
                400, "Missing required param: currency.", code="parameter_missing", param="currency"
            )
        if amount < 50:
            raise StripeModelError(
                400,
                "Amount must be at least $0.50 usd",
                code="amount_too_small",
                param="amount",
            )
        metadata = _metadata(p)
        pm = p.get("payment_method")
        confirm = str(p.get("confirm", "false")).lower() == "true"
        types = p.get("payment_method_types")
        if isinstance(types, dict):
            types = list(types.values())
        if types is None:
            types = ["card"]
        if pm is not None and not (isinstance(pm, str) and pm.startswith("pm_card_")):
            raise _missing("payment_method", str(pm), param="payment_method")
        with self._lock:
            now = int(self.now())
            intent_id = new_id("pi")
            status = "requires_payment_method"
            charge = None
            if pm is not None:
                status = "requires_confirmation"
            if confirm:
                if pm is None:
                    raise StripeModelError(
                        400,
                        "You cannot confirm this PaymentIntent because it's missing a payment "
                        "method. To confirm the PaymentIntent with cus_... or pm_..., specify "
                        "a payment method attached to this customer along with the customer ID.",
                        code="payment_intent_unexpected_state",
                        param="payment_method",
                        saved=True,
                    )
                status = "succeeded"
                charge = new_id("ch")
            intent = {
                "id": intent_id,
                "object": "payment_intent",
                "amount": amount,
                "amount_received": amount if status == "succeeded" else 0,
                "currency": currency.lower(),
                "status": status,
                "latest_charge": charge,
                "payment_method": new_id("pm") if pm is not None else None,
                "payment_method_types": types,
                "capture_method": "automatic",
                "confirmation_method": "automatic",
                "metadata": metadata,
                "created": now,
                "livemode": False,
            }
            self._intents[intent_id] = intent
            return dict(intent)

    def _create_refund(self, p: JSONObj) -> JSONObj:
        pi = p.get("payment_intent")
        if not isinstance(pi, str) or not pi:
            raise StripeModelError(
                400,
                "One of the following params should be provided for this request: "
                "payment_intent or charge.",
                code="parameter_missing",
            )
        amount = _positive_int(p, "amount") if "amount" in p else None
        metadata = _metadata(p)
        reason = p.get("reason")
        if reason is not None and reason not in (
            "duplicate",
            "fraudulent",
            "requested_by_customer",
        ):
            raise StripeModelError(
                400,
                "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer",
                param="reason",
            )
        with self._lock:
            intent = self._intents.get(pi)
            if intent is None:
                raise _missing("payment_intent", pi, param="payment_intent")
            if intent["status"] != "succeeded":
                raise StripeModelError(
                    400,
                    f"This PaymentIntent ({pi}) does not have a successful charge to refund.",
                    code="charge_not_refundable",
                    saved=True,
                )
            refunded = sum(
                r["amount"]
                for r in self._refunds.values()
                if r["payment_intent"] == pi and r["status"] in _COUNTING
            )
            left = intent["amount"] - refunded
            if left <= 0:
                raise StripeModelError(
                    400,
                    f"Charge {intent['latest_charge']} has already been refunded.",
                    code="charge_already_refunded",
                    saved=True,
                )
            if amount is None:
                amount = left
            if amount > left:
                raise StripeModelError(
                    400,
                    f"Refund amount ({_dollars(amount)}) is greater than unrefunded amount on "
                    f"charge ({_dollars(left)})",
                    param="amount",
                    saved=True,
                )
            refund_id = new_id("re")
            refund = {
                "id": refund_id,
                "object": "refund",
                "amount": amount,
                "balance_transaction": new_id("txn"),
                "charge": intent["latest_charge"],
                "created": int(self.now()),
                "currency": intent["currency"],
                "metadata": metadata,
                "payment_intent": pi,
                "reason": reason,
                "status": "succeeded",
            }
            self._refunds[refund_id] = refund
            self._seq[refund_id] = next(self._order)
            return dict(refund)


def _server_error() -> StripeModelError:
    return StripeModelError(
        500,
        "An unknown error occurred while processing this request.",
        type="api_error",
    )


def _missing(kind: str, object_id: str, *, param: str) -> StripeModelError:
    return StripeModelError(
        404, f"No such {kind}: '{object_id}'", code="resource_missing", param=param
    )


def _positive_int(p: JSONObj, name: str) -> int:
    raw = p.get(name)
    if raw is None:
        raise StripeModelError(
            400, f"Missing required param: {name}.", code="parameter_missing", param=name
        )
    try:
        value = int(str(raw))
    except ValueError:
        value = -1
    if value <= 0:
        raise StripeModelError(
            400,
            f"Invalid {name}: must be a positive integer",
            code="parameter_invalid_integer",
            param=name,
        )
    return value


def _metadata(p: JSONObj) -> dict[str, str]:
    raw = p.get("metadata", {})
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise StripeModelError(
            400, "Invalid object", code="parameter_invalid_object", param="metadata"
        )
    return {str(k): str(v) for k, v in raw.items() if v != ""}


def _dollars(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"

"""An in-memory model of the slice of Stripe the gate uses, public through `interlock.testing`.

One model with two faces: `emulator.py` serves it over HTTP to the real `stripe`
SDK, and `inprocess.py` calls it directly (users' tests, the demo's mock mode).
Objects and errors have Stripe's shapes; ids are random like Stripe's so that stores and
runs never collide.

Idempotency follows Stripe's v1 rules: the status and body of the first request that began
executing are saved under its key and replayed (`Idempotent-Replayed: true`); the same key
with other parameters is a 400 `idempotency_error`; the same key while the first request is
still running is a 409; keys are pruned 24 hours after first use, by the model's clock,
which tests can advance. Validation errors are not saved, as at Stripe.

Requests are checked as strictly as Stripe checks them (`ACCEPTED_PARAMS`, metadata limits,
amount and currency rules), and objects carry the fields Stripe returns. Nothing scans the
whole store: keys are pruned from the oldest, refunds are found by payment and by their
place in creation order, so a create or a list costs the same among 10,000 refunds as
among 100 (`bench/emulator_scale.py`).

Transfers to connected accounts (`POST /v1/transfers`, `GET /v1/transfers?destination=`)
go through the same idempotency layer and are found by destination the same way; any
`acct_` id is taken as a connected account, the platform's balance is not modelled, and
faults and reversals do not apply to them.

Faults (`add_fault`, or `POST /_emulator/faults` over HTTP) provoke the answers a gate
must survive. The kinds, one tuple `FAULT_KINDS` that every side imports:

Refund creates (`POST /v1/refunds`); a replayed request takes no fault but a `drop`:
- `hold`, by stage: `after_commit` (the default): the refund and its idempotent answer are
  saved, then the answer is held `hold_ms` (a retry meanwhile gets the replay);
  `before_commit`: the request holds `hold_ms` with its key in progress (a retry gets 409),
  then commits, so with `hold_ms` past the client's deadline it lands after the client
  gave up; `never_commits`: it holds `hold_ms` with its key in progress, then makes
  nothing, releases the key and drops the connection.
- `error_500`, by stage: `before_execution`: nothing made, nothing saved; `after_commit`
  (the default): the refund is made and the 500 is saved and replayed under the key;
  `no_refund`: execution began and made nothing; the 500 is saved and replayed, and no
  refund is ever made under that key.
- `error_429`: rate limited (Stripe's `rate_limit` shape): nothing made, nothing saved.
- `garbled_2xx`: the refund is made and its answer saved, but the answer on the wire is a
  200 whose body is not JSON (a retry under the key replays the real refund).
- `drop`: the refund is made and saved, then the connection is closed with no answer. A
  replay under the same key takes an armed `drop` too (the answer is lost on the wire,
  whatever the server did): `count=2` also loses the one resend `DeadlineHTTPClient`
  makes on a new connection, so the caller sees the lost answer.
- `trickle`: the refund is made and saved, then the whole answer (status line, headers,
  body) is sent a byte at a time over `hold_ms`. Only the HTTP face trickles; in-process
  the answer comes at once.
`commit=True/False` is the older spelling of the stages `after_commit` and
`before_commit` (hold) or `before_execution` (error_500).

Reads (`GET /v1/refunds`, `GET /v1/payment_intents/{id}`): `read_401` and `read_403`
(Stripe's authentication and permission errors), `read_429` and `read_500`.

Every fault may be limited to one payment (`payment_intent`) and fires `count` times. Its
events let a test act at the right moment: `started` (the request took the fault; a create's
key is in progress from then on; `on_start` runs then, in the request's thread, so an
in-process test can act while the create is held), `committed` (the refund and its saved
answer are in; `on_commit` runs then) and `ended` (the model is done with the request).
"""

from __future__ import annotations

import bisect
import json
import math
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

IDEMPOTENCY_KEY_TTL_S = 24 * 3600
CREATE_FAULT_KINDS = ("hold", "error_500", "error_429", "garbled_2xx", "drop", "trickle")
READ_FAULT_KINDS = ("read_401", "read_403", "read_429", "read_500")
FAULT_KINDS = CREATE_FAULT_KINDS + READ_FAULT_KINDS
# A kind's stages, its default first; kinds not named here have no stage.
FAULT_STAGES: dict[str, tuple[str, ...]] = {
    "hold": ("after_commit", "before_commit", "never_commits"),
    "error_500": ("after_commit", "before_execution", "no_refund"),
}
# The older `commit` flag, as a stage.
_COMMIT_STAGES = {
    "hold": {True: "after_commit", False: "before_commit"},
    "error_500": {True: "after_commit", False: "before_execution"},
}
REFUND_STATUSES = ("pending", "requires_action", "succeeded", "failed", "canceled")
_COUNTING = ("pending", "requires_action", "succeeded")

# What each endpoint the demo uses accepts, as Stripe names it: a parameter, and for a
# hash the names inside it (metadata's are free). tests/loopback/test_emulator_strict.py holds
# these against the stripe SDK's params TypedDicts (`SDK_PARAMS`), so offline cannot
# accept what live refuses. A parameter Stripe knows but the emulator does not model is
# refused in words, never silently ignored.
ACCEPTED_PARAMS: dict[str, dict[str, frozenset[str]]] = {
    "POST /v1/payment_intents": {
        "amount": frozenset(),
        "currency": frozenset(),
        "confirm": frozenset(),
        "payment_method": frozenset(),
        "allowed_payment_method_types": frozenset(),
        "automatic_payment_methods": frozenset({"enabled", "allow_redirects"}),
        "description": frozenset(),
        "metadata": frozenset(),
    },
    "GET /v1/payment_intents/{id}": {},
    "POST /v1/refunds": {
        "payment_intent": frozenset(),
        "amount": frozenset(),
        "reason": frozenset(),
        "metadata": frozenset(),
    },
    "GET /v1/refunds": {
        "payment_intent": frozenset(),
        "created": frozenset({"gt", "gte", "lt", "lte"}),
        "limit": frozenset(),
        "starting_after": frozenset(),
        "ending_before": frozenset(),
    },
    "POST /v1/transfers": {
        "amount": frozenset(),
        "currency": frozenset(),
        "destination": frozenset(),
        "description": frozenset(),
        "metadata": frozenset(),
    },
    "GET /v1/transfers": {
        "destination": frozenset(),
        "created": frozenset({"gt", "gte", "lt", "lte"}),
        "limit": frozenset(),
        "starting_after": frozenset(),
        "ending_before": frozenset(),
    },
}
# The SDK's TypedDict listing what each endpoint accepts: (module, class), public names only.
SDK_PARAMS = {
    "POST /v1/payment_intents": ("stripe.params", "PaymentIntentCreateParams"),
    "GET /v1/payment_intents/{id}": ("stripe.params", "PaymentIntentRetrieveParams"),
    "POST /v1/refunds": ("stripe.params", "RefundCreateParams"),
    "GET /v1/refunds": ("stripe.params", "RefundListParams"),
    "POST /v1/transfers": ("stripe.params", "TransferCreateParams"),
    "GET /v1/transfers": ("stripe.params", "TransferListParams"),
}
METADATA_MAX_KEYS = 50
METADATA_KEY_MAX = 40
METADATA_VALUE_MAX = 500
# Stripe's largest amount for a charge, in the smallest unit (eight digits).
AMOUNT_MAX = 99_999_999
# Currencies the emulator models: symbol, decimals, minimum charge in the smallest unit.
CURRENCIES: dict[str, tuple[str, int, int]] = {
    "aud": ("$", 2, 50),
    "cad": ("$", 2, 50),
    "eur": ("€", 2, 50),
    "gbp": ("£", 2, 30),
    "jpy": ("¥", 0, 50),
    "usd": ("$", 2, 50),
}

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
    """A fault armed for the next matching request(s); see the module docstring."""

    id: str
    kind: str
    stage: str | None = None
    hold_ms: int = 0
    remaining: int = 1
    # Set when a request takes the fault: from then on a create's key is in progress.
    started: threading.Event = field(default_factory=threading.Event)
    # Set once the refund and its idempotent answer are saved.
    committed: threading.Event = field(default_factory=threading.Event)
    # Set when the model is done with the request (its answer, if any, is on its way).
    ended: threading.Event = field(default_factory=threading.Event)
    fired: int = 0
    payment_intent: str | None = None
    # Called in-process in the request's thread: on_start as a request first takes the
    # fault (an outage action while a create is held), on_commit once the refund is saved
    # (mock crashes).
    on_start: Callable[[], None] | None = None
    on_commit: Callable[[], None] | None = None

    @property
    def reads(self) -> bool:
        """Whether this fault applies to reads rather than refund creates."""
        return self.kind in READ_FAULT_KINDS

    def matches(self, payment_intent: object) -> bool:
        """Whether this fault applies to a request about this payment."""
        return self.payment_intent is None or payment_intent == self.payment_intent

    def describe(self) -> JSONObj:
        """The fault as the control interface shows it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "stage": self.stage,
            "hold_ms": self.hold_ms,
            "remaining": self.remaining,
            "fired": self.fired,
            "started": self.started.is_set(),
            "committed": self.committed.is_set(),
            "ended": self.ended.is_set(),
            "payment_intent": self.payment_intent,
        }


@dataclass
class Reply:
    """What a face sends back: status, JSON body, and how to deliver it.

    `drop` closes the connection with no answer; `garbled` sends the status with a body
    that is not JSON; `trickle_ms` spreads the whole answer over that long.
    """

    status: int
    body: JSONObj
    replayed: bool = False
    drop: bool = False
    garbled: bool = False
    trickle_ms: int = 0
    idempotency_key: str | None = None

    def wire_body(self) -> bytes:
        """The body's bytes as the HTTP face sends them."""
        data = json.dumps(self.body).encode()
        # A body cut short: what a proxy that gave up mid-answer leaves behind.
        return data[: len(data) // 2] if self.garbled else data


@dataclass
class _Done:
    """A request's result: its answer, whether it is saved under the key, and its delivery."""

    status: int
    body: JSONObj
    saved: bool = True
    made: bool = False
    drop: bool = False
    garbled: bool = False
    trickle_ms: int = 0


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

    def __init__(
        self, clock: Callable[[], float] = time.time, *, new_id: Callable[[str], str] = new_id
    ) -> None:
        """`clock` stamps objects and ages idempotency keys; `new_id(prefix)` names objects."""
        self._clock = clock
        self._new_id = new_id
        self._offset = 0.0
        self._lock = threading.RLock()
        self._intents: dict[str, JSONObj] = {}
        self._refunds: dict[str, JSONObj] = {}
        # Indexes, so that no create or list scans every refund or key: refund ids in
        # creation order (all, and per payment), each refund's place in that order, and
        # per payment the amount its counting refunds hold.
        self._order: list[str] = []
        self._by_payment: dict[str, list[str]] = {}
        self._seq: dict[str, int] = {}
        self._refunded: dict[str, int] = {}
        self._last_created = 0
        # Transfers, their ids in creation order (all, and per destination), and each
        # one's place in that order, so a cursor is found by bisection as for refunds.
        self._transfers: dict[str, JSONObj] = {}
        self._transfer_order: list[str] = []
        self._transfer_seq: dict[str, int] = {}
        self._by_destination: dict[str, list[str]] = {}
        # Ordered by first use, so pruning pops expired keys from the front.
        self._keys: OrderedDict[str, _KeyEntry] = OrderedDict()
        self._faults: dict[str, Fault] = {}
        self._armed: list[Fault] = []
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
        stage: str | None = None,
        hold_ms: int = 0,
        commit: bool | None = None,
        count: int = 1,
        payment_intent: str | None = None,
        on_start: Callable[[], None] | None = None,
        on_commit: Callable[[], None] | None = None,
    ) -> Fault:
        """Arm a fault for the next `count` matching requests (of one payment, if given).

        Raises `ValueError` naming what is wrong: an unknown kind or stage, a stage and
        `commit` that disagree, `count` below 1 or a negative `hold_ms`.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; use one of {', '.join(FAULT_KINDS)}")
        stages = FAULT_STAGES.get(kind, ())
        if commit is not None:
            if kind not in _COMMIT_STAGES:
                if not commit:
                    raise ValueError(f"a {kind} fault has no commit=false form")
            elif stage is None:
                stage = _COMMIT_STAGES[kind][commit]
            elif stage != _COMMIT_STAGES[kind][commit]:
                raise ValueError(f"stage {stage!r} and commit={commit} disagree; give one")
        if stage is None and stages:
            stage = stages[0]
        if stage is not None and stage not in stages:
            allowed = f"one of {', '.join(stages)}" if stages else "none"
            raise ValueError(f"unknown stage {stage!r} for a {kind} fault; use {allowed}")
        if count < 1 or hold_ms < 0:
            raise ValueError("a fault needs count >= 1 and hold_ms >= 0")
        fault = Fault(
            id=self._new_id("flt"),
            kind=kind,
            stage=stage,
            hold_ms=hold_ms,
            remaining=count,
            payment_intent=payment_intent,
            on_start=on_start,
            on_commit=on_commit,
        )
        with self._lock:
            self._faults[fault.id] = fault
            self._armed.append(fault)
        return fault

    def faults(self) -> list[Fault]:
        """Every fault armed so far, spent ones included."""
        with self._lock:
            return list(self._faults.values())

    def fault(self, fault_id: str) -> Fault | None:
        """One fault by id."""
        with self._lock:
            return self._faults.get(fault_id)

    def clear_faults(self) -> None:
        """Disarm every fault."""
        with self._lock:
            for f in self._armed:
                f.remaining = 0
            self._armed.clear()

    def _take_fault(
        self, reads: bool, payment_intent: object, kinds: tuple[str, ...] | None = None
    ) -> Fault | None:
        """The first armed fault for this request (of `kinds`, if given), spent by one;
        its start is signalled, and `on_start` runs, the first time it is taken (one
        outage for a fault however many answers it takes)."""
        with self._lock:
            for f in self._armed:
                if (
                    f.reads == reads
                    and f.matches(payment_intent)
                    and (kinds is None or f.kind in kinds)
                ):
                    f.remaining -= 1
                    f.fired += 1
                    if f.remaining == 0:
                        self._armed.remove(f)
                    first = not f.started.is_set()
                    f.started.set()
                    break
            else:
                return None
        if first and f.on_start is not None:
            f.on_start()
        return f

    # -- requests ----------------------------------------------------------------------

    def post(self, endpoint: str, params: JSONObj, idempotency_key: str | None = None) -> Reply:
        """Handle a POST (`payment_intents` or `refunds`) through the idempotency layer."""
        handlers: dict[str, Callable[[JSONObj], JSONObj]] = {
            "payment_intents": self._create_payment_intent,
            "refunds": self._create_refund,
            "transfers": self._create_transfer,
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
                    return self._lost_on_replay(endpoint, params, replay)
        fault = None
        try:
            if endpoint == "refunds":
                fault = self._take_fault(False, params.get("payment_intent"))
            done = self._execute(handler, params, fault)
            if idempotency_key is not None:
                with self._lock:
                    entry = self._keys.get(idempotency_key)
                    if entry is not None and not entry.done:
                        if done.saved:
                            entry.done, entry.status, entry.body = True, done.status, done.body
                        else:
                            del self._keys[idempotency_key]
            if fault is not None and done.made:
                # Stripe has finished: the refund and the key's saved answer are in. Only
                # the answer is still on its way back (held, trickled, lost, a 500 or garbled).
                fault.committed.set()
                if fault.kind == "hold" and fault.stage == "after_commit":
                    time.sleep(fault.hold_ms / 1000)
                if fault.on_commit is not None:
                    fault.on_commit()
            return Reply(
                done.status,
                done.body,
                drop=done.drop,
                garbled=done.garbled,
                trickle_ms=done.trickle_ms,
                idempotency_key=idempotency_key,
            )
        finally:
            if fault is not None:
                fault.ended.set()

    def _lost_on_replay(self, endpoint: str, params: JSONObj, replay: Reply) -> Reply:
        """A replayed answer, lost on the wire when a `drop` is armed: the network loses
        an answer whatever the server did, so a client's resend can be lost too."""
        if not (replay.replayed and endpoint == "refunds"):
            return replay
        lost = self._take_fault(False, params.get("payment_intent"), kinds=("drop",))
        if lost is None:
            return replay
        lost.ended.set()
        return replace(replay, drop=True)

    def _idempotency_check(self, endpoint: str, params: JSONObj, key: str) -> Reply | None:
        now = self.now()
        while self._keys:
            oldest = next(iter(self._keys.values()))
            if now - oldest.created < IDEMPOTENCY_KEY_TTL_S:
                break
            self._keys.popitem(last=False)
        entry = self._keys.get(key)
        if entry is not None and now - entry.created >= IDEMPOTENCY_KEY_TTL_S:
            # First used before a step back of the clock: the pruning above stopped short.
            del self._keys[key]
            entry = None
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
    ) -> _Done:
        """Run a handler under a fault."""
        kind, stage = (fault.kind, fault.stage) if fault is not None else (None, None)
        if kind == "error_429":
            return _Done(429, _rate_limited().envelope(), saved=False)
        if kind == "error_500" and stage == "before_execution":
            return _Done(500, _server_error().envelope(), saved=False)
        if kind == "error_500" and stage == "no_refund":
            return _Done(500, _server_error().envelope())
        if kind == "hold" and stage != "after_commit":
            assert fault is not None
            # A slow request: it holds before committing, its key in progress meanwhile.
            time.sleep(fault.hold_ms / 1000)
            if stage == "never_commits":
                return _Done(500, _server_error().envelope(), saved=False, drop=True)
        try:
            body = handler(params)
        except StripeModelError as e:
            return _Done(e.status, e.envelope(), saved=e.saved)
        if kind == "error_500":
            # A 500 after the refund was committed: Stripe saves and replays the 500.
            return _Done(500, _server_error().envelope(), made=True)
        return _Done(
            200,
            body,
            made=True,
            drop=kind == "drop",
            garbled=kind == "garbled_2xx",
            trickle_ms=fault.hold_ms if fault is not None and kind == "trickle" else 0,
        )

    def _read_fault(self, payment_intent: str | None) -> Reply | None:
        """The error a read fault armed for this payment answers with, if one is armed."""
        fault = self._take_fault(True, payment_intent)
        if fault is None:
            return None
        err = _READ_ERRORS[fault.kind]()
        fault.ended.set()
        return Reply(err.status, err.envelope())

    def get_payment_intent(self, intent_id: str, query: Mapping[str, Any] | None = None) -> Reply:
        """GET /v1/payment_intents/{id}."""
        with self._lock:
            self.requests.append(("GET", "payment_intents"))
        failed = self._read_fault(intent_id)
        if failed is not None:
            return failed
        try:
            _check_params("GET /v1/payment_intents/{id}", query or {})
        except StripeModelError as e:
            return Reply(e.status, e.envelope())
        with self._lock:
            intent = self._intents.get(intent_id)
            if intent is None:
                err = _missing("payment_intent", intent_id, param="intent")
                return Reply(err.status, err.envelope())
            return Reply(200, _copy(intent))

    def list_refunds(self, query: Mapping[str, Any]) -> Reply:
        """GET /v1/refunds with payment_intent, created (`gt`, `gte`, `lt`, `lte`), limit,
        starting_after and ending_before."""
        with self._lock:
            self.requests.append(("GET", "refunds"))
        failed = self._read_fault(query.get("payment_intent"))
        if failed is not None:
            return failed
        try:
            _check_params("GET /v1/refunds", query)
            for name in ("payment_intent", "starting_after", "ending_before"):
                if name in query:
                    _string(query, name)
            created = _created_bounds(query)
        except StripeModelError as e:
            return Reply(e.status, e.envelope())
        with self._lock:
            try:
                raw_limit = str(query.get("limit", "10"))
                limit = int(raw_limit) if _INTEGER.fullmatch(raw_limit) else -1
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
            ids = self._order if pi is None else self._by_payment.get(pi, [])
            if created:
                ids = self._created_within(ids, created, self._refunds)
            after, before = query.get("starting_after"), query.get("ending_before")
            # `ids` runs oldest first; a page runs newest first.
            if after is not None:
                at = self._position(ids, after, "starting_after")
                if isinstance(at, Reply):
                    return at
                start = max(0, at - limit)
                chosen, has_more = ids[start:at], start > 0
            elif before is not None:
                at = self._position(ids, before, "ending_before")
                if isinstance(at, Reply):
                    return at
                chosen, has_more = ids[at + 1 : at + 1 + limit], len(ids) - at - 1 > limit
            else:
                chosen, has_more = ids[-limit:], len(ids) > limit
            page = [self._refunds[rid] for rid in reversed(chosen)]
            return Reply(
                200,
                {
                    "object": "list",
                    "data": [_copy(r) for r in page],
                    "has_more": has_more,
                    "url": "/v1/refunds",
                },
            )

    def list_transfers(self, query: Mapping[str, Any]) -> Reply:
        """GET /v1/transfers with destination, created (`gt`, `gte`, `lt`, `lte`), limit,
        starting_after and ending_before."""
        with self._lock:
            self.requests.append(("GET", "transfers"))
        try:
            _check_params("GET /v1/transfers", query)
            for name in ("destination", "starting_after", "ending_before"):
                if name in query:
                    _string(query, name)
            created = _created_bounds(query)
            limit = _limit(query)
        except StripeModelError as e:
            return Reply(e.status, e.envelope())
        with self._lock:
            dest = query.get("destination")
            ids = self._transfer_order if dest is None else self._by_destination.get(dest, [])
            if created:
                ids = self._created_within(ids, created, self._transfers)
            after, before = query.get("starting_after"), query.get("ending_before")
            # `ids` runs oldest first; a page runs newest first.
            if after is not None or before is not None:
                cursor, param = (after, "starting_after") if after else (before, "ending_before")
                seq = self._transfer_seq.get(str(cursor))
                place = self._transfer_seq.__getitem__
                at = -1 if seq is None else bisect.bisect_left(ids, seq, key=place)
                if at < 0 or at >= len(ids) or ids[at] != cursor:
                    err = _missing("transfer", str(cursor), param=param)
                    return Reply(err.status, err.envelope())
                if after is not None:
                    start = max(0, at - limit)
                    chosen, has_more = ids[start:at], start > 0
                else:
                    chosen, has_more = ids[at + 1 : at + 1 + limit], len(ids) - at - 1 > limit
            else:
                chosen, has_more = ids[-limit:], len(ids) > limit
            return Reply(
                200,
                {
                    "object": "list",
                    "data": [_copy(self._transfers[t]) for t in reversed(chosen)],
                    "has_more": has_more,
                    "url": "/v1/transfers",
                },
            )

    def _created_within(
        self, ids: list[str], bounds: Mapping[str, int], objects: Mapping[str, JSONObj]
    ) -> list[str]:
        """The `objects` of `ids` (creation-ordered, so `created` never falls) within `bounds`."""

        def created(rid: str) -> int:
            return int(objects[rid]["created"])

        lo, hi = 0, len(ids)
        if "gte" in bounds:
            lo = max(lo, bisect.bisect_left(ids, bounds["gte"], key=created))
        if "gt" in bounds:
            lo = max(lo, bisect.bisect_right(ids, bounds["gt"], key=created))
        if "lte" in bounds:
            hi = min(hi, bisect.bisect_right(ids, bounds["lte"], key=created))
        if "lt" in bounds:
            hi = min(hi, bisect.bisect_left(ids, bounds["lt"], key=created))
        return ids[lo:hi]

    def _position(self, ids: list[str], cursor: str, param: str) -> int | Reply:
        """Where a cursor refund stands in `ids` (a creation-ordered list), by bisection."""
        seq = self._seq.get(cursor)
        at = -1 if seq is None else bisect.bisect_left(ids, seq, key=self._seq.__getitem__)
        if at < 0 or at >= len(ids) or ids[at] != cursor:
            err = _missing("refund", cursor, param=param)
            return Reply(err.status, err.envelope())
        return at

    def set_refund_status(self, refund_id: str, status: str) -> JSONObj:
        """Move a refund to another status (as Stripe does when a refund settles or fails)."""
        if status not in REFUND_STATUSES:
            raise ValueError(f"unknown refund status {status!r}")
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                raise KeyError(refund_id)
            was, now = refund["status"] in _COUNTING, status in _COUNTING
            if was != now:
                change = refund["amount"] if now else -refund["amount"]
                self._refunded[refund["payment_intent"]] += change
            refund["status"] = status
            return _copy(refund)

    # -- handlers (called outside the idempotency lock, each takes the lock itself) -----

    def _create_payment_intent(self, p: JSONObj) -> JSONObj:
        _check_params("POST /v1/payment_intents", p)
        amount = _amount(p, "amount")
        currency = _currency(p)
        minimum = CURRENCIES[currency][2]
        if amount < minimum:
            raise StripeModelError(
                400,
                f"Amount must be at least {_money(minimum, currency)} {currency}",
                code="amount_too_small",
                param="amount",
            )
        if amount > AMOUNT_MAX:
            raise StripeModelError(
                400,
                f"Amount must be no more than {_money(AMOUNT_MAX, currency)}",
                code="amount_too_large",
                param="amount",
            )
        metadata = _metadata(p)
        description = _string(p, "description") if "description" in p else None
        pm = _string(p, "payment_method") if "payment_method" in p else None
        confirm = _boolean(p, "confirm", False)
        types, automatic = _payment_method_types(p)
        if pm is not None and not pm.startswith("pm_card_"):
            raise _missing("payment_method", pm, param="payment_method")
        with self._lock:
            now = int(self.now())
            intent_id = self._new_id("pi")
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
                charge = self._new_id("ch")
            intent = {
                "id": intent_id,
                "object": "payment_intent",
                "amount": amount,
                "amount_capturable": 0,
                "amount_details": {"tip": {}},
                "amount_received": amount if status == "succeeded" else 0,
                "application": None,
                "application_fee_amount": None,
                "automatic_payment_methods": automatic,
                "canceled_at": None,
                "cancellation_reason": None,
                "capture_method": "automatic",
                "client_secret": f"{intent_id}_secret_{secrets.token_urlsafe(18)}",
                "confirmation_method": "automatic",
                "created": now,
                "currency": currency,
                "customer": None,
                "customer_account": None,
                "description": description,
                "excluded_payment_method_types": None,
                "last_payment_error": None,
                "latest_charge": charge,
                "livemode": False,
                "managed_payments": None,
                "metadata": metadata,
                "next_action": None,
                "on_behalf_of": None,
                "payment_method": self._new_id("pm") if pm is not None else None,
                "payment_method_configuration_details": None,
                "payment_method_options": {},
                "payment_method_types": types,
                "processing": None,
                "receipt_email": None,
                "review": None,
                "setup_future_usage": None,
                "shipping": None,
                "source": None,
                "statement_descriptor": None,
                "statement_descriptor_suffix": None,
                "status": status,
                "transfer_data": None,
                "transfer_group": None,
            }
            self._intents[intent_id] = intent
            return _copy(intent)

    def _create_refund(self, p: JSONObj) -> JSONObj:
        _check_params("POST /v1/refunds", p)
        if not p.get("payment_intent"):
            raise StripeModelError(
                400,
                "One of the following params should be provided for this request: "
                "payment_intent or charge.",
                code="parameter_missing",
            )
        pi = _string(p, "payment_intent")
        amount = _amount(p, "amount") if "amount" in p else None
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
            left = intent["amount"] - self._refunded.get(pi, 0)
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
            refund_id = self._new_id("re")
            refund = {
                "id": refund_id,
                "object": "refund",
                "amount": amount,
                "balance_transaction": self._new_id("txn"),
                "charge": intent["latest_charge"],
                "created": self._created(),
                "currency": intent["currency"],
                "customer": None,
                "customer_account": None,
                "destination_details": {"card": {"type": "refund"}, "type": "card"},
                "metadata": metadata,
                "payment_intent": pi,
                "payment_method": intent["payment_method"],
                "reason": reason,
                "receipt_number": None,
                "source_transfer_reversal": None,
                "status": "succeeded",
                "transfer_reversal": None,
            }
            self._refunds[refund_id] = refund
            self._seq[refund_id] = len(self._order)
            self._order.append(refund_id)
            self._by_payment.setdefault(pi, []).append(refund_id)
            self._refunded[pi] = self._refunded.get(pi, 0) + amount
            return _copy(refund)

    def _create_transfer(self, p: JSONObj) -> JSONObj:
        _check_params("POST /v1/transfers", p)
        amount = _amount(p, "amount")
        currency = _currency(p)
        if not p.get("destination"):
            raise StripeModelError(
                400,
                "Missing required param: destination.",
                code="parameter_missing",
                param="destination",
            )
        destination = _string(p, "destination")
        if not destination.startswith("acct_"):
            # The emulator takes any `acct_` id as a connected account of the platform.
            raise StripeModelError(
                400,
                f"No such destination: '{destination[:100]}'",
                code="resource_missing",
                param="destination",
                saved=True,
            )
        metadata = _metadata(p)
        description = p.get("description")
        if description is not None:
            description = _string(p, "description")
        with self._lock:
            transfer_id = self._new_id("tr")
            transfer = {
                "id": transfer_id,
                "object": "transfer",
                "amount": amount,
                "amount_reversed": 0,
                "balance_transaction": self._new_id("txn"),
                "created": self._created(),
                "currency": currency,
                "description": description,
                "destination": destination,
                "destination_payment": self._new_id("py"),
                "livemode": False,
                "metadata": metadata,
                "reversals": {
                    "object": "list",
                    "data": [],
                    "has_more": False,
                    "url": f"/v1/transfers/{transfer_id}/reversals",
                },
                "reversed": False,
                "source_transaction": None,
                "source_type": "card",
                "transfer_group": None,
            }
            self._transfers[transfer_id] = transfer
            self._transfer_seq[transfer_id] = len(self._transfer_order)
            self._transfer_order.append(transfer_id)
            self._by_destination.setdefault(destination, []).append(transfer_id)
            return _copy(transfer)

    def _created(self) -> int:
        """A refund's `created`: now, never before the last one, so creation order is time order."""
        self._last_created = max(self._last_created, int(self.now()))
        return self._last_created


def _server_error() -> StripeModelError:
    return StripeModelError(
        500,
        "An unknown error occurred while processing this request.",
        type="api_error",
    )


def _rate_limited() -> StripeModelError:
    return StripeModelError(
        429,
        "Too many requests hit the API too quickly. We recommend an exponential backoff of "
        "your requests.",
        code="rate_limit",
    )


def _unauthenticated() -> StripeModelError:
    # Stripe names the key it refused (masked); the emulator shows no part of any key.
    return StripeModelError(401, "Invalid API Key provided.")


def _forbidden() -> StripeModelError:
    return StripeModelError(
        403,
        "The provided key does not have the required permissions for this endpoint on "
        "account 'acct_emulator'. Having the 'rak_refund_read' permission would allow this "
        "request to continue.",
    )


_READ_ERRORS: dict[str, Callable[[], StripeModelError]] = {
    "read_401": _unauthenticated,
    "read_403": _forbidden,
    "read_429": _rate_limited,
    "read_500": _server_error,
}


def _missing(kind: str, object_id: str, *, param: str) -> StripeModelError:
    return StripeModelError(
        404, f"No such {kind}: '{object_id}'", code="resource_missing", param=param
    )


def _copy(obj: JSONObj) -> JSONObj:
    """A copy deep enough that a caller cannot change the model's nested objects."""
    return {
        k: _copy(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
        for k, v in obj.items()
    }


def _check_params(endpoint: str, params: Mapping[str, Any]) -> None:
    """Refuse what `endpoint` does not accept, as Stripe does, before anything else."""
    accepted = ACCEPTED_PARAMS[endpoint]
    for name, value in params.items():
        if name not in accepted:
            raise _unaccepted(endpoint, name)
        inner = accepted[name]
        if inner and value != "":
            if not isinstance(value, dict):
                raise StripeModelError(
                    400, "Invalid object", code="parameter_invalid_object", param=name
                )
            for key in value:
                if key not in inner:
                    raise _unaccepted(endpoint, f"{name}[{key}]")


def sdk_params(endpoint: str) -> frozenset[str]:
    """The parameters the installed stripe SDK lists for `endpoint` (request options aside)."""
    import importlib

    from stripe import RequestOptions

    module, name = SDK_PARAMS[endpoint]
    typed = getattr(importlib.import_module(module), name)
    keys: frozenset[str] = typed.__required_keys__ | typed.__optional_keys__
    return keys - (RequestOptions.__required_keys__ | RequestOptions.__optional_keys__)


def _unaccepted(endpoint: str, name: str) -> StripeModelError:
    if endpoint == "POST /v1/payment_intents" and name == "payment_method_types":
        # Stripe removed it as a writable parameter (API 2026-09-30.endive, the SDK's).
        return StripeModelError(
            400,
            "payment_method_types is no longer supported on this API version. Use "
            "allowed_payment_method_types or excluded_payment_method_types, or dynamic "
            "payment methods.",
            code="payment_method_types_no_longer_supported",
            param=name,
        )
    if "[" not in name and name in sdk_params(endpoint):
        return StripeModelError(
            400,
            f"The emulator does not model parameter {name} ({endpoint}), which Stripe "
            "accepts: leave it out offline, or teach interlock/testing/model.py.",
            code="parameter_unknown",
            param=name,
        )
    return StripeModelError(
        400, f"Received unknown parameter: {name}", code="parameter_unknown", param=name
    )


def _string(p: Mapping[str, Any], name: str) -> str:
    value = p.get(name)
    if not isinstance(value, str):
        raise StripeModelError(
            400, f"Invalid string: {value!r}", code="parameter_invalid_string", param=name
        )
    return value


_INTEGER = re.compile(r"-?[0-9]+")


def _amount(p: JSONObj, name: str) -> int:
    raw = p.get(name)
    if raw is None or raw == "":
        raise StripeModelError(
            400, f"Missing required param: {name}.", code="parameter_missing", param=name
        )
    text = str(raw)
    # ASCII digits only, as Stripe reads them: int() alone takes "٣٠٠" and "５０", and
    # str.isdigit() passes "²", which int() then refuses.
    if isinstance(raw, bool) or _INTEGER.fullmatch(text) is None:
        raise StripeModelError(
            400, f"Invalid integer: {text[:100]}", code="parameter_invalid_integer", param=name
        )
    value = int(text)
    if value < 1:
        raise StripeModelError(
            400,
            "This value must be greater than or equal to 1.",
            code="parameter_invalid_integer",
            param=name,
        )
    return value


def _created_bounds(query: Mapping[str, Any]) -> dict[str, int]:
    """A list's `created` filter (`created[gte]=...`) as integer bounds, after
    `_check_params`, which refuses any other shape (an empty value is no filter)."""
    raw = query.get("created")
    if not isinstance(raw, dict):
        return {}
    bounds: dict[str, int] = {}
    for op, value in raw.items():
        text = str(value)
        if _INTEGER.fullmatch(text) is None:
            raise StripeModelError(
                400,
                f"Invalid integer: {text[:100]}",
                code="parameter_invalid_integer",
                param=f"created[{op}]",
            )
        bounds[op] = int(text)
    return bounds


def _limit(query: Mapping[str, Any]) -> int:
    try:
        limit = int(str(query.get("limit", "10")))
    except ValueError:
        limit = -1
    if not 1 <= limit <= 100:
        raise StripeModelError(
            400, "Invalid limit: must be an integer between 1 and 100.", param="limit"
        )
    return limit


def _currency(p: JSONObj) -> str:
    raw = p.get("currency")
    if raw is None or raw == "":
        raise StripeModelError(
            400, "Missing required param: currency.", code="parameter_missing", param="currency"
        )
    currency = str(raw).lower()
    if currency not in CURRENCIES:
        raise StripeModelError(
            400,
            f"Invalid currency: {str(raw)[:20]}. The emulator models "
            f"{', '.join(CURRENCIES)} (Stripe supports more).",
            code="parameter_invalid_string",
            param="currency",
        )
    return currency


def _money(amount: int, currency: str) -> str:
    symbol, decimals, _ = CURRENCIES[currency]
    if decimals == 0:
        return f"{symbol}{amount:,}"
    return f"{symbol}{amount // 100:,}.{amount % 100:02d}"


def _boolean(p: JSONObj, name: str, default: bool) -> bool:
    raw = p.get(name, default)
    if isinstance(raw, bool):
        return raw
    if raw in ("true", "false"):
        return bool(raw == "true")
    raise StripeModelError(
        400, f"Invalid boolean: {str(raw)[:100]}", code="parameter_invalid_boolean", param=name
    )


def _payment_method_types(p: JSONObj) -> tuple[list[str], JSONObj | None]:
    """The intent's payment_method_types and automatic_payment_methods, from what was asked."""
    allowed, automatic = p.get("allowed_payment_method_types"), p.get("automatic_payment_methods")
    if allowed is not None and automatic is not None:
        raise StripeModelError(
            400,
            "You may only specify one of these parameters: allowed_payment_method_types, "
            "automatic_payment_methods.",
            param="allowed_payment_method_types",
        )
    if automatic is not None:
        enabled = _boolean(automatic, "enabled", False)
        redirects = automatic.get("allow_redirects", "always")
        if redirects not in ("always", "never"):
            raise StripeModelError(
                400,
                "Invalid automatic_payment_methods[allow_redirects]: must be one of always or "
                "never",
                param="automatic_payment_methods[allow_redirects]",
            )
        return ["card"], {"allow_redirects": redirects, "enabled": enabled}
    if allowed is None:
        return ["card"], None
    if not isinstance(allowed, list) or not all(isinstance(t, str) and t for t in allowed):
        raise StripeModelError(
            400,
            "Invalid array",
            code="parameter_invalid_array",
            param="allowed_payment_method_types",
        )
    return list(allowed), None


def _metadata(p: JSONObj) -> dict[str, str]:
    raw = p.get("metadata", {})
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise StripeModelError(
            400, "Invalid object", code="parameter_invalid_object", param="metadata"
        )
    metadata: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise StripeModelError(
                400,
                f"Invalid metadata[{key}]: metadata keys and values must be strings",
                param="metadata",
            )
        if "[" in key or "]" in key:
            raise StripeModelError(
                400, "Metadata keys can't contain square brackets ([ or ]).", param="metadata"
            )
        if len(key) > METADATA_KEY_MAX:
            raise StripeModelError(
                400,
                f"Metadata keys can have up to {METADATA_KEY_MAX} characters, but you passed "
                f"in a key that is {len(key)} characters. Invalid key: {key[:100]}",
                param="metadata",
            )
        if len(value) > METADATA_VALUE_MAX:
            raise StripeModelError(
                400,
                f"Metadata values can have up to {METADATA_VALUE_MAX} characters, but you "
                f"passed in a value that is {len(value)} characters.",
                param="metadata",
            )
        if value != "":
            metadata[key] = value
    if len(metadata) > METADATA_MAX_KEYS:
        raise StripeModelError(
            400,
            f"Metadata can have up to {METADATA_MAX_KEYS} keys, but you've set {len(metadata)}.",
            param="metadata",
        )
    return metadata


def _dollars(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"

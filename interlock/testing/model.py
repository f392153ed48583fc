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

Which endpoints exist, what each accepts and how its parameters are checked is one table,
`ROUTES` in `routes.py`, which the HTTP face routes by; each row names the model's
operation that answers it. Objects carry the fields Stripe returns. Nothing scans the
whole store: keys are pruned from the oldest, refunds and transfers are found by payment or
destination and by their place in creation order (`_Listed`), so a create or a list costs
the same among 10,000 refunds as among 100 (`bench/emulator_scale.py`).

Transfers to connected accounts (`POST /v1/transfers`, `GET /v1/transfers?destination=`)
go through the same idempotency layer and are found by destination the same way; any
`acct_` id is taken as a connected account, the platform's balance is not modelled, and
faults and reversals do not apply to them. Payouts to the platform's bank accounts
(`POST /v1/payouts`, `GET /v1/payouts?destination=`) are modelled the same way: any `ba_`
id is a bank account of the platform, and a payout stays `pending`.

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
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from interlock.testing.routes import ROUTES, JSONObj, Route, StripeModelError, missing

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


def new_id(prefix: str) -> str:
    """A random id in Stripe's style, such as `re_3Qx...`."""
    return f"{prefix}_{secrets.token_urlsafe(18).replace('-', 'x').replace('_', 'z')}"


@dataclass
class Fault:
    """A fault armed for the next matching request(s), as `PaymentsModel.add_fault` returns it.

    A test waits on its events to act at the right moment: `started` is set when a request
    takes the fault (a refund create's idempotency key is in progress from then on),
    `committed` once the refund and its saved answer are in, `ended` when the model is
    done with the request. `fired` counts the requests that took it, `remaining` those it
    still waits for. `on_start` and `on_commit`, called in the request's thread at
    `started` and `committed`, let an in-process test act then (a hand refund while a
    create is held; a worker that dies the moment Stripe saved its refund).
    """

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
    params: Mapping[str, Any]
    created: float
    done: bool = False
    status: int = 0
    body: JSONObj = field(default_factory=dict)


class _Listed:
    """Objects of one kind in creation order (so `created` never falls along it), and by
    one field (a refund's payment, a transfer's destination), each with its place in that
    order: a page or a cursor is found by bisection, never by a scan of them all."""

    def __init__(self, kind: str, by: str) -> None:
        self.kind = kind
        self.by = by
        self.objects: dict[str, JSONObj] = {}
        self._order: list[str] = []
        self._seq: dict[str, int] = {}
        self._by: dict[str, list[str]] = {}

    def add(self, obj: JSONObj) -> JSONObj:
        """Keep a new object (the newest); returns a copy of it."""
        self.objects[obj["id"]] = obj
        self._seq[obj["id"]] = len(self._order)
        self._order.append(obj["id"])
        self._by.setdefault(obj[self.by], []).append(obj["id"])
        return _copy(obj)

    def page(self, a: Mapping[str, Any]) -> JSONObj:
        """A list page, newest first, for a list route's checked parameters: the `by`
        field, `created` bounds, `limit`, `starting_after` and `ending_before`."""
        key, size = a[self.by], a["limit"]
        ids = self._order if key is None else self._by.get(key, [])
        if a["created"]:
            ids = self._created_within(ids, a["created"])
        after, before = a["starting_after"], a["ending_before"]
        # `ids` runs oldest first; a page runs newest first.
        if after is not None:
            at = self._position(ids, after, "starting_after")
            start = max(0, at - size)
            chosen, has_more = ids[start:at], start > 0
        elif before is not None:
            at = self._position(ids, before, "ending_before")
            chosen, has_more = ids[at + 1 : at + 1 + size], len(ids) - at - 1 > size
        else:
            chosen, has_more = ids[-size:], len(ids) > size
        return {
            "object": "list",
            "data": [_copy(self.objects[i]) for i in reversed(chosen)],
            "has_more": has_more,
            "url": f"/v1/{self.kind}s",
        }

    def _created_within(self, ids: list[str], bounds: Mapping[str, int]) -> list[str]:
        """The objects of `ids` created within `bounds`."""

        def created(oid: str) -> int:
            return int(self.objects[oid]["created"])

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

    def _position(self, ids: list[str], cursor: str, param: str) -> int:
        """Where a cursor object stands in `ids`, or Stripe's 404 naming `param`."""
        seq = self._seq.get(cursor)
        at = -1 if seq is None else bisect.bisect_left(ids, seq, key=self._seq.__getitem__)
        if at < 0 or at >= len(ids) or ids[at] != cursor:
            raise missing(self.kind, cursor, param=param)
        return at


class PaymentsModel:
    """Payment intents, refunds and transfers, Stripe's idempotency layer, a clock and faults.

    `InProcessPayments(model)` calls it in this process; `StripeEmulator(model)` serves it
    over loopback HTTP to the real `stripe` SDK. `add_fault` arms the answers a gate must
    survive (a refund made and its answer lost, a 500 after the commit, a held create),
    `advance` moves its clock past the 24 hours Stripe keeps an idempotency key. The guide
    `docs/guides/testing.md` runs an example. Thread-safe: the HTTP face calls it from many
    threads at once.
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
        self._refunds = _Listed("refund", "payment_intent")
        # Per payment, the amount its counting refunds hold.
        self._refunded: dict[str, int] = {}
        # Any `acct_` id is taken as a connected account; the platform's balance is not modelled.
        self._transfers = _Listed("transfer", "destination")
        self._payouts = _Listed("payout", "destination")
        self._last_created = 0
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

        Refund creates (`POST /v1/refunds`; a replayed request takes no fault but a
        `drop`), by `kind` and `stage` (`FAULT_STAGES`; the first is the default):

        - `hold`: `after_commit`, the refund and its answer are saved, then the answer is
          held `hold_ms` (a retry meanwhile gets the replay); `before_commit`, the request
          holds `hold_ms` with its key in progress (a retry gets 409), then commits;
          `never_commits`, it holds `hold_ms`, then makes nothing, releases the key and
          drops the connection.
        - `error_500`: `after_commit`, the refund is made and the 500 saved and replayed
          under the key (the gate finds its own refund: `adopted`); `before_execution`,
          nothing made, nothing saved; `no_refund`, execution began and made nothing, the
          500 is saved and replayed, and no refund is ever made under that key (the gate
          leaves it unknown, never resent).
        - `error_429`: rate limited, nothing made, nothing saved.
        - `garbled_2xx`: the refund is made and saved, the answer is a 200 that is not JSON.
        - `drop`: the refund is made and saved, then the connection closes with no answer
          (a replay under the key takes an armed `drop` too).
        - `trickle`: the refund is made and saved, then its answer is sent a byte at a time
          over `hold_ms` (over HTTP only; in-process it comes at once).

        Reads (`GET /v1/refunds`, `GET /v1/payment_intents/{id}`): `read_401`, `read_403`,
        `read_429`, `read_500`. `commit=True/False` is the older spelling of the stages
        `after_commit` and `before_commit` (hold) or `before_execution` (error_500).

        `on_start()` runs in the request's thread as it first takes the fault, `on_commit()`
        once the refund and its answer are saved; in-process, an exception a hook raises
        reaches the caller in place of the answer (raise one that is not an `Exception` to
        stand for a worker killed there). The returned `Fault` carries the events a test
        waits on.

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

    def serve(
        self,
        route: Route,
        ident: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> Reply:
        """Answer a request for `route` (its path's id `ident`): a POST through the
        idempotency layer and create faults, a GET through read faults."""
        if route.method == "POST":
            return self._create(route, params, idempotency_key)
        return self._read(route, ident, params)

    def post(
        self, endpoint: str, params: Mapping[str, Any], idempotency_key: str | None = None
    ) -> Reply:
        """POST /v1/{endpoint} (`payment_intents`, `refunds`, `transfers`, `payouts`)."""
        route = ROUTES.get(f"POST /v1/{endpoint}")
        if route is None:
            err = StripeModelError(404, f"Unrecognized request URL (POST: /v1/{endpoint}).")
            return Reply(err.status, err.envelope())
        return self._create(route, params, idempotency_key)

    def get_payment_intent(self, intent_id: str, query: Mapping[str, Any] | None = None) -> Reply:
        """GET /v1/payment_intents/{id}."""
        return self._read(ROUTES["GET /v1/payment_intents/{id}"], intent_id, query or {})

    def list_refunds(self, query: Mapping[str, Any]) -> Reply:
        """GET /v1/refunds with payment_intent, created (`gt`, `gte`, `lt`, `lte`), limit,
        starting_after and ending_before."""
        return self._read(ROUTES["GET /v1/refunds"], "", query)

    def list_transfers(self, query: Mapping[str, Any]) -> Reply:
        """GET /v1/transfers with destination, created (`gt`, `gte`, `lt`, `lte`), limit,
        starting_after and ending_before."""
        return self._read(ROUTES["GET /v1/transfers"], "", query)

    def _operation(self, route: Route) -> Callable[[str, Mapping[str, Any]], JSONObj]:
        """The method a route's row names."""
        operation: Callable[[str, Mapping[str, Any]], JSONObj] = getattr(self, route.operation)
        return operation

    def _create(
        self, route: Route, params: Mapping[str, Any], idempotency_key: str | None
    ) -> Reply:
        operation = self._operation(route)
        with self._lock:
            self.requests.append(("POST", route.resource))
            if idempotency_key is not None:
                replay = self._idempotency_check(route.endpoint, params, idempotency_key)
                if replay is not None:
                    return self._lost_on_replay(route, params, replay)
        fault = None
        try:
            if route.faults_on is not None:
                fault = self._take_fault(False, params.get(route.faults_on))
            done = self._execute(lambda p: operation("", route.parse(p)), params, fault)
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

    def _lost_on_replay(self, route: Route, params: Mapping[str, Any], replay: Reply) -> Reply:
        """A replayed answer, lost on the wire when a `drop` is armed: the network loses
        an answer whatever the server did, so a client's resend can be lost too."""
        if not (replay.replayed and route.faults_on is not None):
            return replay
        lost = self._take_fault(False, params.get(route.faults_on), kinds=("drop",))
        if lost is None:
            return replay
        lost.ended.set()
        return replace(replay, drop=True)

    def _idempotency_check(
        self, endpoint: str, params: Mapping[str, Any], key: str
    ) -> Reply | None:
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
        self,
        handler: Callable[[Mapping[str, Any]], JSONObj],
        params: Mapping[str, Any],
        fault: Fault | None,
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

    def _read(self, route: Route, ident: str, query: Mapping[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(("GET", route.resource))
        if route.faults_on is not None:
            payment = ident if route.faults_on == "id" else query.get(route.faults_on)
            failed = self._read_fault(payment)
            if failed is not None:
                return failed
        try:
            return Reply(200, self._operation(route)(ident, route.parse(query)))
        except StripeModelError as e:
            return Reply(e.status, e.envelope())

    def _read_fault(self, payment_intent: str | None) -> Reply | None:
        """The error a read fault armed for this payment answers with, if one is armed."""
        fault = self._take_fault(True, payment_intent)
        if fault is None:
            return None
        err = _READ_ERRORS[fault.kind]()
        fault.ended.set()
        return Reply(err.status, err.envelope())

    def set_refund_status(self, refund_id: str, status: str) -> JSONObj:
        """Move a refund to another status (as Stripe does when a refund settles or fails)."""
        if status not in REFUND_STATUSES:
            raise ValueError(f"unknown refund status {status!r}")
        with self._lock:
            refund = self._refunds.objects.get(refund_id)
            if refund is None:
                raise KeyError(refund_id)
            was, now = refund["status"] in _COUNTING, status in _COUNTING
            if was != now:
                change = refund["amount"] if now else -refund["amount"]
                self._refunded[refund["payment_intent"]] += change
            refund["status"] = status
            return _copy(refund)

    # -- operations: one per route, given the path's id and the checked parameters; called
    # outside the idempotency lock, each takes the lock itself ---------------------------

    def _create_payment_intent(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        pm = a["payment_method"]
        types, automatic = a["automatic_payment_methods"]
        if pm is not None and not pm.startswith("pm_card_"):
            raise missing("payment_method", pm, param="payment_method")
        with self._lock:
            now = int(self.now())
            intent_id = self._new_id("pi")
            status = "requires_payment_method"
            charge = None
            if pm is not None:
                status = "requires_confirmation"
            if a["confirm"]:
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
                "amount": a["amount"],
                "amount_capturable": 0,
                "amount_details": {"tip": {}},
                "amount_received": a["amount"] if status == "succeeded" else 0,
                "application": None,
                "application_fee_amount": None,
                "automatic_payment_methods": automatic,
                "canceled_at": None,
                "cancellation_reason": None,
                "capture_method": "automatic",
                "client_secret": f"{intent_id}_secret_{secrets.token_urlsafe(18)}",
                "confirmation_method": "automatic",
                "created": now,
                "currency": a["currency"],
                "customer": None,
                "customer_account": None,
                "description": a["description"],
                "excluded_payment_method_types": None,
                "last_payment_error": None,
                "latest_charge": charge,
                "livemode": False,
                "managed_payments": None,
                "metadata": a["metadata"],
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

    def _get_payment_intent(self, intent_id: str, _: Mapping[str, Any]) -> JSONObj:
        with self._lock:
            intent = self._intents.get(intent_id)
            if intent is None:
                raise missing("payment_intent", intent_id, param="intent")
            return _copy(intent)

    def _create_refund(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        pi, amount = a["payment_intent"], a["amount"]
        with self._lock:
            intent = self._intents.get(pi)
            if intent is None:
                raise missing("payment_intent", pi, param="payment_intent")
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
                "metadata": a["metadata"],
                "payment_intent": pi,
                "payment_method": intent["payment_method"],
                "reason": a["reason"],
                "receipt_number": None,
                "source_transfer_reversal": None,
                "status": "succeeded",
                "transfer_reversal": None,
            }
            self._refunded[pi] = self._refunded.get(pi, 0) + amount
            return self._refunds.add(refund)

    def _list_refunds(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        with self._lock:
            pi = a["payment_intent"]
            if pi is not None and pi not in self._intents:
                raise missing("payment_intent", pi, param="payment_intent")
            return self._refunds.page(a)

    def _create_transfer(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        destination = a["destination"]
        if not destination.startswith("acct_"):
            # The emulator takes any `acct_` id as a connected account of the platform.
            raise StripeModelError(
                400,
                f"No such destination: '{destination[:100]}'",
                code="resource_missing",
                param="destination",
                saved=True,
            )
        with self._lock:
            transfer_id = self._new_id("tr")
            transfer = {
                "id": transfer_id,
                "object": "transfer",
                "amount": a["amount"],
                "amount_reversed": 0,
                "balance_transaction": self._new_id("txn"),
                "created": self._created(),
                "currency": a["currency"],
                "description": a["description"],
                "destination": destination,
                "destination_payment": self._new_id("py"),
                "livemode": False,
                "metadata": a["metadata"],
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
            return self._transfers.add(transfer)

    def _list_transfers(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        with self._lock:
            return self._transfers.page(a)

    def _create_payout(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        destination = a["destination"]
        if not destination.startswith("ba_"):
            # The emulator takes any `ba_` id as a bank account of the platform.
            raise StripeModelError(
                400,
                f"No such external account: '{destination[:100]}'",
                code="resource_missing",
                param="destination",
                saved=True,
            )
        with self._lock:
            created = self._created()
            payout = {
                "id": self._new_id("po"),
                "object": "payout",
                "amount": a["amount"],
                "application_fee": None,
                "application_fee_amount": None,
                "arrival_date": created,
                "automatic": False,
                "balance_transaction": self._new_id("txn"),
                "created": created,
                "currency": a["currency"],
                "description": a["description"],
                "destination": destination,
                "failure_balance_transaction": None,
                "failure_code": None,
                "failure_message": None,
                "livemode": False,
                "metadata": a["metadata"],
                "method": "standard",
                "original_payout": None,
                "payout_method": None,
                "reconciliation_status": "not_applicable",
                "reversed_by": None,
                "source_type": "card",
                "statement_descriptor": None,
                "status": "pending",
                "trace_id": None,
                "type": "bank_account",
            }
            return self._payouts.add(payout)

    def _list_payouts(self, _: str, a: Mapping[str, Any]) -> JSONObj:
        with self._lock:
            return self._payouts.page(a)

    def _created(self) -> int:
        """An object's `created`: now, never before the last one, so creation order is time
        order."""
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


def _copy(obj: JSONObj) -> JSONObj:
    """A copy deep enough that a caller cannot change the model's nested objects."""
    return {
        k: _copy(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
        for k, v in obj.items()
    }


def _dollars(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"

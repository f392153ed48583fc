"""The gate: the send path that first attempts and recoveries share.

Three durable commits per action:

1. `begin`: the intent and the claim together (every take of a claim gets a new epoch).
   Then one read of the target serves the lookup (our own earlier send: adopt it, send
   nothing) and the world check (the fingerprint the decision was based on), and the
   approval is checked.
2. `mark_sending`: `sending`, the lease reservation and the claim's renewal, all or none,
   fenced on the epoch. Right before the call, the claim must still have the Stripe
   timeout + 5 s + the slack left. The call: idempotency key = the action id, metadata
   naming the action, a total deadline.
3. `settle`: the outcome, the receipt and the lease's spend, fenced on the epoch.

**Maybe sent.** An answer that settles nothing (timeout, reset, 5xx, 409, 429, a 2xx that
is not a refund) may still land. Until the call's in-flight window has closed (its start +
the Stripe timeout + 5 s) the gate only polls the lookup: it records `sent` as soon as its
refund shows, and never refuses, fails or releases the reservation. When the window has
closed with nothing found the call did not land: the checks run again and a resend goes
through commit 2 again, under the same key. A 5xx makes the action *unknown* for good
(Stripe saves and replays it, and may reconcile it hours later): the mark is written at
once, unfenced, and from then on the action is only looked up, never resent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from interlock._claims import Owner
from interlock._config import Switches, Timing
from interlock._effects import Effect, Found, Observation
from interlock._errors import (
    ActionError,
    PaymentsAuthError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    StoreError,
)
from interlock._journal import (
    CODE_REFUND_FAILED,
    ActionState,
    ClaimAttempt,
    Intent,
    Settlement,
    Store,
)
from interlock._leases import approval_problem
from interlock._receipts import Check, Receipt, receipt_key

Status = Literal["sent", "adopted", "refused", "failed", "pending"]
EventSink = Callable[[str, Mapping[str, Any]], None]

REASON_WORLD_CHANGED = "the payment's refunds changed after the model decided"
"""The reason a refusal records when the refunds differ from those the decision saw."""
REASON_NO_TARGET = "the payment does not exist"
"""The reason a refusal records when the provider says the target does not exist."""
_WAIT_POLL_S = 0.2
# While a send may be in flight, the lookup is polled this often.
_LOOKUP_POLL_S = 0.5


@dataclass(frozen=True)
class Outcome:
    """How an action ended, or `pending` when it was left to recovery.

    `unknown` is set on a pending action whose create got a 5xx: nobody can tell yet
    whether the refund was made; only a lookup settles it.
    """

    action_id: str
    status: Status
    reason: str | None = None
    external_id: str | None = None
    amount: int | None = None
    code: str | None = None
    receipt: Receipt | None = None
    unknown: bool = False

    @property
    def settled(self) -> bool:
        """Whether an outcome is recorded (anything but `pending`)."""
        return self.status != "pending"

    @classmethod
    def from_state(cls, state: ActionState) -> Outcome:
        """The recorded outcome of an action, or `pending` when it has none."""
        s = state.settlement
        if s is None:
            if state.unknown is not None:
                return cls(
                    state.intent.action_id, "pending", _unknown_text(state.unknown), unknown=True
                )
            return cls(state.intent.action_id, "pending", "no outcome recorded yet")
        return cls(
            state.intent.action_id,
            s.status,
            s.reason,
            s.external_id,
            s.amount,
            s.code,
            state.receipt,
        )


def new_action_id() -> str:
    """A fresh, random action id."""
    return "act_" + uuid.uuid4().hex


def _unknown_text(reason: str) -> str:
    return (
        f"unknown: {reason}; Stripe may still have made the refund, so it is only looked up, "
        "never resent; a person who checked Stripe may re-approve it as a new action"
    )


class Gate:
    """Guards one kind of irreversible effect with a journal, claims, checks and receipts.

    `submit(intent)` runs a new decision; `recover()` finishes every journaled action
    without an outcome. Both are safe to run in many processes against one store.
    """

    def __init__(
        self,
        store: Store,
        effect: Effect,
        *,
        timing: Timing | None = None,
        switches: Switches | None = None,
        owner: Owner | None = None,
        signing_key: bytes | None = None,
        on_event: EventSink | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_sends: int = 3,
        new_action_id: Callable[[], str] = new_action_id,
    ) -> None:
        """`new_action_id` mints the id of the action `reapprove` journals: a test passes
        one it can predict, as `clock` and `sleep` let it own the gate's time."""
        self.store = store
        self.effect = effect
        self.timing = timing if timing is not None else Timing.from_env()
        self.switches = switches if switches is not None else Switches.from_env()
        self.owner = owner if owner is not None else Owner.current()
        self._key = signing_key if signing_key is not None else receipt_key()
        self._emit_to = on_event
        self._clock = clock
        self._sleep = sleep
        self._max_sends = max_sends
        self._new_action_id = new_action_id

    # -- public --------------------------------------------------------------------------

    def submit(self, intent: Intent) -> Outcome:
        """Journal a new decision and run the send path; returns its outcome."""
        self._check_kind(intent)
        if intent.created_at == 0.0:
            intent = replace(intent, created_at=self._clock())
        t = self.timing
        attempt = self.store.begin(intent, self.owner, t.claim_ttl_s, t.grace_s)
        self._emit("journaled", action_id=intent.action_id, claim=attempt.status)
        if attempt.status == "taken":
            return self._drive(attempt)
        return self.recover_action(intent.action_id)

    def recover(self, *, wait: bool = True) -> list[Outcome]:
        """Finish every action of this gate's kind with an intent and no outcome.

        Where another owner's claim may still cover a send in flight, wait for it (or,
        with `wait=False`, report that action as pending). An action that raises is
        reported (an event, and a `pending` outcome naming the error) and recovery goes
        on; a broken store or a refused key stops it, since every action would fail alike.
        """
        outcomes = []
        for aid in self.store.pending(self.effect.kind):
            try:
                outcomes.append(self.recover_action(aid, wait=wait))
            except (StoreError, PaymentsAuthError):
                raise
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                self._emit("recover-error", action_id=aid, error=error)
                outcomes.append(Outcome(aid, "pending", f"recovery failed: {error}"))
        return outcomes

    def recover_action(self, action_id: str, *, wait: bool = True) -> Outcome:
        """Finish one action: take its claim (waiting if needed) and run the send path."""
        state = self.store.action(action_id)
        if state is None:
            raise ActionError(action_id, "not in the journal; nothing to recover")
        self._check_kind(state.intent)
        t = self.timing
        announced = False
        looked: Observation | None = None
        looked_once = False
        while True:
            found_own = looked is not None and looked.own is not None
            attempt = self.store.take_claim(
                action_id, self.owner, t.claim_ttl_s, t.grace_s, found_own=found_own
            )
            if attempt.status == "settled":
                return Outcome.from_state(attempt.state)
            if attempt.status == "taken":
                self._emit(
                    "claim",
                    action_id=action_id,
                    attempt=attempt.state.attempts,
                    epoch=attempt.epoch,
                    recovery=True,
                    early=found_own,
                )
                return self._drive(attempt, looked if found_own else None)
            claim = attempt.state.claim
            assert claim is not None
            left = claim.left(attempt.now) + (t.grace_s if claim.sending else 0.0)
            # A dead owner's send may have landed: if the lookup finds it there is nothing
            # in flight to wait for, so the claim is taken at once and the refund adopted.
            if (
                claim.sending
                and not looked_once
                and not self.switches.no_lookup
                and claim.owner.is_gone()
            ):
                looked_once = True
                looked = self._look(attempt.state.intent)
                if looked is not None and looked.own is not None:
                    continue
            if not wait:
                return Outcome(
                    action_id, "pending", f"claimed by {claim.owner.label()} for {left:.1f} s more"
                )
            if not announced:
                self._emit(
                    "claim-wait",
                    action_id=action_id,
                    owner=claim.owner.label(),
                    seconds=round(left, 3),
                    expires_at=claim.expires_at,
                    sending=claim.sending,
                )
                announced = True
            self._sleep(max(0.0, min(left, _WAIT_POLL_S)))

    def reapprove(self, action_id: str, lease_id: str, approved_by: str) -> Outcome:
        """After a refusal (or an unknown answer), a person approves the action again.

        The new action, under a new lease, takes the target's state as it is now as its
        decision context, since the person decided on that; its receipt names the action
        it replaces. An unknown action stays as it is (it is never resent under its key).
        """
        state = self.store.action(action_id)
        if state is None:
            raise ActionError(action_id, "not in the journal")
        refused = state.settlement is not None and state.settlement.status == "refused"
        unknown = state.settlement is None and state.unknown is not None
        if not (refused or unknown):
            raise ActionError(action_id, "only a refused or unknown action can be approved again")
        obs = self.effect.observe(state.intent)
        intent = replace(
            state.intent,
            action_id=self._new_action_id(),
            lease_id=lease_id,
            fingerprint=obs.fingerprint,
            context={**state.intent.context, "reapproves": action_id, "approved_by": approved_by},
            created_at=self._clock(),
        )
        return self.submit(intent)

    # -- the send path -------------------------------------------------------------------

    def _drive(self, attempt: ClaimAttempt, looked: Observation | None = None) -> Outcome:
        state = attempt.state
        intent = state.intent
        aid = intent.action_id
        epoch = attempt.epoch
        t = self.timing
        unsettled: list[dict[str, Any]] = []
        unknown = state.unknown
        sends = 0
        reads_failed = 0
        # While the clock is before this, our last create may still land: only look up.
        in_flight_until: float | None = None
        while True:
            obs, looked = looked, None
            if obs is None:
                try:
                    obs = self.effect.observe(intent)
                except PaymentsAuthError:
                    self.store.release(aid, epoch)
                    raise
                except PaymentsUnsettledError as e:
                    reads_failed += 1
                    unsettled.append(
                        {"step": "read", "error": e.detail, "http_status": e.http_status}
                    )
                    self._emit("read-unsettled", action_id=aid, error=e.detail)
                    maybe_sent = in_flight_until is not None and self._clock() < in_flight_until
                    if reads_failed > self._max_sends and not maybe_sent:
                        return self._leave(aid, epoch, f"could not read the payment: {e.detail}")
                    self._backoff(reads_failed)
                    continue
                except PaymentsRejectedError as e:
                    if e.code == "resource_missing" and e.http_status == 404 and sends == 0:
                        checks = [
                            Check(
                                "read",
                                "the payment exists",
                                f"{e.code}: {e.provider_message}",
                                False,
                            )
                        ]
                        verdict = Settlement("refused", REASON_NO_TARGET)
                        return self._settle(state, epoch, verdict, checks, unsettled)
                    return self._leave(
                        aid, epoch, f"could not read the payment ({e.code}): {e.provider_message}"
                    )

            checks, own = self._lookup(intent, obs)
            if own is not None:
                return self._settle_found(state, epoch, own, checks, unsettled, answered=False)
            if in_flight_until is not None and self._clock() < in_flight_until:
                self._sleep(max(0.0, min(_LOOKUP_POLL_S, in_flight_until - self._clock())))
                continue
            if unknown is not None:
                return self._leave(aid, epoch, _unknown_text(unknown), unknown=True)

            refusal = self._world_and_approval(intent, obs, checks)
            if refusal is not None:
                return self._settle(state, epoch, refusal, checks, unsettled)
            if sends >= self._max_sends:
                return self._leave(
                    aid, epoch, f"no settled answer after {sends} sends; recovery will look it up"
                )

            sending = self.store.mark_sending(aid, epoch, t.renewal_s)
            marked_at = self._clock()
            if sending.status == "claim_lost":
                return self._leave(
                    aid, epoch, "the claim was lost before sending; nothing was sent", release=False
                )
            if sending.status == "unknown":
                unknown = sending.reason or "a create got an answer that may hide a send"
                continue
            if sending.status == "lease_refused":
                checks[-1] = Check("approval", checks[-1].expected, sending.reason, False)
                verdict = Settlement("refused", sending.reason)
                return self._settle(state, epoch, verdict, checks, unsettled)
            assert sending.claim is not None
            self._emit("sending", action_id=aid, expires_at=sending.claim.expires_at, epoch=epoch)

            left = sending.left_s - (self._clock() - marked_at)
            window = t.send_window_s
            claim_check = Check(
                "claim", f">= {window:g} s of claim left", round(left, 3), left >= window
            )
            if not claim_check.passed:
                return self._leave(
                    aid, epoch, f"only {left:.1f} s of claim left, {window:g} s needed to send"
                )
            checks.append(claim_check)

            key = self._idempotency_key(intent, state.attempts, sends)
            sends += 1
            in_flight_until = self._clock() + t.in_flight_s
            self._emit("before-send", action_id=aid, idempotency_key=key, amount=intent.amount)
            try:
                found = self.effect.send(intent, key)
            except PaymentsRejectedError as e:
                self._emit(
                    "answer", action_id=aid, ok=False, code=e.code, message=e.provider_message
                )
                verdict = Settlement("failed", e.provider_message, code=e.code)
                return self._settle(state, epoch, verdict, checks, unsettled)
            except PaymentsUnsettledError as e:
                unsettled.append(
                    {
                        "step": "send",
                        "error": e.detail,
                        "http_status": e.http_status,
                        "idempotency_key": key,
                    }
                )
                self._emit(
                    "answer-unsettled", action_id=aid, error=e.detail, http_status=e.http_status
                )
                if e.http_status is not None and e.http_status >= 500 and unknown is None:
                    unknown = f"Stripe answered HTTP {e.http_status} to the create call"
                    self.store.mark_unknown(aid, unknown)
                    self._emit("unknown", action_id=aid, reason=unknown)
                self._emit(
                    "in-flight-wait",
                    action_id=aid,
                    seconds=round(in_flight_until - self._clock(), 3),
                )
                continue
            self._emit(
                "after-answer", action_id=aid, external_id=found.external_id, amount=found.amount
            )
            return self._settle_found(
                state, epoch, found, checks, unsettled, answered=True, idempotency_key=key
            )

    def _look(self, intent: Intent) -> Observation | None:
        """One lookup for an early take; None when the read settles nothing."""
        try:
            return self.effect.observe(intent)
        except (PaymentsUnsettledError, PaymentsRejectedError):
            return None

    def _lookup(self, intent: Intent, obs: Observation) -> tuple[list[Check], Found | None]:
        """The lookup of our own earlier send (unless switched off)."""
        if self.switches.no_lookup:
            skipped = f"skipped: {Switches.ENV_NAMES['no_lookup']} is set"
            return [Check("lookup", skipped, None, True)], None
        own = obs.own
        check = Check(
            "lookup",
            "a refund at Stripe naming this action, if one exists",
            own.external_id if own else "none",
            True,
        )
        self._emit(
            "check",
            action_id=intent.action_id,
            name="lookup",
            found=own.external_id if own else None,
        )
        return [check], own

    def _world_and_approval(
        self, intent: Intent, obs: Observation, checks: list[Check]
    ) -> Settlement | None:
        """The world check and the approval check, in that order; appends to `checks`."""
        unchanged = obs.fingerprint == intent.fingerprint
        checks.append(
            Check(
                "world_unchanged",
                {"fingerprint": intent.fingerprint},
                {"fingerprint": obs.fingerprint, "refunds": obs.seen},
                unchanged,
            )
        )
        self._emit("check", action_id=intent.action_id, name="world_unchanged", passed=unchanged)
        if not unchanged:
            return Settlement("refused", REASON_WORLD_CHANGED)
        problem = approval_problem(
            self.store.lease(intent.lease_id),
            kind=intent.kind,
            target=intent.target,
            amount=intent.amount,
            action_id=intent.action_id,
            now=self._clock(),
        )
        expected = f"approval {intent.lease_id} live and covering {intent.amount}"
        checks.append(Check("approval", expected, problem or "ok", problem is None))
        self._emit(
            "check",
            action_id=intent.action_id,
            name="approval",
            passed=problem is None,
            problem=problem,
        )
        return None if problem is None else Settlement("refused", problem)

    def _settle_found(
        self,
        state: ActionState,
        epoch: int,
        found: Found,
        checks: list[Check],
        unsettled: list[dict[str, Any]],
        *,
        answered: bool,
        idempotency_key: str | None = None,
    ) -> Outcome:
        """Our own refund exists: `sent` when the create answered with it, `adopted` when
        the lookup found it, `failed` (refund_failed) when it did not take effect."""
        if not found.counts:
            verdict = Settlement(
                "failed",
                f"its own refund {found.external_id} is {found.status}: the send happened and "
                "the money did not move; nothing is resent under that key",
                found.external_id,
                found.amount,
                code=CODE_REFUND_FAILED,
            )
        elif answered:
            verdict = Settlement("sent", None, found.external_id, found.amount)
        else:
            reason = "found its own refund at Stripe"
            if unsettled:
                reason += " after an answer that settled nothing"
            verdict = Settlement("adopted", reason, found.external_id, found.amount)
        return self._settle(
            state, epoch, verdict, checks, unsettled, idempotency_key=idempotency_key
        )

    def _check_kind(self, intent: Intent) -> None:
        if intent.kind != self.effect.kind:
            raise ActionError(
                intent.action_id, f"is a {intent.kind}, this gate sends {self.effect.kind}"
            )

    def _idempotency_key(self, intent: Intent, attempt: int, sends: int) -> str:
        # INTERLOCK_EMULATE_24H: any send after the first behaves as if Stripe had pruned
        # the key, so it goes out under a key Stripe has not seen.
        if self.switches.emulate_24h and (attempt > 1 or sends > 0):
            return f"{intent.action_id}:after-24h:{attempt}.{sends}"
        return intent.action_id

    def _settle(
        self,
        state: ActionState,
        epoch: int,
        verdict: Settlement,
        checks: list[Check],
        unsettled: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> Outcome:
        aid = state.intent.action_id
        extra: dict[str, Any] = {
            "context": dict(state.intent.context),
            "unsettled_answers": unsettled,
            "emulated": self.switches.names,
            "idempotency_key": idempotency_key,
        }
        receipt = self.store.settle(aid, epoch, self.owner, verdict, checks, extra, self._key)
        if receipt is None:
            settled = self.store.action(aid)
            if settled is not None and settled.settlement is not None:
                return Outcome.from_state(settled)
            return self._leave(
                aid,
                epoch,
                "the claim ran out before the outcome was recorded; recovery settles it",
                release=False,
            )
        self._emit(
            "settled",
            action_id=aid,
            status=verdict.status,
            reason=verdict.reason,
            external_id=verdict.external_id,
            receipt=receipt.hash,
        )
        return Outcome(
            aid,
            verdict.status,
            verdict.reason,
            verdict.external_id,
            verdict.amount,
            verdict.code,
            receipt,
        )

    def _leave(
        self,
        action_id: str,
        epoch: int,
        reason: str,
        *,
        release: bool = True,
        unknown: bool = False,
    ) -> Outcome:
        # A claim not marked `sending` covers nothing in flight: end it, so the next
        # recovery need not wait it out. A `sending` one is left to expire.
        if release:
            self.store.release(action_id, epoch)
        self._emit("left-to-recovery", action_id=action_id, reason=reason)
        return Outcome(action_id, "pending", reason, unknown=unknown)

    def _backoff(self, n: int) -> None:
        self._sleep(min(0.1 * 2 ** (n - 1), 1.0))

    def _emit(self, kind: str, **data: Any) -> None:
        if self._emit_to is not None:
            self._emit_to(kind, data)

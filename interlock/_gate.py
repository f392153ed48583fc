"""The gate: the send path that first attempts and recoveries share.

Three durable commits per action:

1. `begin`: the intent and the claim together.
   Then one read of the target serves the lookup (our own earlier send: adopt it, send
   nothing) and the world check (the fingerprint the decision was based on), and the
   approval is checked.
2. `mark_sending`: `sending`, the lease reservation and the claim's renewal, all or none.
   Right before the call, the claim must still have the Stripe timeout + 5 s left.
   The call: idempotency key = the action id, metadata naming the action, a total deadline.
3. `settle`: the outcome, the receipt and the lease's spend, fenced on the claim.

An answer that settles nothing (timeout, reset, 5xx, 409, 429) records no outcome: while
the claim lasts the gate reads, checks and retries with the same key; otherwise it leaves
the action to `recover()`, whose lookup settles it.
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
from interlock._errors import ActionError, PaymentsRejectedError, PaymentsUnsettledError
from interlock._journal import ActionState, Intent, Settlement, Store
from interlock._leases import approval_problem
from interlock._receipts import Check, Receipt, receipt_key

Status = Literal["sent", "adopted", "refused", "failed", "pending"]
EventSink = Callable[[str, Mapping[str, Any]], None]

REASON_WORLD_CHANGED = "the payment's refunds changed after the model decided"
"""The reason a refusal records when the refunds differ from those the decision saw."""
_WAIT_POLL_S = 0.2


@dataclass(frozen=True)
class Outcome:
    """How an action ended, or `pending` when it was left to recovery."""

    action_id: str
    status: Status
    reason: str | None = None
    external_id: str | None = None
    amount: int | None = None
    code: str | None = None
    receipt: Receipt | None = None

    @property
    def settled(self) -> bool:
        """Whether an outcome is recorded (anything but `pending`)."""
        return self.status != "pending"

    @classmethod
    def from_state(cls, state: ActionState) -> Outcome:
        """The recorded outcome of a settled action."""
        s = state.settlement
        if s is None:
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
    ) -> None:
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

    # -- public --------------------------------------------------------------------------

    def submit(self, intent: Intent) -> Outcome:
        """Journal a new decision and run the send path; returns its outcome."""
        if intent.kind != self.effect.kind:
            raise ActionError(
                intent.action_id, f"is a {intent.kind}, this gate sends {self.effect.kind}"
            )
        if intent.created_at == 0.0:
            intent = replace(intent, created_at=self._clock())
        attempt = self.store.begin(intent, self.owner, self._clock(), self.timing.claim_ttl_s)
        self._emit("journaled", action_id=intent.action_id, claim=attempt.status)
        if attempt.status == "taken":
            return self._drive(attempt.state)
        return self.recover_action(intent.action_id)

    def recover(self, *, wait: bool = True) -> list[Outcome]:
        """Finish every action with an intent and no outcome.

        Where another owner's claim may still cover a send in flight, wait for it (or,
        with `wait=False`, report that action as pending).
        """
        return [self.recover_action(aid, wait=wait) for aid in self.store.pending()]

    def recover_action(self, action_id: str, *, wait: bool = True) -> Outcome:
        """Finish one action: take its claim (waiting if needed) and run the send path."""
        announced = False
        while True:
            attempt = self.store.take_claim(
                action_id, self.owner, self._clock(), self.timing.claim_ttl_s
            )
            if attempt.status == "settled":
                return Outcome.from_state(attempt.state)
            if attempt.status == "taken":
                self._emit(
                    "claim", action_id=action_id, attempt=attempt.state.attempts, recovery=True
                )
                return self._drive(attempt.state)
            claim = attempt.state.claim
            assert claim is not None
            left = claim.left(self._clock())
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
        """After a refusal, a person approves the action again under a new lease.

        The new action takes the target's state as it is now as its decision context,
        since the person decided on that; its receipt names the refused action it replaces.
        """
        state = self.store.action(action_id)
        if state is None:
            raise ActionError(action_id, "not in the journal")
        if state.settlement is None or state.settlement.status != "refused":
            raise ActionError(action_id, "only a refused action can be approved again")
        obs = self.effect.observe(state.intent)
        intent = replace(
            state.intent,
            action_id=new_action_id(),
            lease_id=lease_id,
            fingerprint=obs.fingerprint,
            context={**state.intent.context, "reapproves": action_id, "approved_by": approved_by},
            created_at=self._clock(),
        )
        return self.submit(intent)

    # -- the send path -------------------------------------------------------------------

    def _drive(self, state: ActionState) -> Outcome:
        intent = state.intent
        aid = intent.action_id
        unsettled: list[dict[str, Any]] = []
        sends = 0
        while True:
            try:
                obs = self.effect.observe(intent)
            except PaymentsUnsettledError as e:
                unsettled.append({"step": "read", "error": e.detail, "http_status": e.http_status})
                self._emit("read-unsettled", action_id=aid, error=e.detail)
                if len(unsettled) > self._max_sends:
                    return self._leave(aid, f"could not read the payment: {e.detail}")
                self._backoff(len(unsettled))
                continue
            except PaymentsRejectedError as e:
                checks = [
                    Check(
                        "read", "the payment can be read", f"{e.code}: {e.provider_message}", False
                    )
                ]
                return self._settle(
                    state,
                    Settlement("refused", f"could not read the payment ({e.code})"),
                    checks,
                    unsettled,
                )

            checks, verdict = self._checks(state, obs)
            if verdict is not None:
                return self._settle(state, verdict, checks, unsettled)

            sending = self.store.mark_sending(aid, self.owner, self._clock(), self.timing.renewal_s)
            if sending.status == "claim_lost":
                return self._leave(aid, "the claim was lost before sending; nothing was sent")
            if sending.status == "lease_refused":
                checks[-1] = Check("approval", checks[-1].expected, sending.reason, False)
                return self._settle(state, Settlement("refused", sending.reason), checks, unsettled)
            assert sending.claim is not None
            self._emit("sending", action_id=aid, expires_at=sending.claim.expires_at)

            left = sending.claim.left(self._clock())
            window = self.timing.send_window_s
            claim_check = Check(
                "claim", f">= {window:g} s of claim left", round(left, 3), left >= window
            )
            if not claim_check.passed:
                return self._leave(
                    aid, f"only {left:.1f} s of claim left, {window:g} s needed to send"
                )
            checks.append(claim_check)

            key = self._idempotency_key(intent, state.attempts, sends)
            sends += 1
            self._emit("before-send", action_id=aid, idempotency_key=key, amount=intent.amount)
            try:
                found = self.effect.send(intent, key)
            except PaymentsRejectedError as e:
                self._emit(
                    "answer", action_id=aid, ok=False, code=e.code, message=e.provider_message
                )
                verdict = Settlement("failed", e.provider_message, code=e.code)
                return self._settle(state, verdict, checks, unsettled)
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
                if sends >= self._max_sends:
                    return self._leave(
                        aid, f"no settled answer after {sends} sends; recovery will look it up"
                    )
                self._backoff(sends)
                continue
            self._emit(
                "after-answer", action_id=aid, external_id=found.external_id, amount=found.amount
            )
            verdict = Settlement("sent", None, found.external_id, found.amount)
            return self._settle(state, verdict, checks, unsettled, idempotency_key=key)

    def _checks(
        self, state: ActionState, obs: Observation
    ) -> tuple[list[Check], Settlement | None]:
        """The lookup, the world check and the approval check, in that order."""
        intent = state.intent
        checks: list[Check] = []
        if self.switches.no_lookup:
            checks.append(Check("lookup", "skipped: INTERLOCK_NO_LOOKUP is set", None, True))
        else:
            own: Found | None = obs.own
            checks.append(
                Check(
                    "lookup",
                    "a refund at Stripe naming this action, if one exists",
                    own.external_id if own else "none",
                    True,
                )
            )
            self._emit(
                "check",
                action_id=intent.action_id,
                name="lookup",
                found=own.external_id if own else None,
            )
            if own is not None:
                return checks, Settlement(
                    "adopted", "found its own refund at Stripe", own.external_id, own.amount
                )
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
            return checks, Settlement("refused", REASON_WORLD_CHANGED)
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
        if problem is not None:
            return checks, Settlement("refused", problem)
        return checks, None

    def _idempotency_key(self, intent: Intent, attempt: int, sends: int) -> str:
        # INTERLOCK_EMULATE_24H: any send after the first behaves as if Stripe had pruned
        # the key, so it goes out under a key Stripe has not seen.
        if self.switches.emulate_24h and (attempt > 1 or sends > 0):
            return f"{intent.action_id}:after-24h:{attempt}.{sends}"
        return intent.action_id

    def _settle(
        self,
        state: ActionState,
        verdict: Settlement,
        checks: list[Check],
        unsettled: list[dict[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> Outcome:
        aid = state.intent.action_id
        verdict = replace(verdict, at=self._clock())
        extra: dict[str, Any] = {
            "context": dict(state.intent.context),
            "unsettled_answers": unsettled,
            "emulated": self.switches.names,
            "idempotency_key": idempotency_key,
        }
        receipt = self.store.settle(aid, self.owner, verdict.at, verdict, checks, extra, self._key)
        if receipt is None:
            settled = self.store.action(aid)
            if settled is not None and settled.settlement is not None:
                return Outcome.from_state(settled)
            return self._leave(
                aid, "the claim ran out before the outcome was recorded; recovery settles it"
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

    def _leave(self, action_id: str, reason: str) -> Outcome:
        self._emit("left-to-recovery", action_id=action_id, reason=reason)
        return Outcome(action_id, "pending", reason)

    def _backoff(self, n: int) -> None:
        self._sleep(min(0.1 * 2 ** (n - 1), 1.0))

    def _emit(self, kind: str, **data: Any) -> None:
        if self._emit_to is not None:
            self._emit_to(kind, data)

"""The gate: the send path that first attempts and recoveries share.

**A first attempt: two durable commits.** A look at the store that writes nothing (the
action is new, its target's turn keeps nobody off, and the approval as stored), then the
one read of the target and the checks below, then one commit that journals the intent,
takes the claim (epoch 1) and the target's turn, reserves the lease and marks `sending`,
all or none, and only while the turn is as the look saw it and the lease the one checked;
then the call and the outcome (commit 3 below). A crash before that commit leaves
nothing: nothing was journaled or sent, and the agent decides again. A refusal is
journaled and settled from the same read (commit 1, then commit 3). Anything else (the
action journaled already, the turn another action's, a read that settles nothing, a
send found naming the action, the turn taken since the look) writes nothing and takes
the three-commit path from its start.

**Every other attempt (a recovery, a wait for the turn): three durable commits.**

1. `begin`: the intent and the claim together (every take of a claim gets a new epoch).
   Then one read of the target serves the lookup (our own earlier send: adopt it, send
   nothing) and the world check (the fingerprint the decision was based on), and the
   approval is checked: signed by one of the gate's approvers over everything it
   authorizes, live, and covering the amount.
2. `mark_sending`: `sending`, the lease reservation and the claim's renewal, all or none,
   fenced on the epoch, and only under the very lease that was checked. Right before the
   call, the claim must still have the Stripe timeout + 5 s + the slack left. The call:
   idempotency key = the action id, metadata naming the action, a total deadline.
3. `settle`: the outcome, the receipt and the lease's spend, fenced on the epoch.

**Maybe sent.** An answer that settles nothing (timeout, reset, 5xx, 409, 429, a 2xx that
is not a refund) may still land. Until the call's in-flight window has closed (its start +
the Stripe timeout + 5 s) the gate only polls the lookup: it records `sent` as soon as its
refund shows, and never refuses, fails or releases the reservation. When the window has
closed with nothing found the call did not land: the checks run again and a resend goes
through commit 2 again, under the same key. A 5xx makes the action *unknown* for good
(Stripe saves and replays it, and may reconcile it hours later): the mark is written at
once, unfenced, and from then on the action is only looked up, never resent.

**Evidence wins.** A found send settles the action only when it matches the intent (its
target and amount): one that names the action and differs is a *conflict*, marked
unknown like a 5xx, never adopted and never resent. A path that has the action's own
earlier send in hand (a recovery, a resend, a re-approval) settles on it and sends nothing.
A gate whose commit 3 is fenced out reports what it knows (the refund it holds), never
another gate's outcome as its own.

**One action on a target at a time.** A claim comes with its target's turn (see
`interlock._core.journal`): while another action on the same target is between its world read
and its outcome, commit 1 answers `busy`, the intent is journaled without a claim, and the
gate waits for that action's claim (polling the store, as long as the holder's claim said
when first seen, grace included) or, when it cannot wait, leaves the action pending
naming the holder. Once it has the turn, its own read comes after the holder's send
landed, so two identical calls of one decision run concurrently end as they would one
after the other: the second is refused because the refunds changed.

**Currencies.** An intent records its currency (a gate stamps its effect's on one that
has none); a gate never sends an intent its effect does not accept (`accepts`: a transfer
in another currency), leaving it untouched to a gate that can; a refund intent in another
currency than its payment's is refused; the approval must be in the action's currency.

**Clocks.** Durations inside this process (the in-flight window, the claim left since
commit 2, the waits) run on the monotonic clock, which a wall-clock step does not move;
claims, leases and receipts are in the store's clock, the one every process shares.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from interlock._core.approvals import Approvers
from interlock._core.claims import Claim, Owner
from interlock._core.config import Timing
from interlock._core.effects import (
    AT_STRIPE,
    GRANT_METADATA_KEY,
    HEAD_METADATA_KEY,
    Effect,
    EmulatedEffect,
    Found,
    Observation,
    accepts,
)
from interlock._core.errors import (
    ActionError,
    ConfigError,
    LeaseError,
    PaymentsAuthError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    StoreError,
)
from interlock._core.events import Event, GateEvent
from interlock._core.journal import (
    CODE_CONFLICT,
    CODE_REFUND_FAILED,
    CONFLICT_PREFIX,
    ActionState,
    ClaimAttempt,
    Intent,
    Settlement,
    Store,
)
from interlock._core.leases import Lease, approval_problem
from interlock._core.log import LogKeeper, LogStatus
from interlock._core.receipts import ENV_RECEIPT_KEY, Check, Receipt
from interlock._core.signing import ENV_SIGNING_KEY, SigningKey, signing_key_from_env

if TYPE_CHECKING:
    from interlock._core.anchors import Anchor

Status = Literal["sent", "adopted", "refused", "failed", "pending"]
EventSink = Callable[[Event], None]
"""`on_event(event)`: every gate `Event`, its kind a `GateEvent` (which lists its fields)."""


def _signing_key(key: object) -> SigningKey | None:
    """The gate's receipt key: the one given, else `INTERLOCK_SIGNING_KEY`'s, else none. An
    HMAC secret (bytes, or `INTERLOCK_RECEIPT_KEY` alone) is refused: whoever holds it can
    rewrite every receipt, and the receipts it signed stay readable by `verify` as before."""
    if isinstance(key, (bytes, str)):
        raise ConfigError(
            "signing_key is the gate's Ed25519 receipt key (interlock.SigningKey.load(path)), "
            "not a shared secret: a secret that signs receipts lets every worker rewrite "
            "them. Make one with `python -m interlock keygen DIR`; receipts signed with the "
            "old secret stay readable (verify(hmac_key=...))"
        )
    if key is not None:
        if not isinstance(key, SigningKey):
            raise ConfigError(
                f"signing_key must be an interlock.SigningKey, not {type(key).__name__}"
            )
        return key
    loaded = signing_key_from_env()
    if loaded is None and os.environ.get(ENV_RECEIPT_KEY):
        raise ConfigError(
            f"{ENV_RECEIPT_KEY} is set, but receipts are now signed with an Ed25519 key: "
            f"make one with `python -m interlock keygen DIR` and set {ENV_SIGNING_KEY} to its "
            f"signing-key.pem (and INTERLOCK_VERIFY_KEYS to its keys.json where you verify); "
            f"keep {ENV_RECEIPT_KEY} only where verify reads receipts signed before"
        )
    return loaded


REASON_WORLD_CHANGED = "the payment's refunds changed after the model decided"
"""The reason a refusal records when the refunds differ from those the decision saw."""
REASON_NO_TARGET = "the payment does not exist"
"""The reason a refusal records when the provider says the target does not exist."""
_WAIT_POLL_S = 0.2
# A turn's holder is usually done in milliseconds: its waiter polls from this, doubling.
_TURN_POLL_S = 0.01
# While a send may be in flight, the lookup is polled this often.
_LOOKUP_POLL_S = 0.5


@dataclass(frozen=True)
class Outcome:
    """How an action ended, or `pending` when it was left to recovery.

    `unknown` is set on a pending action whose create got a 5xx: nobody can tell yet
    whether the refund was made; only a lookup settles it. `currency` is the amount's
    (the send's own when one was found, else the intent's; None when neither says).
    """

    action_id: str
    status: Status
    reason: str | None = None
    external_id: str | None = None
    amount: int | None = None
    code: str | None = None
    receipt: Receipt | None = None
    unknown: bool = False
    currency: str | None = None

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
                code = CODE_CONFLICT if state.unknown.startswith(CONFLICT_PREFIX) else None
                return cls(
                    state.intent.action_id,
                    "pending",
                    _unknown_text(state.unknown),
                    code=code,
                    unknown=True,
                    currency=state.intent.currency,
                )
            return cls(
                state.intent.action_id,
                "pending",
                "no outcome recorded yet",
                currency=state.intent.currency,
            )
        return cls(
            state.intent.action_id,
            s.status,
            s.reason,
            s.external_id,
            s.amount,
            s.code,
            state.receipt,
            currency=s.currency or state.intent.currency,
        )


def new_action_id() -> str:
    """A fresh, random action id."""
    return "act_" + uuid.uuid4().hex


def _unknown_text(reason: str) -> str:
    if reason.startswith(CONFLICT_PREFIX):
        return (
            f"unknown: {reason}; it is never adopted and nothing is sent under this action; "
            "a person who checked Stripe may re-approve it as a new action"
        )
    return (
        f"unknown: {reason}; Stripe may still have made the refund, so it is only looked up, "
        "never resent; a person who checked Stripe may re-approve it as a new action"
    )


def _conflict_text(found: Found, mismatch: str) -> str:
    return (
        f"{CONFLICT_PREFIX}refund {found.external_id} names this action but {mismatch}: "
        "it is not this action's send"
    )


@dataclass(frozen=True)
class GateOptions:
    """Everything a `Gate` is built with besides its store and its effect.

    `Gate(store, effect, **options)` takes the same names with the same defaults;
    `Gate.from_options` builds one from this, and `gate.options` gives them back resolved
    (the timing, owner, signing key and monotonic clock the gate settled on), so
    a helper that needs the same gate with another event sink or sleep (Temporal's
    `ActivityGate`) replaces those two and copies nothing else.
    """

    timing: Timing | None = None
    owner: Owner | None = None
    # A secret: kept out of the repr, which logs and tracebacks print.
    signing_key: SigningKey | None = field(default=None, repr=False)
    on_event: EventSink | None = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    max_sends: int = 3
    new_action_id: Callable[[], str] = new_action_id
    monotonic: Callable[[], float] | None = None
    approvers: Approvers | None = None
    anchors: Sequence[Anchor] = ()
    log_every: int = 100
    log_interval_s: float = 5.0


class _Unread:
    """A value not read yet (None is a read that found nothing)."""


_UNREAD = _Unread()


@dataclass
class _TurnWait:
    """A wait for another action's turn on the same target: the holder waited for
    (announced once each), the polls since, and until when (monotonic) it is waited for."""

    holder: str | None = None
    polls: int = 0
    until: float = 0.0


@dataclass
class _Drive:
    """One drive's state across its turns: what it has read, sent and learned."""

    state: ActionState
    epoch: int
    # Why the action is unknown (a 5xx, a conflict): from then on it is only looked up.
    unknown: str | None
    # An early take's read, used for the first turn instead of a second read.
    looked: Observation | None = None
    unsettled: list[dict[str, Any]] = field(default_factory=list)
    sends: int = 0
    reads_failed: int = 0
    # While the monotonic clock is before this, our last create may still land: only
    # look up.
    in_flight_until: float | None = None
    # The digest of the approval the last check verified: commit 2 sends under it only.
    approval: str | None = None
    # What the send's metadata carries besides the action: fixed at the first commit 2
    # and journaled with it, so every attempt sends the same parameters under its key.
    evidence: dict[str, str] | None = None

    @property
    def intent(self) -> Intent:
        """The action's intent."""
        return self.state.intent


class Gate:
    """Guards one kind of irreversible effect with a journal, claims, checks and receipts.

    `submit(intent)` runs a new decision; `recover()` finishes every journaled action
    without an outcome. Both are safe to run in many processes against one store.
    """

    @classmethod
    def from_options(cls, store: Store, effect: Effect, options: GateOptions) -> Gate:
        """The gate over `store` and `effect` with `options` (see `GateOptions`)."""
        return cls(
            store,
            effect,
            timing=options.timing,
            owner=options.owner,
            signing_key=options.signing_key,
            on_event=options.on_event,
            clock=options.clock,
            sleep=options.sleep,
            max_sends=options.max_sends,
            new_action_id=options.new_action_id,
            monotonic=options.monotonic,
            approvers=options.approvers,
            anchors=options.anchors,
            log_every=options.log_every,
            log_interval_s=options.log_interval_s,
        )

    def with_events(self, on_event: EventSink | None, sleep: Callable[[float], None]) -> Gate:
        """This gate with another event sink and sleep (a Temporal activity's heartbeats):
        the same store, effect and options, and the same receipt log, so its settles count
        toward this gate's `log_every` and the log's timer reports to this gate's
        `on_event`, outside any one call."""
        gate = Gate.from_options(
            self.store, self.effect, replace(self.options, on_event=on_event, sleep=sleep)
        )
        gate.log = self.log
        return gate

    def __init__(
        self,
        store: Store,
        effect: Effect,
        *,
        timing: Timing | None = None,
        owner: Owner | None = None,
        signing_key: SigningKey | None = None,
        on_event: EventSink | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_sends: int = 3,
        new_action_id: Callable[[], str] = new_action_id,
        monotonic: Callable[[], float] | None = None,
        approvers: Approvers | None = None,
        anchors: Sequence[Anchor] = (),
        log_every: int = 100,
        log_interval_s: float = 5.0,
    ) -> None:
        """`approvers` is the trust list of the approvers' public keys (`Approvers`): at every
        send and resend the gate refuses an approval whose signature does not verify under
        one of them. Without it, `INTERLOCK_APPROVERS` names the key files; with neither,
        `ConfigError`. `UNSIGNED_APPROVALS` is the explicit opt-in to accept unsigned
        approvals (tests, migration), which lets any store writer mint one.

        `new_action_id` mints the id of the action `reapprove` journals: a test passes
        one it can predict, as `clock`, `monotonic` and `sleep` let it own the gate's time.

        `clock` is the wall clock (an intent's time, a lease's expiry); `monotonic` times
        every duration inside this process, so that a step of the wall clock (an NTP
        step, a resumed VM) cannot close the in-flight window early. Without it: the
        system's monotonic clock, whatever `sleep` is (a `sleep` of your own, one that logs
        or heartbeats, still waits in real time). A test that owns time with a fake clock
        and a fake sleep passes its fake monotonic clock too.

        `signing_key` is the gate's Ed25519 receipt key (`SigningKey`; without it,
        `INTERLOCK_SIGNING_KEY` names its file; with neither, receipts are unsigned). Each
        receipt is signed with it and goes into the receipt log: once `log_every` receipts
        have come, `log_interval_s` seconds after the first receipt not yet in it (a timer
        thread does it while no action settles, and `on_event` then hears of it from that
        thread), at every `recover()` and at `close()`, the gate numbers the receipts not
        yet in the log, signs a tree head and publishes it to each of `anchors` (a
        `FileAnchor` elsewhere, an `HttpWitness`, a `TimestampAnchor`), which a store
        writer cannot rewrite."""
        self.store = store
        self.effect = effect
        self.timing = timing if timing is not None else Timing.from_env()
        # Claims are sized by the planned timeout: a send that may outlast it could land
        # after another worker took the claim and re-checked without it.
        deadline = getattr(effect, "deadline_s", None)
        if deadline is not None and deadline > self.timing.stripe_timeout_s:
            took = f"{deadline:g} s per call" if math.isfinite(deadline) else "none per call"
            raise ConfigError(
                f"the Stripe client's deadline ({took}) is longer than the "
                f"Stripe timeout the gate plans with ({self.timing.stripe_timeout_s:g} s): "
                "a send could land after another worker took over its claim. Build the client "
                "with make_stripe_client(key, timeout_s=timing.stripe_timeout_s) and give "
                "the gate the same Timing."
            )
        self.owner = owner if owner is not None else Owner.current()
        if approvers is None:
            approvers = Approvers.from_env()
        if approvers is None:
            raise ConfigError(
                "the gate has no approvers to check approvals with: pass "
                "approvers=interlock.Approvers.load('approvers.pem') (the approvers' public "
                "keys) or set INTERLOCK_APPROVERS to their key files; to accept unsigned "
                "approvals (tests, migration) pass approvers=interlock.UNSIGNED_APPROVALS"
            )
        self.approvers = approvers
        self._key = _signing_key(signing_key)
        self._emit_to = on_event
        self._clock = clock
        self._sleep = sleep
        if monotonic is None:
            monotonic = time.monotonic
        self._monotonic = monotonic
        self._max_sends = max_sends
        self._new_action_id = new_action_id
        self.options = GateOptions(
            timing=self.timing,
            owner=self.owner,
            signing_key=self._key,
            on_event=on_event,
            clock=clock,
            sleep=sleep,
            max_sends=max_sends,
            new_action_id=new_action_id,
            monotonic=monotonic,
            approvers=approvers,
            anchors=tuple(anchors),
            log_every=log_every,
            log_interval_s=log_interval_s,
        )
        self.log = LogKeeper(
            store,
            self._key,
            anchors,
            every=log_every,
            interval_s=log_interval_s,
            clock=clock,
            monotonic=monotonic,
            report=lambda status: self._logged("", status),
        )
        """The options this gate was built with, resolved (see `GateOptions`)."""

    # -- public --------------------------------------------------------------------------

    def submit(self, intent: Intent) -> Outcome:
        """Journal a new decision and run the send path; returns its outcome.

        A new action id is read and checked first, then journaled with its claim and
        `sending` in one commit right before the call (two durable commits in all; see the
        module docstring): a crash before that commit leaves nothing to recover.

        While another action on the same target is between its read and its outcome, the
        decision is journaled and waits its turn (then reads the target again), or is left
        pending, naming that action, when the wait would outlast that action's claim.

        An intent without a currency gets the effect's, when the effect sends in one. One
        the effect does not accept (`accepts`: another currency) raises `ActionError`, and
        nothing is journaled. The same decision journaled before without a currency (by an
        older version) that the effect does not accept raises too, its claim released at
        once: nothing is read or sent under it.
        """
        self._check_kind(intent)
        if intent.created_at == 0.0:
            intent = replace(intent, created_at=self._clock())
        currency = getattr(self.effect, "currency", None)
        if intent.currency is None and isinstance(currency, str):
            intent = replace(intent, currency=currency)
        self._check_accepted(intent)
        first = self._first_attempt(intent)
        if first is not None:
            return first
        attempt = self._begin(intent)
        if attempt.status == "taken":
            return self._drive(attempt)
        return self.recover_action(intent.action_id)

    def _begin(self, intent: Intent) -> ClaimAttempt:
        """Commit 1 of the three-commit path: the intent and its claim (see `submit`)."""
        t = self.timing
        attempt = self.store.begin(intent, self.owner, t.claim_ttl_s, t.grace_s)
        journaled = attempt.state.intent
        # Checked after commit 1, not by a read before it: a first attempt pays no extra
        # statement for the rare decision journaled by an older version.
        if journaled.currency != intent.currency and accepts(self.effect, journaled) is not None:
            if attempt.status == "taken":
                self.store.release(intent.action_id, attempt.epoch)
            self._check_accepted(journaled)
        self._emit(GateEvent.JOURNALED, action_id=intent.action_id, claim=attempt.status)
        return attempt

    def _first_attempt(self, intent: Intent) -> Outcome | None:
        """A new decision in two commits: the world read first, then one commit that
        journals the intent, takes the claim and the target's turn and marks `sending`;
        the outcome the second. None: nothing was written; the three-commit path runs from
        its start (the action id is journaled already, the target's turn is another
        action's, the read settled nothing or found a send naming the action, or the store
        changed since the look).

        A crash before that commit leaves nothing: nothing was journaled and nothing sent,
        so the agent decides again. A refusal is journaled and settled from the same read
        (commit 1, then the outcome), since nothing is sent on it.
        """
        t = self.timing
        look = self.store.first_look(intent, t.grace_s)
        if not look.free:
            return None
        try:
            obs = self.effect.observe(intent)
        except (PaymentsAuthError, PaymentsUnsettledError, PaymentsRejectedError):
            # The three-commit path reads again and journals what it meets.
            return None
        checks, own, conflict = self._lookup(intent, obs)
        if own is not None or conflict is not None:
            return None
        refusal, approval = self._world_and_approval(intent, obs, checks, lease=look.lease)
        if refusal is None:
            evidence = self._evidence_for(approval)
            first = self.store.begin_sending(
                intent, self.owner, t.renewal_s, look.turn, approval=approval, evidence=evidence
            )
            marked_at = self._monotonic()
            if first.status in ("journaled", "turn_moved"):
                return None
            if first.status == "lease_refused":
                # As commit 2 does: the store's lease is not the one checked, or no longer
                # covers the send.
                checks[-1] = Check("approval", checks[-1].expected, first.reason, False)
                refusal = Settlement("refused", first.reason)
        if refusal is not None:
            attempt = self._begin(intent)
            if attempt.status != "taken":
                return self.recover_action(intent.action_id)
            return self._settle(attempt.state, attempt.epoch, refusal, checks, [])
        assert first.state is not None
        state = first.state
        claim = state.claim
        assert claim is not None
        self._emit(GateEvent.JOURNALED, action_id=intent.action_id, claim="taken")
        drive = _Drive(state, claim.epoch, None, approval=approval, evidence=evidence)
        ready = self._claim_left(drive, claim, first.left_s, marked_at, checks)
        if ready is not None:
            return ready
        settled = self._send(drive, checks)
        if settled is not None:
            return settled
        return self._turns(drive)

    def recover(self, *, wait: bool = True) -> list[Outcome]:
        """Finish every action of this gate's kind with an intent and no outcome.

        Where another owner's claim may still cover a send in flight, or another action on
        the same target holds its turn, wait for it (or, with `wait=False`, report that
        action as pending): actions on one target run one after the other, oldest first.
        An action its effect does not accept (`accepts`: a transfer in another currency) is
        left as it is, pending, its claim not taken, for a gate that can send it; it is not
        in the list. An action that raises is reported (an event, and a `pending` outcome
        naming the error) and recovery goes on; a broken store or a refused key stops it,
        since every action would fail alike.
        """
        outcomes = []
        # A dead worker's receipts may not be in the log yet, nor its heads anchored.
        self.catch_up_log()
        for aid in self.store.pending(self.effect.kind):
            try:
                state = self.store.action(aid)
                if state is not None and accepts(self.effect, state.intent) is not None:
                    continue
                outcomes.append(self.recover_action(aid, wait=wait))
            except (StoreError, PaymentsAuthError):
                raise
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                self._emit(GateEvent.RECOVER_ERROR, action_id=aid, error=error)
                outcomes.append(Outcome(aid, "pending", f"recovery failed: {error}"))
        return outcomes

    def catch_up_log(self) -> LogStatus:
        """Put every receipt not yet in the receipt log into it, sign a tree head and
        publish the heads not yet anchored, now (see `LogKeeper`)."""
        status = self.log.catch_up()
        self._logged("", status)
        return status

    def close(self) -> None:
        """Stop the receipt log's timer and put every receipt not yet in the log into it:
        call it before closing the store. The gate still works after it, its log caught
        up every `log_every` receipts and at `recover()`."""
        self._logged("", self.log.close())

    def _logged(self, action_id: str, status: LogStatus | None) -> None:
        if status is None or (status.head is None and not status.published and not status.problem):
            return
        self._emit(
            GateEvent.LOGGED,
            action_id=action_id,
            size=None if status.head is None else status.head.size,
            published=status.published,
            problem=status.problem,
        )

    def recover_action(self, action_id: str, *, wait: bool = True) -> Outcome:
        """Finish one action: take its claim (waiting if needed) and run the send path.

        `ActionError`, touching nothing, when the effect does not accept it (`accepts`)."""
        return self._recover(action_id, wait=wait)

    def _recover(
        self, action_id: str, *, wait: bool = True, looked: Observation | None = None
    ) -> Outcome:
        """`recover_action`, starting from a lookup already made (`looked`), if any."""
        state = self.store.action(action_id)
        if state is None:
            raise ActionError(action_id, "not in the journal; nothing to recover")
        self._check_kind(state.intent)
        self._check_accepted(state.intent)
        t = self.timing
        announced = False
        looked_once = looked is not None
        turn = _TurnWait()
        while True:
            found_own = looked is not None and self._matching(state.intent, looked.own) is not None
            attempt = self.store.take_claim(
                action_id, self.owner, t.claim_ttl_s, t.grace_s, found_own=found_own
            )
            if attempt.status == "settled":
                return Outcome.from_state(attempt.state)
            if attempt.status == "taken":
                self._emit(
                    GateEvent.CLAIM,
                    action_id=action_id,
                    attempt=attempt.state.attempts,
                    epoch=attempt.epoch,
                    recovery=True,
                    early=found_own,
                )
                return self._drive(attempt, looked if found_own else None)
            if attempt.status == "busy":
                waited = self._wait_for_turn(attempt, turn, wait=wait)
                if waited is not None:
                    return waited
                continue
            claim = attempt.state.claim
            assert claim is not None
            left = claim.left(attempt.now) + (t.grace_s if claim.sending else 0.0)
            # A dead owner's send may have landed: if the lookup finds it there is nothing
            # in flight to wait for, so the claim is taken at once and the refund adopted.
            if (
                claim.sending
                and not looked_once
                and self._lookup_skipped() is None
                and claim.owner.is_gone()
            ):
                looked_once = True
                looked = self._look(attempt.state.intent)
                if looked is not None and self._matching(state.intent, looked.own) is not None:
                    continue
            if not wait:
                return Outcome(
                    action_id, "pending", f"claimed by {claim.owner.label()} for {left:.1f} s more"
                )
            if not announced:
                self._emit(
                    GateEvent.CLAIM_WAIT,
                    action_id=action_id,
                    owner=claim.owner.label(),
                    seconds=round(left, 3),
                    expires_at=claim.expires_at,
                    sending=claim.sending,
                )
                announced = True
            self._sleep(max(0.0, min(left, _WAIT_POLL_S)))

    def _wait_for_turn(
        self, attempt: ClaimAttempt, turn: _TurnWait, *, wait: bool
    ) -> Outcome | None:
        """One step of waiting while another action on the target holds its turn: None
        after one poll's sleep (try the claim again), or `pending` naming the holder when
        this gate may not wait, or has waited as long as that holder's claim said when it
        first saw it, grace included (it may renew its claim only to send again)."""
        holder = attempt.holder
        assert holder is not None and holder.claim is not None
        hc, t = holder.claim, self.timing
        left = hc.left(attempt.now) + (t.grace_s if hc.sending else 0.0)
        action_id, holder_id = attempt.state.intent.action_id, holder.intent.action_id
        target = attempt.state.intent.target
        if not wait or (turn.holder == holder_id and self._monotonic() >= turn.until):
            return Outcome(
                action_id,
                "pending",
                f"another action on {target} ({holder_id}) is running, its claim {left:.1f} s "
                "more; recovery runs this one after it",
            )
        if turn.holder != holder_id:
            self._emit(
                GateEvent.TURN_WAIT,
                action_id=action_id,
                holder=holder_id,
                target=target,
                seconds=round(left, 3),
                sending=hc.sending,
            )
            turn.holder, turn.polls = holder_id, 0
            turn.until = self._monotonic() + left + _WAIT_POLL_S
        self._sleep(max(0.0, min(left, _TURN_POLL_S * 2**turn.polls, _WAIT_POLL_S)))
        turn.polls += 1
        return None

    def reapprove(
        self, action_id: str, lease_id: str, approved_by: str, *, new_action_id: str | None = None
    ) -> Outcome:
        """After a refusal (or an unknown answer), a person approves the action again.

        The new action, under a new lease, takes the target's state as it is now as its
        decision context, since the person decided on that; its receipt names the action
        it replaces. An unknown action stays as it is (it is never resent under its key).

        Evidence wins: when the action's own refund exists, nothing new is sent. An
        unknown action adopts it (the outcome is the original action's); a refused one
        raises `ActionError` naming the refund, since its recorded refusal is wrong and
        only `verify()` and a person can set that straight.

        `new_action_id` names the new action instead of `Gate(new_action_id=...)`: a framework
        guard that may run the same re-approval again after a crash derives it from the call.
        """
        state = self.store.action(action_id)
        if state is None:
            raise ActionError(action_id, "not in the journal")
        refused = state.settlement is not None and state.settlement.status == "refused"
        unknown = state.settlement is None and state.unknown is not None
        if not (refused or unknown):
            raise ActionError(action_id, "only a refused or unknown action can be approved again")
        obs = self.effect.observe(state.intent)
        own = self._matching(state.intent, obs.own)
        if own is not None and unknown:
            self._emit(GateEvent.REAPPROVE_ADOPTS, action_id=action_id, external_id=own.external_id)
            return self._recover(action_id, looked=obs)
        if own is not None:
            raise ActionError(
                action_id,
                f"was refused, but its own refund {own.external_id} exists at Stripe: nothing "
                "is approved again or sent; verify() reports the refusal that missed it",
            )
        intent = replace(
            state.intent,
            action_id=new_action_id or self._new_action_id(),
            lease_id=lease_id,
            fingerprint=obs.fingerprint,
            context={**state.intent.context, "reapproves": action_id, "approved_by": approved_by},
            created_at=self._clock(),
        )
        return self.submit(intent)

    # -- the send path -------------------------------------------------------------------

    def _drive(self, attempt: ClaimAttempt, looked: Observation | None = None) -> Outcome:
        """From a taken claim to an outcome: the module docstring's steps, in a loop.

        Each turn reads the target once and looks our own send up in it; while a create may
        still land it only looks; otherwise it re-checks the world and the approval, commits
        2 (`sending`), sends, and settles on the answer (commit 3). An answer that settles
        nothing comes back here, to look again.
        """
        return self._turns(_Drive(attempt.state, attempt.epoch, attempt.state.unknown, looked))

    def _turns(self, drive: _Drive) -> Outcome:
        """The drive's turns until one settles it (see `_drive`)."""
        intent = drive.intent
        while True:
            obs = self._read(drive)
            if isinstance(obs, Outcome):
                return obs
            if obs is None:
                continue

            checks, own, conflict = self._lookup(intent, obs)
            if own is not None:
                return self._settle_found(
                    drive.state, drive.epoch, own, checks, drive.unsettled, answered=False
                )
            if conflict is not None:
                drive.unknown = self._mark_conflict(intent, drive.unknown, conflict)
            if drive.in_flight_until is not None and self._in_flight(drive.in_flight_until):
                self._sleep(
                    max(0.0, min(_LOOKUP_POLL_S, drive.in_flight_until - self._monotonic()))
                )
                continue
            if drive.unknown is not None:
                return self._leave_unknown(intent.action_id, drive.epoch, drive.unknown)

            refusal, drive.approval = self._world_and_approval(intent, obs, checks)
            if refusal is not None:
                return self._settle(drive.state, drive.epoch, refusal, checks, drive.unsettled)
            if drive.sends >= self._max_sends:
                return self._leave(
                    intent.action_id,
                    drive.epoch,
                    f"no settled answer after {drive.sends} sends; recovery will look it up",
                )

            ready = self._commit_sending(drive, checks)
            if ready is not None:
                return ready
            if drive.unknown is not None:
                continue
            settled = self._send(drive, checks)
            if settled is not None:
                return settled

    def _read(self, drive: _Drive) -> Observation | Outcome | None:
        """The one read of the target a turn needs (the early take's, if it brought one).

        None: the read settled nothing and was backed off; look again. An `Outcome`: the
        payment is not there (nothing was sent: refused) or cannot be read (left).
        """
        obs, drive.looked = drive.looked, None
        if obs is not None:
            return obs
        intent, aid, epoch = drive.intent, drive.intent.action_id, drive.epoch
        try:
            return self.effect.observe(intent)
        except PaymentsAuthError:
            self.store.release(aid, epoch)
            raise
        except PaymentsUnsettledError as e:
            drive.reads_failed += 1
            drive.unsettled.append(
                {"step": "read", "error": e.detail, "http_status": e.http_status}
            )
            self._emit(GateEvent.READ_UNSETTLED, action_id=aid, error=e.detail)
            if drive.reads_failed > self._max_sends and not self._in_flight(drive.in_flight_until):
                return self._leave(aid, epoch, f"could not read the payment: {e.detail}")
            self._backoff(drive.reads_failed)
            return None
        except PaymentsRejectedError as e:
            if e.code == "resource_missing" and e.http_status == 404 and drive.sends == 0:
                checks = [
                    Check("read", "the payment exists", f"{e.code}: {e.provider_message}", False)
                ]
                verdict = Settlement("refused", REASON_NO_TARGET)
                return self._settle(drive.state, epoch, verdict, checks, drive.unsettled)
            return self._leave(
                aid, epoch, f"could not read the payment ({e.code}): {e.provider_message}"
            )

    def _commit_sending(self, drive: _Drive, checks: list[Check]) -> Outcome | None:
        """Commit 2, then the claim left for the call; appends the claim check to `checks`.

        None with `drive.unknown` unset: ready to send. None with it set: the store says a
        create got an answer that may hide a send; look again, never send.
        """
        aid, epoch = drive.intent.action_id, drive.epoch
        if drive.evidence is None:
            drive.evidence = self._evidence(drive)
        sending = self.store.mark_sending(
            aid, epoch, self.timing.renewal_s, approval=drive.approval, evidence=drive.evidence
        )
        marked_at = self._monotonic()
        if sending.status == "claim_lost":
            return self._leave(
                aid, epoch, "the claim was lost before sending; nothing was sent", release=False
            )
        if sending.status == "unknown":
            drive.unknown = sending.reason or "a create got an answer that may hide a send"
            return None
        if sending.status == "lease_refused":
            checks[-1] = Check("approval", checks[-1].expected, sending.reason, False)
            verdict = Settlement("refused", sending.reason)
            return self._settle(drive.state, epoch, verdict, checks, drive.unsettled)
        assert sending.claim is not None
        return self._claim_left(drive, sending.claim, sending.left_s, marked_at, checks)

    def _claim_left(
        self, drive: _Drive, claim: Claim, left_s: float, marked_at: float, checks: list[Check]
    ) -> Outcome | None:
        """After `sending` is durable: the event, and the claim left for the call (appended
        to `checks`); None when there is enough to send."""
        aid, epoch = drive.intent.action_id, drive.epoch
        self._emit(GateEvent.SENDING, action_id=aid, expires_at=claim.expires_at, epoch=epoch)
        left = left_s - (self._monotonic() - marked_at)
        window = self.timing.send_window_s
        claim_check = Check(
            "claim", f">= {window:g} s of claim left", round(left, 3), left >= window
        )
        if not claim_check.passed:
            return self._leave(
                aid, epoch, f"only {left:.1f} s of claim left, {window:g} s needed to send"
            )
        checks.append(claim_check)
        return None

    def _evidence(self, drive: _Drive) -> dict[str, str]:
        """The approval's digest and the latest tree head's hash, for the send's metadata:
        a later attempt of the action (a recovery: an earlier epoch may have sent) takes
        what the first `sending` journaled, so its key never meets other parameters."""
        if drive.state.attempts > 1:
            for record in self.store.history(drive.intent.action_id):
                if record.record == "sending":
                    # An earlier epoch's (a `sending` of an older version carries none: its
                    # send had none either).
                    evidence = record.data.get("evidence")
                    if not isinstance(evidence, dict):
                        return {}
                    return {str(k): str(v) for k, v in evidence.items()}
        return self._evidence_for(drive.approval)

    def _evidence_for(self, approval: str | None) -> dict[str, str]:
        """A first `sending`'s evidence: the approval's digest and the latest head's hash."""
        evidence = {}
        if approval is not None:
            evidence[GRANT_METADATA_KEY] = approval
        head = self.log.latest_hash()
        if head is not None:
            evidence[HEAD_METADATA_KEY] = head
        return evidence

    def _send(self, drive: _Drive, checks: list[Check]) -> Outcome | None:
        """The call, and commit 3 on an answer that settles it.

        None: the answer settled nothing (the send may still land); look again, and only
        look until its in-flight window has closed.
        """
        intent, aid, epoch = drive.intent, drive.intent.action_id, drive.epoch
        key = self._idempotency_key(intent, drive.state.attempts, drive.sends)
        drive.sends += 1
        drive.in_flight_until = self._monotonic() + self.timing.in_flight_s
        self._emit(
            GateEvent.BEFORE_SEND,
            action_id=aid,
            idempotency_key=key,
            amount=intent.amount,
            currency=intent.currency,
        )
        sent = intent
        if drive.evidence:
            sent = replace(intent, metadata={**intent.metadata, **drive.evidence})
        try:
            found = self.effect.send(sent, key)
        except PaymentsRejectedError as e:
            self._emit(
                GateEvent.ANSWER, action_id=aid, ok=False, code=e.code, message=e.provider_message
            )
            verdict = Settlement("failed", e.provider_message, code=e.code)
            return self._settle(drive.state, epoch, verdict, checks, drive.unsettled)
        except PaymentsUnsettledError as e:
            drive.unsettled.append(
                {
                    "step": "send",
                    "error": e.detail,
                    "http_status": e.http_status,
                    "idempotency_key": key,
                }
            )
            self._emit(
                GateEvent.ANSWER_UNSETTLED, action_id=aid, error=e.detail, http_status=e.http_status
            )
            if e.http_status is not None and e.http_status >= 500 and drive.unknown is None:
                drive.unknown = f"Stripe answered HTTP {e.http_status} to the create call"
                self.store.mark_unknown(aid, drive.unknown)
                self._emit(GateEvent.UNKNOWN, action_id=aid, reason=drive.unknown)
            self._emit(
                GateEvent.IN_FLIGHT_WAIT,
                action_id=aid,
                seconds=round(drive.in_flight_until - self._monotonic(), 3),
            )
            return None
        self._emit(
            GateEvent.AFTER_ANSWER,
            action_id=aid,
            external_id=found.external_id,
            amount=found.amount,
        )
        if self._matching(intent, found) is None:
            drive.unknown = self._mark_conflict(intent, drive.unknown, found)
            return self._leave_unknown(aid, epoch, drive.unknown)
        return self._settle_found(
            drive.state, epoch, found, checks, drive.unsettled, answered=True, idempotency_key=key
        )

    def _look(self, intent: Intent) -> Observation | None:
        """One lookup for an early take; None when the read settles nothing."""
        try:
            return self.effect.observe(intent)
        except (PaymentsUnsettledError, PaymentsRejectedError):
            return None

    def _lookup(
        self, intent: Intent, obs: Observation
    ) -> tuple[list[Check], Found | None, Found | None]:
        """The lookup of our own earlier send (unless the effect skips it): the checks, our
        own send (matching the intent), and a send naming the action that does not match."""
        skipped = self._lookup_skipped()
        if skipped is not None:
            return [Check("lookup", f"skipped: {skipped}", None, True)], None, None
        # The effect's answer is checked here too: the gate owns what it adopts.
        own = self._matching(intent, obs.own)
        conflict = obs.conflict if own is None and obs.conflict is not None else None
        if own is None and conflict is None and obs.own is not None:
            conflict = obs.own
        where = getattr(self.effect, "where", AT_STRIPE)
        check = Check(
            "lookup",
            f"a refund {where} naming this action and matching it, if one exists",
            own.external_id if own else "none",
            True,
        )
        self._emit(
            GateEvent.CHECK,
            action_id=intent.action_id,
            name="lookup",
            found=own.external_id if own else None,
        )
        return [check], own, conflict

    def _lookup_skipped(self) -> str | None:
        """Why the gate goes without its lookup (`interlock.testing.NoLookup`), or None: for
        every effect that is not such a test double."""
        effect = self.effect
        return effect.lookup_skipped() if isinstance(effect, EmulatedEffect) else None

    @staticmethod
    def _matching(intent: Intent, found: Found | None) -> Found | None:
        """`found` when it matches the intent (our own send), else None."""
        return found if found is not None and found.mismatch(intent) is None else None

    def _mark_conflict(self, intent: Intent, unknown: str | None, found: Found) -> str:
        """Record a send naming the action that does not match it: the action becomes
        unknown for good (never adopted, never resent); returns the reason to report."""
        reason = _conflict_text(found, found.mismatch(intent) or "does not match")
        if unknown is None:
            self.store.mark_unknown(intent.action_id, reason)
        self._emit(
            GateEvent.CONFLICT,
            action_id=intent.action_id,
            external_id=found.external_id,
            amount=found.amount,
            reason=reason,
        )
        return reason

    def _in_flight(self, until: float | None) -> bool:
        """Whether our last create may still land (its in-flight window is open)."""
        return until is not None and self._monotonic() < until

    def _world_and_approval(
        self,
        intent: Intent,
        obs: Observation,
        checks: list[Check],
        *,
        lease: Lease | _Unread | None = _UNREAD,
    ) -> tuple[Settlement | None, str | None]:
        """The currency check (when the read learned the target's), the world check, the
        approval's signature and the approval check, in that order; appends to `checks`.
        Returns the refusal, if any, and the digest of the approval verified (commit 2
        sends under that very approval only). `lease`: the approval as already read (a
        first look's), else it is read now."""
        currency = intent.currency or obs.currency
        if intent.currency is not None and obs.currency is not None:
            same = intent.currency == obs.currency
            checks.append(Check("currency", intent.currency, obs.currency, same))
            self._emit(GateEvent.CHECK, action_id=intent.action_id, name="currency", passed=same)
            if not same:
                refusal = Settlement(
                    "refused",
                    f"the intent is in {intent.currency.upper()}, the payment is in "
                    f"{obs.currency.upper()}: a refund is always in its payment's currency",
                )
                return refusal, None
        unchanged = obs.fingerprint == intent.fingerprint
        checks.append(
            Check(
                "world_unchanged",
                {"fingerprint": intent.fingerprint},
                {"fingerprint": obs.fingerprint, "refunds": obs.seen},
                unchanged,
            )
        )
        self._emit(
            GateEvent.CHECK, action_id=intent.action_id, name="world_unchanged", passed=unchanged
        )
        if not unchanged:
            return Settlement("refused", REASON_WORLD_CHANGED), None
        if isinstance(lease, _Unread):
            lease = self.store.lease(intent.lease_id)
        if lease is not None and lease.damaged is None:
            unsigned = self.approvers.problem(lease)
            checks.append(
                Check(
                    "approval_signature",
                    "signed by one of the gate's approvers over what it authorizes",
                    unsigned or self.approvers.describe(lease),
                    unsigned is None,
                )
            )
            self._emit(
                GateEvent.CHECK,
                action_id=intent.action_id,
                name="approval_signature",
                passed=unsigned is None,
                problem=unsigned,
                signed=None if unsigned else self.approvers.describe(lease),
            )
            if unsigned is not None:
                return Settlement("refused", unsigned), None
        problem = approval_problem(
            lease,
            kind=intent.kind,
            target=intent.target,
            amount=intent.amount,
            action_id=intent.action_id,
            now=self._clock(),
            currency=currency,
        )
        expected = f"approval {intent.lease_id} live and covering {intent.amount}"
        checks.append(Check("approval", expected, problem or "ok", problem is None))
        self._emit(
            GateEvent.CHECK,
            action_id=intent.action_id,
            name="approval",
            passed=problem is None,
            problem=problem,
        )
        if problem is not None or lease is None:
            return Settlement("refused", problem), None
        return None, lease.digest()

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
        verdict = replace(verdict, currency=found.currency)
        return self._settle(
            state, epoch, verdict, checks, unsettled, idempotency_key=idempotency_key
        )

    def _check_kind(self, intent: Intent) -> None:
        if intent.kind != self.effect.kind:
            raise ActionError(
                intent.action_id, f"is a {intent.kind}, this gate sends {self.effect.kind}"
            )

    def _check_accepted(self, intent: Intent) -> None:
        problem = accepts(self.effect, intent)
        if problem is not None:
            raise ActionError(
                intent.action_id, f"{problem}; nothing was sent and the action is left as it is"
            )

    def _idempotency_key(self, intent: Intent, attempt: int, sends: int) -> str:
        # Every send of an action carries its id, so the provider replays the first one's
        # answer. Only a test double that emulates a provider which pruned the key
        # (`interlock.testing.Emulate24h`) says otherwise: it is given what it needs to
        # tell the action's first send (attempt 1, no sends yet) from the later ones.
        effect = self.effect
        if isinstance(effect, EmulatedEffect):
            return effect.idempotency_key(intent, attempt=attempt, sends=sends)
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
            # What a test double emulated, by name: no receipt of one passes for a real run.
            "emulated": (
                list(self.effect.emulated) if isinstance(self.effect, EmulatedEffect) else []
            ),
            "idempotency_key": idempotency_key,
        }
        try:
            receipt = self.store.settle(aid, epoch, self.owner, verdict, checks, extra, self._key)
        except LeaseError as e:
            # The store refused to record a spend past the approval's cap: the refund is
            # real and cannot be counted, which only a person can sort out.
            reason = f"{CONFLICT_PREFIX}refund {verdict.external_id} cannot be recorded: {e}"
            self.store.mark_unknown(aid, reason)
            self._emit(
                GateEvent.CONFLICT,
                action_id=aid,
                external_id=verdict.external_id,
                amount=verdict.amount,
                reason=reason,
            )
            return self._leave_unknown(aid, epoch, reason)
        if receipt is None:
            return self._fenced_out(aid, epoch, verdict)
        self._emit(
            GateEvent.SETTLED,
            action_id=aid,
            status=verdict.status,
            reason=verdict.reason,
            external_id=verdict.external_id,
            receipt=receipt.hash,
        )
        self._logged(aid, self.log.settled())
        return Outcome(
            aid,
            verdict.status,
            verdict.reason,
            verdict.external_id,
            verdict.amount,
            verdict.code,
            receipt,
            currency=verdict.currency or state.intent.currency,
        )

    def _fenced_out(self, action_id: str, epoch: int, verdict: Settlement) -> Outcome:
        """Commit 3 was fenced out (the claim ran out, or another gate took it): report what
        this gate knows. The recorded outcome is returned only when it agrees with this
        gate's verdict; otherwise pending, naming the refund this gate holds, if any."""
        held = verdict.external_id
        state = self.store.action(action_id)
        recorded = None if state is None else state.settlement
        landed = ("sent", "adopted")
        if recorded is not None and state is not None:
            same = (recorded.status in landed) == (verdict.status in landed)
            if same and recorded.external_id == held:
                return Outcome.from_state(state)
        knows = f"this gate's verdict was {verdict.status}"
        if held is not None:
            knows += f" with refund {held}"
        if recorded is None:
            reason = (
                f"the claim ran out before the outcome was recorded ({knows}); recovery settles it"
            )
            return self._leave(action_id, epoch, reason, release=False, external_id=held)
        reason = (
            f"the claim was lost before this gate recorded its outcome ({knows}); another gate "
            f"recorded {recorded.status}"
            + (f" with refund {recorded.external_id}" if recorded.external_id else "")
        )
        self._emit(
            GateEvent.CONFLICT,
            action_id=action_id,
            external_id=held,
            amount=verdict.amount,
            reason=reason,
        )
        return self._leave(
            action_id, epoch, reason, release=False, external_id=held, code=CODE_CONFLICT
        )

    def _leave_unknown(self, action_id: str, epoch: int, unknown: str) -> Outcome:
        code = CODE_CONFLICT if unknown.startswith(CONFLICT_PREFIX) else None
        return self._leave(action_id, epoch, _unknown_text(unknown), unknown=True, code=code)

    def _leave(
        self,
        action_id: str,
        epoch: int,
        reason: str,
        *,
        release: bool = True,
        unknown: bool = False,
        code: str | None = None,
        external_id: str | None = None,
    ) -> Outcome:
        # A claim not marked `sending` covers nothing in flight: end it, so the next
        # recovery need not wait it out. A `sending` one is left to expire.
        if release:
            self.store.release(action_id, epoch)
        self._emit(GateEvent.LEFT_TO_RECOVERY, action_id=action_id, reason=reason)
        return Outcome(action_id, "pending", reason, external_id, code=code, unknown=unknown)

    def _backoff(self, n: int) -> None:
        self._sleep(min(0.1 * 2 ** (n - 1), 1.0))

    def _emit(self, kind: GateEvent, **data: Any) -> None:
        if self._emit_to is not None:
            self._emit_to(Event(kind, data))

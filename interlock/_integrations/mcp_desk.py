"""The refund desk behind `interlock.mcp`'s tools: approvals, what the model saw, the gate.

No MCP import here: the desk is plain Python over a `Payments` and a `Store`, so a person's
approval command and the tests use it without the `mcp` SDK; `interlock.mcp` puts its two
tools on an MCP server.

An MCP client calls `get_payment`, then `issue_refund`. The desk remembers, per MCP
session, the fingerprint of the refunds it showed for each payment (or takes the one the
call passes back), journals the refund as an `interlock.Intent` under the payment's
approval, and runs it through `interlock.Gate`. A call is checked against its own
session's read, never another's: one server serves many conversations (streamable HTTP),
and a read one of them made says nothing of what another decided on. What it remembers is
bounded (`MAX_READS`), and a session's reads are forgotten when the session ends. The
answer says in words what happened and what the model should do next; `pending` is always
"unknown, being recovered", never a failure.

The action id is derived from the payment and the `request_id` the model chose for this
decision, so a call retried after its answer was lost (same payment, same request_id)
names the same action: the gate finds it journaled, or finds its refund at Stripe, and
refunds once. Nothing from the MCP session goes into it, so a retry through a restarted
server is the same action too. A request_id names one amount: the journal's `begin`
compares a call's decision with the journaled one under its write lock, so of two calls
at once with one request_id and two amounts, one is journaled and the other is told that
nothing was done for it (the refund it hears of is the other call's, never its own).

Approvals are interlock leases, one live at a time per payment, with ids
`mcp-approval:<payment>:<n>`; a person grants one (`grant_approval`) and revokes it
(`revoke_approval`), and every refund re-checks it right before the send.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interlock._core.approvals import Approver, Approvers
from interlock._core.claims import Owner
from interlock._core.config import Timing
from interlock._core.effects import StripeRefund
from interlock._core.errors import InterlockError, PaymentsRejectedError, PaymentsUnsettledError
from interlock._core.gate import EventSink, Gate, Outcome
from interlock._core.journal import ActionState, Intent, Store
from interlock._core.leases import Lease, lease_currency
from interlock._core.money import format_amount
from interlock._core.payments import Payment, Payments, refunds_fingerprint
from interlock._core.signing import SigningKey
from interlock._integrations.words import REFUNDED, desk_words

if TYPE_CHECKING:
    from interlock._core.anchors import Anchor


class DeskError(InterlockError, ValueError):
    """A tool call or an approval the desk cannot act on as given; the message says what
    to send instead. Nothing was journaled or sent."""


# Every action this server journals carries this in its metadata (and so in Stripe's).
SOURCE_KEY, SOURCE = "via", "mcp"
APPROVAL_PREFIX = "mcp-approval"
_PAYMENT_ID = re.compile(r"pi_[A-Za-z0-9]{1,200}")
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{7,99}")
REQUEST_ID_RULE = "8 to 100 characters: letters, digits and _ . : - (a UUID is best)"
# Stripe's largest amount in cents ($999,999.99); past it the journal's own bounds refuse.
MAX_AMOUNT = 99_999_999
MAX_REASON = 500
AMOUNT_RULE = f"an integer number of cents from 1 to {MAX_AMOUNT:,} (a JSON number, not a string)"
REASON_RULE = f"at most {MAX_REASON} characters of text on one line, no control characters"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The session of a desk that serves one conversation (a stdio server, a script); a caller
# serving many passes each call's own session.
ONE_SESSION = "one-session"
# At most this many reads (session, payment) are remembered; past it the oldest is dropped,
# and a refund on it asks for a fresh read: a refusal, never a refund on someone else's read.
MAX_READS = 10_000

Log = Callable[[str], None]


@dataclass(frozen=True)
class Answer:
    """A tool's answer: words for the model, data for programs, and whether it failed."""

    text: str
    data: dict[str, Any]
    is_error: bool = False


@dataclass(frozen=True)
class _Read:
    """What a session was shown of a payment: its refunds' fingerprint and its currency."""

    fingerprint: str
    currency: str


def action_id_for(payment_intent: str, request_id: str) -> str:
    """The action id of a refund request: the same payment and request_id give the same id."""
    digest = hashlib.sha256(f"{payment_intent}\n{request_id}".encode()).hexdigest()
    return f"mcp_{digest[:32]}"


def check_payment_id(payment_intent: object) -> str:
    """The PaymentIntent id if it is a string of Stripe's shape, else `DeskError`."""
    if not isinstance(payment_intent, str) or not _PAYMENT_ID.fullmatch(payment_intent):
        raise DeskError(
            f"{_shown(payment_intent)} is not a PaymentIntent id: use the payment's id as Stripe "
            "shows it, a string such as pi_3Qx8..."
        )
    return payment_intent


def _shown(value: object) -> str:
    """An argument as the model sent it, short and on one line."""
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else ""
    text = text or type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


# -- approvals ----------------------------------------------------------------------------


def _approval_id(payment_intent: str, n: int) -> str:
    return f"{APPROVAL_PREFIX}:{payment_intent}:{n}"


def current_approval(store: Store, payment_intent: str) -> Lease | None:
    """The payment's latest approval (live, revoked or expired), or None if it never had one."""
    latest, n = None, 1
    while (lease := store.lease(_approval_id(payment_intent, n))) is not None:
        latest, n = lease, n + 1
    return latest


def approval_state(lease: Lease, now: float) -> str:
    """`live`, `revoked` or `expired`."""
    if lease.revoked:
        return "revoked"
    return "expired" if now >= lease.expires_at else "live"


def grant_approval(
    store: Store,
    payment_intent: str,
    cap: int,
    *,
    hours: float,
    by: str,
    now: float | None = None,
    approver: Approver | None = None,
    currency: str | None = None,
    exact: bool = False,
) -> Lease:
    """Approve refunds on the payment up to `cap` (in the smallest unit of `currency`, the
    payment's; US cents when not given) for `hours`, or with `exact` one refund of exactly
    `cap`, once; `DeskError` if one is live.

    A live approval is never replaced silently: the person revokes it first, so that its
    spend and its reservations are not forgotten by a fresh cap. `now` defaults to the
    wall clock. With `approver` the approval is signed by its key (and granted in its name),
    as a desk whose gate trusts that approver needs; without it, it is unsigned.
    """
    now = time.time() if now is None else now
    check_payment_id(payment_intent)
    if cap <= 0:
        raise DeskError(f"the cap must be a positive number of cents, got {cap}")
    if not 0 < hours <= 24 * 366:
        raise DeskError(f"the approval must last more than 0 and at most a year, got {hours} h")
    latest = current_approval(store, payment_intent)
    if latest is not None and approval_state(latest, now) == "live":
        currency = lease_currency(latest)
        raise DeskError(
            f"{payment_intent} already has a live approval ({format_amount(latest.cap, currency)}"
            f" cap, {format_amount(latest.available_for(''), currency)} left): revoke it first, "
            "then approve again"
        )
    n = 1 if latest is None else int(latest.id.rsplit(":", 1)[1]) + 1
    lease = Lease(
        id=_approval_id(payment_intent, n),
        kind=StripeRefund.kind,
        target=payment_intent,
        cap=cap,
        expires_at=now + hours * 3600,
        granted_by=by,
        granted_at=now,
        currency=currency,
        exact=exact,
    )
    return store.grant_lease(lease if approver is None else approver.sign(lease))


def revoke_approval(
    store: Store, payment_intent: str, *, by: str, now: float | None = None
) -> Lease:
    """Revoke the payment's approval; `DeskError` if it has none that is live."""
    now = time.time() if now is None else now
    check_payment_id(payment_intent)
    latest = current_approval(store, payment_intent)
    if latest is None:
        raise DeskError(f"{payment_intent} has no approval to revoke")
    if approval_state(latest, now) != "live":
        raise DeskError(f"{payment_intent}'s approval is already {approval_state(latest, now)}")
    return store.revoke_lease(latest.id, by)


def approval_view(lease: Lease | None, now: float) -> dict[str, Any] | None:
    """The approval as `get_payment` shows it to the model."""
    if lease is None:
        return None
    return {
        "id": lease.id,
        "state": approval_state(lease, now),
        "cap": lease.cap,
        "spent": lease.spent,
        "left": max(0, lease.available_for("")),
        "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lease.expires_at)),
    }


# -- the desk -----------------------------------------------------------------------------


class RefundDesk:
    """The two tools' logic over a payments client and a journal store, for every session.

    Each tool call names its MCP session (`session`, a string the caller keeps per
    session; `ONE_SESSION` when left out; None for a call from no session the server can
    tell apart, so nothing it reads is remembered). `end_session` forgets a session's
    reads. `log` gets a line for each recovery and each gate step that raised; `on_event`
    gets the gate's own events (`interlock.Event`). One desk per server process: its owner
    is this process, so a restarted server takes over a dead one's claims.
    """

    def __init__(
        self,
        payments: Payments,
        store: Store,
        *,
        timing: Timing,
        owner: Owner | None = None,
        log: Log | None = None,
        on_event: EventSink | None = None,
        clock: Callable[[], float] = time.time,
        approvers: Approvers | None = None,
        signing_key: SigningKey | None = None,
        anchors: Sequence[Anchor] = (),
    ) -> None:
        """`signing_key` and `anchors`: the gate's receipt key and where its receipt log's
        heads are published (see `Gate`)."""
        self.payments = payments
        self.store = store
        self._log = log or (lambda _text: None)
        self._clock = clock
        self.gate = refund_gate(
            payments,
            store,
            timing=timing,
            owner=owner or Owner.current("mcp-server"),
            on_event=on_event,
            clock=clock,
            approvers=approvers,
            signing_key=signing_key,
            anchors=anchors,
        )
        # (session, payment) -> fingerprint of the refunds get_payment showed that session,
        # oldest read first (bounded by MAX_READS)
        self._shown: OrderedDict[tuple[str, str], _Read] = OrderedDict()
        self._lock = threading.Lock()
        # The SDK runs tool calls in threads, maybe at once. One gate step at a time: two
        # steps of one owner on one action would fence each other out and answer
        # "pending" for nothing.
        self._gate_lock = threading.Lock()

    def recover(self) -> list[Outcome]:
        """Finish this server's journaled refunds that have no outcome yet, without waiting.

        Runs on start and before every tool call: the receipt log catches up first; an
        unknown answer is looked up at Stripe (and settled when its refund shows) while the
        claim rules allow, never sent twice.
        Skipped while another call is at the gate; it runs again before the next call.
        """
        if not self._gate_lock.acquire(blocking=False):
            return []
        try:
            return self._recover()
        finally:
            self._gate_lock.release()

    def _recover(self) -> list[Outcome]:
        # The receipts settled since (this server's, or a killed one's) go into the log and
        # its heads to the anchors: by the next call, not after `log_every` more refunds.
        logged = self.gate.catch_up_log()
        if logged.problem is not None:
            self._log(f"receipt log: {logged.problem}")
        outcomes = []
        for aid in self.store.pending():
            state = self.store.action(aid)
            if state is None or state.intent.metadata.get(SOURCE_KEY) != SOURCE:
                continue
            try:
                outcome = self.gate.recover_action(aid, wait=False)
            except InterlockError as e:
                self._log(f"recovery of {aid} stopped: {e}")
                continue
            self._log(f"recovery of {aid}: {outcome.status} {outcome.reason or ''}".rstrip())
            outcomes.append(outcome)
        return outcomes

    # -- get_payment ---------------------------------------------------------------------

    def end_session(self, session: str) -> None:
        """Forget what `session` was shown: it ended, and nothing can refund on its reads."""
        with self._lock:
            for key in [key for key in self._shown if key[0] == session]:
                del self._shown[key]

    def _remember(self, session: str, payment_intent: str, read: _Read) -> None:
        with self._lock:
            self._shown[(session, payment_intent)] = read
            self._shown.move_to_end((session, payment_intent))
            while len(self._shown) > MAX_READS:
                self._shown.popitem(last=False)

    def _read(self, session: str | None, payment_intent: str) -> _Read | None:
        """What `session` was last shown of the payment, if it still is kept."""
        if session is None:
            return None
        with self._lock:
            return self._shown.get((session, payment_intent))

    def get_payment(self, payment_intent: str, *, session: str | None = ONE_SESSION) -> Answer:
        """The payment with its refunds and its approval; remembers what `session` was shown."""
        try:
            check_payment_id(payment_intent)
        except DeskError as e:
            return _invalid(str(e))
        self.recover()
        try:
            payment = self.payments.get_payment(payment_intent)
        except PaymentsRejectedError as e:
            return Answer(
                f"Could not read {payment_intent}: Stripe answered {e.code}: "
                f"{e.provider_message}. Check the payment id.",
                {"status": "error", "code": e.code},
                is_error=True,
            )
        except PaymentsUnsettledError as e:
            return Answer(
                f"Could not read {payment_intent} right now ({e.detail}); try again shortly.",
                {"status": "error", "code": "unsettled"},
                is_error=True,
            )
        fingerprint = refunds_fingerprint(payment.refunds)
        if session is not None:
            self._remember(session, payment_intent, _Read(fingerprint, payment.currency))
        view = _payment_view(payment)
        view["refunds_fingerprint"] = fingerprint
        view["approval"] = approval_view(
            current_approval(self.store, payment_intent), self._clock()
        )
        return Answer(json.dumps(view), view)

    # -- issue_refund --------------------------------------------------------------------

    def issue_refund(
        self,
        payment_intent: str,
        amount: int,
        request_id: str,
        seen_fingerprint: str | None = None,
        reason: str | None = None,
        *,
        session: str | None = ONE_SESSION,
    ) -> Answer:
        """Refund through the gate; a retried request_id returns its first outcome.

        `seen_fingerprint` is the `refunds_fingerprint` of the read the model decided on;
        without it, the one `session`'s last `get_payment` of the payment showed (never
        another session's). A request_id already journaled with another amount is refused,
        and nothing is done for this call.
        """
        try:
            check_payment_id(payment_intent)
            if (
                isinstance(amount, bool)
                or not isinstance(amount, int)
                or not 1 <= amount <= MAX_AMOUNT
            ):
                raise DeskError(f"amount must be {AMOUNT_RULE}; got {_shown(amount)}")
            if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
                raise DeskError(
                    f"request_id {_shown(request_id)} is not valid: use a string of "
                    f"{REQUEST_ID_RULE}"
                )
            if reason is not None and (
                not isinstance(reason, str) or len(reason) > MAX_REASON or _CONTROL.search(reason)
            ):
                raise DeskError(
                    f"reason must be {REASON_RULE} (got {_shown(reason)}, "
                    f"{len(reason) if isinstance(reason, str) else 0} characters); shorten it "
                    "or leave it out"
                )
            if seen_fingerprint is not None and (
                not isinstance(seen_fingerprint, str)
                or not _FINGERPRINT.fullmatch(seen_fingerprint)
            ):
                raise DeskError(
                    "refunds_fingerprint must be the value get_payment returned (sha256:...); "
                    "leave it out to use this conversation's last read of the payment"
                )
        except DeskError as e:
            return _invalid(str(e))
        self.recover()
        aid = action_id_for(payment_intent, request_id)
        asked = {"payment_intent": payment_intent, "amount": amount, "request_id": request_id}
        state = self.store.action(aid)
        if state is not None:
            return self._journaled(state, asked)

        read = self._read(session, payment_intent)
        seen = seen_fingerprint or (read.fingerprint if read is not None else None)
        if seen is None:
            return _invalid(
                f"Not refunded: the server has no read of {payment_intent} from this "
                "conversation to check the refund against (a server without sessions keeps "
                f"none). Call get_payment({payment_intent}) first and decide on what it shows, "
                "then call issue_refund again, passing its refunds_fingerprint. Nothing was "
                "journaled or sent."
            )
        lease = current_approval(self.store, payment_intent)
        if lease is None:
            return Answer(
                f"Not refunded: {payment_intent} has no approval for refunds. Ask a person to "
                "approve it; nothing was journaled or sent.",
                {**asked, "status": "refused", "refunded": False, "reason": "no approval"},
                is_error=True,
            )
        intent = Intent(
            action_id=aid,
            kind=StripeRefund.kind,
            target=payment_intent,
            amount=amount,
            lease_id=lease.id,
            fingerprint=seen,
            # The currency the model was shown, else the approval's: the gate refuses the
            # refund when the payment's is another, and words every amount in it.
            currency=read.currency if read is not None else lease_currency(lease),
            metadata={SOURCE_KEY: SOURCE, "request_id": request_id},
            context={
                "request_id": request_id,
                "reason": reason or "",
                "fingerprint_from": "call" if seen_fingerprint else "get_payment",
            },
        )
        try:
            with self._gate_lock:
                outcome = self.gate.submit(intent)
        except InterlockError as e:
            state = self.store.action(aid)
            if state is not None and not state.intent.same_decision(intent):
                # The journal's begin found the action journaled by another call, under
                # its write lock: the request_id is that call's, whatever this one was told
                # before it.
                return self._journaled(state, asked)
            outcome = self._after_error(aid, e)
        return outcome_answer(outcome, asked, retry=False)

    def _journaled(self, state: ActionState, asked: Mapping[str, Any]) -> Answer:
        """A call whose request_id is journaled already: its retry, or another amount's."""
        if state.intent.amount != asked["amount"]:
            return other_amount_answer(state, asked)
        aid = state.intent.action_id
        retry = state.settlement is not None
        outcome = Outcome.from_state(state) if retry else self._run(aid, lambda: self._resume(aid))
        return outcome_answer(outcome, asked, retry=retry)

    def _resume(self, action_id: str) -> Outcome:
        return self.gate.recover_action(action_id, wait=False)

    def _run(self, action_id: str, step: Callable[[], Outcome]) -> Outcome:
        """Run a gate step; if it raises, report what the journal holds, never a guess."""
        try:
            with self._gate_lock:
                return step()
        except InterlockError as e:
            return self._after_error(action_id, e)

    def _after_error(self, action_id: str, error: InterlockError) -> Outcome:
        """What the journal holds for an action whose gate step raised `error`."""
        self._log(f"{action_id}: {type(error).__name__}: {error}")
        state = self.store.action(action_id)
        if state is not None and state.settlement is not None:
            return Outcome.from_state(state)
        return Outcome(action_id, "pending", f"{type(error).__name__}: {error}")


def refund_gate(
    payments: Payments,
    store: Store,
    *,
    timing: Timing,
    owner: Owner,
    on_event: EventSink | None,
    clock: Callable[[], float],
    approvers: Approvers | None = None,
    signing_key: SigningKey | None = None,
    anchors: Sequence[Anchor] = (),
) -> Gate:
    """The gate every refund of the desk goes through (`approvers`, `signing_key`,
    `anchors`: see `Gate`)."""
    return Gate(
        store,
        StripeRefund(payments),
        timing=timing,
        owner=owner,
        on_event=on_event,
        clock=clock,
        # One send per call: a call that gets no settled answer waits out that send's
        # in-flight window (looking its refund up) and then answers "unknown", within
        # an MCP client's patience; the next call or a restart carries on.
        max_sends=1,
        approvers=approvers,
        signing_key=signing_key,
        anchors=anchors,
    )


def _payment_view(payment: Payment) -> dict[str, Any]:
    return {
        "id": payment.id,
        "amount": payment.amount,
        "currency": payment.currency,
        "status": payment.status,
        "amount_refunded": payment.amount_refunded,
        "refunds": [{"id": r.id, "amount": r.amount, "status": r.status} for r in payment.refunds],
    }


def _invalid(text: str) -> Answer:
    return Answer(text, {"status": "invalid", "refunded": False, "reason": text}, is_error=True)


def other_amount_answer(state: ActionState, asked: Mapping[str, Any]) -> Answer:
    """A call whose request_id another call journaled for another amount: nothing was done
    for it. The other call's refund (if any) is named as the other call's, never this one's."""
    pi, amount, rid = asked["payment_intent"], int(asked["amount"]), asked["request_id"]
    other = Outcome.from_state(state) if state.settlement is not None else None
    status = "pending" if other is None else other.status
    refund_id = None if other is None else other.external_id
    if status in ("sent", "adopted"):
        theirs = f"that call's refund is {refund_id}"
    elif status == "pending":
        theirs = "that call's outcome is not settled yet"
    else:
        theirs = f"that call was not refunded ({status})"
    currency = Outcome.from_state(state).currency
    text = (
        f"Nothing was done for this call: request_id {rid} was already used by another call "
        f"for a refund of {format_amount(state.intent.amount, currency)} on {pi} ({theirs}), "
        f"not for {format_amount(amount, currency)}. A request_id names one refund decision, "
        "and a retry repeats its amount. For a new refund decision, read the payment again "
        "with get_payment and use a new request_id."
    )
    data: dict[str, Any] = {
        **asked,
        "status": "invalid",
        "refunded": False,
        "refund_id": None,
        "reason": "request_id already used for another amount",
        "other_call": {
            "action_id": state.intent.action_id,
            "amount": state.intent.amount,
            "status": status,
            "refund_id": refund_id,
        },
    }
    return Answer(text, data, is_error=True)


def outcome_answer(outcome: Outcome, asked: Mapping[str, Any], *, retry: bool) -> Answer:
    """An outcome in words the model can act on, with the data a program needs.

    `retry` says the request_id had settled before this call, so nothing was attempted now.
    """
    pi, amount, rid = asked["payment_intent"], int(asked["amount"]), asked["request_id"]
    receipt = outcome.receipt
    data: dict[str, Any] = {
        **asked,
        "status": outcome.status,
        "refunded": REFUNDED[outcome.status],
        "refund_id": outcome.external_id,
        "currency": outcome.currency,
        "reason": outcome.reason,
        "action_id": outcome.action_id,
        "retry": retry,
        "receipt": None
        if receipt is None
        else {"seq": receipt.seq, "hash": receipt.hash, "signed": receipt.signature is not None},
    }
    again = "Already settled for this request_id; nothing was sent again. " if retry else ""
    note = f" Receipt #{receipt.seq} ({receipt.hash[:16]}…)." if receipt is not None else ""
    text = desk_words(outcome, pi, amount, rid)
    return Answer(again + text + note, data, is_error=REFUNDED[outcome.status] is False)

"""Currency is part of the decision, and every amount is worded in its currency.

The intent, the lease and the receipt carry the currency; a refund intent in another
currency than its payment's, or an action under an approval in another currency, is
refused; a guard's words and data give ¥2,000 for JPY 2000, never $20.00.
"""

from __future__ import annotations

import time

import pytest

from interlock import (
    ActionError,
    Approver,
    Approvers,
    Found,
    Gate,
    Intent,
    IntentError,
    Lease,
    LeaseError,
    MemoryStore,
    Outcome,
    Owner,
    StripeRefund,
    StripeTransfer,
    Timing,
    format_amount,
    new_action_id,
    refunds_fingerprint,
    transfers_fingerprint,
)
from interlock import langchain as lc
from interlock import openai_agents as oa
from interlock import pydantic_ai as pa
from interlock._core.leases import approval_problem
from interlock._integrations.mcp_desk import outcome_answer
from interlock.testing import InProcessPayments

TIMING = Timing(claim_ttl_s=6, stripe_timeout_s=1)
# The approvals are signed (the signature covers the currency); the gates trust this key.
APPROVER = Approver.generate("ana")
TRUST = Approvers([APPROVER.public_key])

# (amount, currency, words): Stripe's smallest units, zero- and three-decimal included.
WORDS = [
    (2_000, "jpy", "¥2,000"),
    (2_000, "eur", "€20.00"),
    (2_000, "usd", "$20.00"),
    (2_000, "kwd", "KWD 2.000"),
]


@pytest.mark.parametrize(
    ("amount", "currency", "words"),
    [
        *WORDS,
        (123_456_789, "usd", "$1,234,567.89"),
        (2_000, "chf", "CHF 20.00"),
        (2_000, "gbp", "£20.00"),
        (5, "krw", "KRW 5"),
        (1_500, "bhd", "BHD 1.500"),
    ],
)
def test_an_amount_is_worded_in_its_currencys_minor_units(
    amount: int, currency: str, words: str
) -> None:
    """One formatter knows zero- and three-decimal currencies and the common symbols."""
    assert format_amount(amount, currency) == words


def test_an_amount_without_a_currency_is_never_guessed_as_dollars() -> None:
    """An older intent's amount is said to be in its smallest unit, with no symbol."""
    words = format_amount(2_000, None)
    assert "$" not in words and "2,000" in words and "not recorded" in words
    assert format_amount(2_000, "usd", trim=True) == "$20"
    assert format_amount(2_050, "usd", trim=True) == "$20.50"


def _intent(**kw: object) -> Intent:
    fields: dict[str, object] = {
        "action_id": "act_1",
        "kind": "transfer",
        "target": "acct_1",
        "amount": 2_500,
        "lease_id": "lease-1",
        "fingerprint": "sha256:x",
    }
    fields.update(kw)
    return Intent(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["USD", "us", "dollars", "", 840, "u$d"])
def test_an_intents_currency_is_a_lowercase_iso_code(bad: object) -> None:
    """A bad currency is refused when the intent is made, naming the field."""
    with pytest.raises(IntentError, match="currency"):
        _intent(currency=bad)


def test_an_older_intent_reads_back_without_a_currency_and_is_its_replays_decision() -> None:
    """A stored intent with no currency reads back as None, is written as it was, and is the
    same decision as its replay stamped by a gate; two currencies are two decisions."""
    old = _intent()
    data = old.to_dict()
    assert "currency" not in data
    assert Intent.from_dict(data).currency is None
    assert Intent.from_dict(data).same_decision(_intent(currency="usd"))
    assert _intent(currency="usd").same_decision(old)
    assert not _intent(currency="usd").same_decision(_intent(currency="eur"))
    assert Intent.from_dict(_intent(currency="eur").to_dict()).currency == "eur"


def _lease(**kw: object) -> Lease:
    now = time.time()
    fields: dict[str, object] = {
        "id": "lease-1",
        "kind": "transfer",
        "target": "acct_1",
        "cap": 2_500,
        "expires_at": now + 3600,
        "granted_by": "ana",
        "granted_at": now,
    }
    fields.update(kw)
    return Lease(**fields)  # type: ignore[arg-type]


def test_a_lease_caps_one_currency() -> None:
    """A lease in USD refuses an EUR action; one stored without a currency is a USD lease
    (older versions' meaning), so it refuses EUR too; a bad currency is refused at grant."""
    usd = _lease(currency="usd")
    ask = {"kind": "transfer", "target": "acct_1", "amount": 2_500, "action_id": "a", "now": 0.0}
    assert approval_problem(usd, **ask, currency="usd") is None  # type: ignore[arg-type]
    problem = approval_problem(usd, **ask, currency="eur")  # type: ignore[arg-type]
    assert problem is not None and "USD" in problem and "EUR" in problem
    legacy = Lease.from_dict({k: v for k, v in usd.to_dict().items() if k != "currency"})
    assert legacy.currency is None and legacy.damaged is None
    assert approval_problem(legacy, **ask, currency="usd") is None  # type: ignore[arg-type]
    assert approval_problem(legacy, **ask, currency="eur") is not None  # type: ignore[arg-type]
    assert Lease.from_dict(_lease(currency="jpy").to_dict()).currency == "jpy"
    with pytest.raises(LeaseError, match="currency"):
        _lease(currency="EUR")
    assert Lease.from_dict({**usd.to_dict(), "currency": "EUR"}).damaged is not None


def test_a_usd_lease_refuses_an_eur_transfer_and_nothing_is_sent() -> None:
    """The EUR gate stamps its currency; the approval in USD does not cover it."""
    payments, store = InProcessPayments(), MemoryStore()
    store.grant_lease(APPROVER.sign(_lease(currency="usd")))
    seen = transfers_fingerprint(payments.list_transfers("acct_1"))
    gate = Gate(store, StripeTransfer(payments, currency="eur"), timing=TIMING, approvers=TRUST)

    outcome = gate.submit(_intent(fingerprint=seen))

    assert outcome.status == "refused" and "approval is in USD" in str(outcome.reason)
    assert payments.list_transfers("acct_1") == []
    assert outcome.receipt is not None and outcome.receipt.body["currency"] == "eur"


def test_a_transfer_journaled_without_a_currency_is_left_as_it_is() -> None:
    """A transfer journaled by an older version (no currency) and submitted again: no
    transfer gate can tell which currency was decided, so it raises, releases the claim its
    commit 1 took, and sends nothing; the action stays pending for a person."""
    payments, store = InProcessPayments(), MemoryStore()
    store.grant_lease(APPROVER.sign(_lease(currency="usd")))
    seen = transfers_fingerprint(payments.list_transfers("acct_1"))
    older = _intent(fingerprint=seen, currency=None)
    store.begin(older, Owner.current("older-version"), 6, 2)
    store.release(older.action_id, 1)
    gate = Gate(store, StripeTransfer(payments, currency="usd"), timing=TIMING, approvers=TRUST)

    with pytest.raises(ActionError, match="currency"):
        gate.submit(older)

    assert payments.list_transfers("acct_1") == []
    state = store.action(older.action_id)
    assert state is not None and state.settlement is None and state.intent.currency is None
    assert state.claim is not None and not state.claim.live(store.now())


def _refund_world(currency: str) -> tuple[InProcessPayments, MemoryStore, str, str]:
    payments, store = InProcessPayments(), MemoryStore()
    payment = payments.create_payment(10_000, currency=currency).id
    now = time.time()
    lease = Lease(
        f"lease-{payment}", "refund", payment, 2_000, now + 3600, "ana", now, currency=currency
    )
    store.grant_lease(APPROVER.sign(lease))
    return payments, store, payment, refunds_fingerprint(payments.list_refunds(payment))


def test_a_refund_intent_in_another_currency_than_its_payments_is_refused() -> None:
    """A JPY payment and an intent in USD: refused by the currency check, nothing refunded."""
    payments, store, payment, seen = _refund_world("jpy")
    intent = Intent(
        new_action_id(), "refund", payment, 2_000, f"lease-{payment}", seen, currency="usd"
    )

    outcome = Gate(store, StripeRefund(payments), timing=TIMING, approvers=TRUST).submit(intent)

    assert outcome.status == "refused", outcome
    assert "the payment is in JPY" in str(outcome.reason)
    assert payments.list_refunds(payment) == []
    assert outcome.receipt is not None
    [check] = [c for c in outcome.receipt.checks if c["name"] == "currency"]
    assert (check["expected"], check["observed"], check["passed"]) == ("usd", "jpy", False)


@pytest.mark.parametrize(("currency", "words"), [("jpy", "¥2,000"), ("eur", "€20.00")])
def test_a_refund_in_its_payments_currency_is_sent_and_its_receipt_records_it(
    currency: str, words: str
) -> None:
    """The receipt records the currency and the kind; the model reads the amount in it."""
    payments, store, payment, seen = _refund_world(currency)
    intent = Intent(
        new_action_id(), "refund", payment, 2_000, f"lease-{payment}", seen, currency=currency
    )

    outcome = Gate(store, StripeRefund(payments), timing=TIMING, approvers=TRUST).submit(intent)

    assert outcome.status == "sent", outcome
    assert outcome.receipt is not None
    assert (outcome.receipt.body["currency"], outcome.receipt.body["kind"]) == (currency, "refund")
    assert pa.outcome_words(outcome).startswith(f"done: refunded {words}, refund")


@pytest.mark.parametrize(("amount", "currency", "words"), WORDS)
def test_each_guards_words_and_data_are_in_the_actions_currency(
    amount: int, currency: str, words: str
) -> None:
    """pydantic_ai, openai_agents, langchain and the MCP desk word the amount in its
    currency and give the currency in their structured data."""
    sent = Outcome("act_1", "sent", external_id="re_1", amount=amount, currency=currency)
    adopted = Outcome("act_1", "adopted", external_id="re_1", amount=amount, currency=currency)
    for outcome in (sent, adopted):
        for text in (
            pa.outcome_words(outcome),
            oa.outcome_words(outcome),
            lc.outcome_words(outcome),
        ):
            assert f"refunded {words}" in text and "$" not in text.replace(words, "")
    assert lc.outcome_data(sent)["currency"] == currency

    intent = _intent(kind="refund", target="pi_1", amount=amount, currency=currency)
    question = pa._question(pa.APPROVAL_TYPE, intent, intent.action_id)
    assert question["question"] == f"refund {words} on pi_1?"
    assert (question["amount"], question["currency"]) == (amount, currency)

    asked = {"payment_intent": "pi_1", "amount": amount, "request_id": "req-1"}
    answer = outcome_answer(sent, asked, retry=False)
    assert answer.text.startswith(f"Refunded {words} on pi_1")
    assert answer.data["currency"] == currency
    pending = Outcome("act_1", "pending", "HTTP 500", unknown=True, currency=currency)
    assert f"refund of {words} on pi_1" in outcome_answer(pending, asked, retry=False).text


def test_a_send_naming_the_action_in_another_currency_is_not_its_own() -> None:
    """A found send in another currency than the intent's never matches it (a conflict,
    never adopted), whichever effect found it; one with no currency on either side does."""
    intent = _intent(currency="usd")
    assert (
        Found("tr_1", 2_500, currency="eur").mismatch(intent) == "is in eur, the intent is in usd"
    )
    assert Found("tr_1", 2_500, currency="usd").mismatch(intent) is None
    assert Found("tr_1", 2_500, currency="eur").mismatch(_intent()) is None

"""The MCP server's refund desk and its command line, in-process (no MCP session).

The desk runs over the in-process payments model and a memory store with the smallest
useful timing; what the MCP tools add on top is covered in `test_mcp_server.py`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import interlock._integrations.mcp_desk as desk_module
from interlock import Event, GateEvent, MemoryStore, Timing
from interlock.mcp import (
    WORLD_CHANGED_WORDS,
    Answer,
    DeskError,
    RefundDesk,
    action_id_for,
    current_approval,
    grant_approval,
    revoke_approval,
)
from interlock.testing import InProcessPayments
from interlock_demo.cli import main
from tests.helpers.approvals import APPROVER, APPROVERS

AMOUNT = 2000
RID = "req-0001-abcdef"


@pytest.fixture
def payments() -> InProcessPayments:
    """A fresh in-memory Stripe."""
    return InProcessPayments()


@pytest.fixture
def store() -> MemoryStore:
    """A fresh journal."""
    return MemoryStore()


@pytest.fixture
def payment(payments: InProcessPayments, store: MemoryStore) -> str:
    """A $100 payment approved for refunds up to $20."""
    pi = payments.create_payment(10_000).id
    grant_approval(store, pi, AMOUNT, hours=1, by="ana", now=time.time(), approver=APPROVER)
    return pi


def desk(payments: InProcessPayments, store: MemoryStore) -> RefundDesk:
    """A desk for one session."""
    return RefundDesk(
        payments, store, timing=Timing(claim_ttl_s=6, stripe_timeout_s=1), approvers=APPROVERS
    )


def test_the_action_id_is_stable_per_payment_and_request() -> None:
    """The same payment and request_id give one action id; another payment another."""
    assert action_id_for("pi_A", RID) == action_id_for("pi_A", RID)
    assert action_id_for("pi_A", RID) != action_id_for("pi_B", RID)
    assert action_id_for("pi_A", RID) != action_id_for("pi_A", RID + "x")


def test_a_request_id_names_one_decision(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """Reusing a request_id with another amount is refused in words, and sends nothing; the
    first call's refund is named as that call's, not as this one's."""
    d = desk(payments, store)
    d.get_payment(payment)
    first = d.issue_refund(payment, 1000, RID)
    assert first.data["status"] == "sent"
    other = d.issue_refund(payment, 500, RID)
    assert other.is_error and other.data["status"] == "invalid"
    assert other.text.startswith("Nothing was done for this call")
    assert "already used by another call for a refund of $10.00" in other.text
    assert f"that call's refund is {first.data['refund_id']}" in other.text
    assert "new request_id" in other.text and "Refunded" not in other.text
    assert other.data["refunded"] is False and other.data["refund_id"] is None
    assert other.data["other_call"] == {
        "action_id": action_id_for(payment, RID),
        "amount": 1000,
        "status": "sent",
        "refund_id": first.data["refund_id"],
    }
    assert [r.amount for r in payments.list_refunds(payment)] == [1000]


def test_two_calls_of_one_request_at_once_refund_once(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """The same call twice at once (the SDK runs tool calls in threads): one refund, one answer.

    The second call starts while the first is at the gate, between its read and its commit
    (a wait there eats no claim: none is taken yet). Neither may be told "pending" because
    the other one took the action from under it.
    """
    answers: dict[str, Answer] = {}
    second = threading.Thread(
        target=lambda: answers.__setitem__("second", d.issue_refund(payment, AMOUNT, RID))
    )

    def on_event(event: Event) -> None:
        if event.kind is GateEvent.CHECK and second.ident is None:
            second.start()
            second.join(1.0)  # it may have to wait for this call: give it a second, no more

    d = RefundDesk(
        payments,
        store,
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        on_event=on_event,
        approvers=APPROVERS,
    )
    d.get_payment(payment)
    answers["first"] = d.issue_refund(payment, AMOUNT, RID)
    second.join(30)
    (only,) = payments.list_refunds(payment)
    texts = {k: a.text for k, a in answers.items()}
    assert {k: a.data["refund_id"] for k, a in answers.items()} == dict.fromkeys(
        ("first", "second"), only.id
    ), texts


def test_a_refund_needs_a_read_first(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """Without a get_payment in this session or a fingerprint in the call, nothing is journaled."""
    answer = desk(payments, store).issue_refund(payment, AMOUNT, RID)
    assert answer.is_error and "get_payment" in answer.text
    assert store.action(action_id_for(payment, RID)) is None
    assert payments.list_refunds(payment) == []


def test_a_refund_is_checked_against_its_own_sessions_read_never_anothers(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """Chat A reads; chat B reads, refunds and reads again; A's refund on its stale read is
    refused as a change, and a chat that never read the payment is told to read it first."""
    d = desk(payments, store)
    d.get_payment(payment, session="chat-a")
    d.get_payment(payment, session="chat-b")
    assert d.issue_refund(payment, 500, RID, session="chat-b").data["status"] == "sent"
    d.get_payment(payment, session="chat-b")
    stale = d.issue_refund(payment, 500, RID + "-a", session="chat-a")
    unread = d.issue_refund(payment, 500, RID + "-c", session="chat-c")
    assert stale.data["status"] == "refused" and WORLD_CHANGED_WORDS in stale.text
    assert unread.is_error and unread.data["status"] == "invalid"
    assert f"Call get_payment({payment}) first" in unread.text
    assert "refunds_fingerprint" in unread.text
    assert store.action(action_id_for(payment, RID + "-c")) is None
    assert [r.amount for r in payments.list_refunds(payment)] == [500]


def test_a_call_from_no_known_session_needs_the_fingerprint(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """session=None (a stateless server): its reads are not kept, so a refund without the
    fingerprint is refused, and one with it is sent."""
    d = desk(payments, store)
    seen = d.get_payment(payment, session=None).data["refunds_fingerprint"]
    refused = d.issue_refund(payment, 500, RID, session=None)
    assert refused.is_error and "refunds_fingerprint" in refused.text
    sent = d.issue_refund(payment, 500, RID, seen_fingerprint=seen, session=None)
    assert sent.data["status"] == "sent", sent.text


def test_reads_are_forgotten_when_a_session_ends_and_kept_within_a_bound(
    payments: InProcessPayments,
    store: MemoryStore,
    payment: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ended session's reads are gone; past MAX_READS the oldest read is dropped (its
    refund asks for a fresh read), and the memory never holds more."""
    monkeypatch.setattr(desk_module, "MAX_READS", 3)
    d = desk(payments, store)
    d.get_payment(payment, session="ended")
    d.end_session("ended")
    assert "first" in d.issue_refund(payment, 500, RID, session="ended").text
    for n in range(5):
        d.get_payment(payment, session=f"chat-{n}")
    assert len(d._shown) == 3
    assert "first" in d.issue_refund(payment, 500, RID, session="chat-1").text
    assert d.issue_refund(payment, 500, RID, session="chat-4").data["status"] == "sent"
    assert store.action(action_id_for(payment, RID)) is not None


def test_the_fingerprint_in_the_call_serves_a_new_session(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """A client that passes back the fingerprint it read is checked against it, in any session.

    A stale one (read before a hand refund) is refused; the current one refunds.
    """
    stale = desk(payments, store).get_payment(payment).data["refunds_fingerprint"]
    payments.create_refund(payment, 500)
    later = desk(payments, store)
    refused = later.issue_refund(payment, 1000, RID, seen_fingerprint=stale)
    assert refused.data["status"] == "refused" and WORLD_CHANGED_WORDS in refused.text
    fresh = desk(payments, store).get_payment(payment).data["refunds_fingerprint"]
    sent = later.issue_refund(payment, 1000, RID + "-2", seen_fingerprint=fresh)
    assert sent.data["status"] == "sent", sent.text
    assert sorted(r.amount for r in payments.list_refunds(payment)) == [500, 1000]


def test_a_refund_is_decided_and_worded_in_the_currency_its_session_was_shown(
    payments: InProcessPayments, store: MemoryStore
) -> None:
    """A yen payment read in the session: the intent records jpy (the gate checks it against
    the payment's) and the model is told "¥2,000", never "$20.00"."""
    pi = payments.create_payment(10_000, currency="jpy").id
    grant_approval(store, pi, 5000, hours=1, by="ana", approver=APPROVER, currency="jpy")
    d = desk(payments, store)
    d.get_payment(pi)

    sent = d.issue_refund(pi, 2000, RID)

    assert sent.data["status"] == "sent", sent.text
    assert "¥2,000" in sent.text and "$" not in sent.text
    state = store.action(action_id_for(pi, RID))
    assert state is not None and state.intent.currency == "jpy"


def test_a_refund_without_a_read_is_decided_in_the_approvals_currency(
    payments: InProcessPayments, store: MemoryStore
) -> None:
    """A call that brings its fingerprint but no read in this session is decided in the
    approval's currency: under a dollar approval on a yen payment, the gate refuses it (the
    payment is in another currency) and sends nothing."""
    pi = payments.create_payment(10_000, currency="jpy").id
    grant_approval(store, pi, 5000, hours=1, by="ana", approver=APPROVER)
    seen = desk(payments, store).get_payment(pi).data["refunds_fingerprint"]

    refused = desk(payments, store).issue_refund(pi, 2000, RID, seen_fingerprint=seen)

    assert refused.data["status"] == "refused", refused.text
    assert payments.list_refunds(pi) == []
    state = store.action(action_id_for(pi, RID))
    assert state is not None and state.intent.currency == "usd"


def test_no_approval_is_refused_and_nothing_journaled(
    payments: InProcessPayments, store: MemoryStore
) -> None:
    """A payment nobody approved: the model is told to ask a person; no intent is written."""
    pi = payments.create_payment(10_000).id
    d = desk(payments, store)
    assert d.get_payment(pi).data["approval"] is None
    answer = d.issue_refund(pi, AMOUNT, RID)
    assert answer.is_error and "no approval" in answer.text and "Ask a person" in answer.text
    assert store.action(action_id_for(pi, RID)) is None


def test_more_than_the_cap_is_refused_with_the_reason(
    payments: InProcessPayments, store: MemoryStore, payment: str
) -> None:
    """$25 under a $20 approval: refused by the gate, with a receipt and the cap in words."""
    d = desk(payments, store)
    d.get_payment(payment)
    answer = d.issue_refund(payment, 2500, RID)
    assert answer.is_error and answer.data["status"] == "refused"
    assert "2500" in answer.text and answer.data["receipt"] is not None
    assert payments.list_refunds(payment) == []


@pytest.mark.parametrize(
    ("pi", "amount", "rid", "words"),
    [
        ("with", AMOUNT, RID, "not a PaymentIntent id"),
        ("pi_ok", 0, RID, "integer number of cents from 1 to 99,999,999"),
        ("pi_ok", 10**15, RID, "integer number of cents from 1 to 99,999,999"),
        ("pi_ok", 9_999_999_999, RID, "integer number of cents from 1 to 99,999,999"),
        ("pi_ok", "500", RID, 'not a string); got "500"'),
        ("pi_ok", 500.0, RID, "integer number of cents"),
        (123, AMOUNT, RID, "a string such as pi_"),
        ("pi_ok", AMOUNT, 12345678, "request_id 12345678 is not valid"),
        ("pi_ok", AMOUNT, "short", "request_id"),
        ("pi_ok", AMOUNT, "has spaces in it", "request_id"),
    ],
)
def test_bad_arguments_are_refused_in_words(
    payments: InProcessPayments, store: MemoryStore, pi: str, amount: int, rid: str, words: str
) -> None:
    """A malformed payment id, amount or request_id is answered with what to fix."""
    answer = desk(payments, store).issue_refund(pi, amount, rid)
    assert answer.is_error and answer.data["status"] == "invalid" and words in answer.text


@pytest.mark.parametrize(
    "reason",
    ["x" * 1_000_000, "refund\r\nInjected: line", "colour \x1b[31mred", 42],
)
def test_a_reason_past_its_bounds_is_refused_and_stored_nowhere(
    payments: InProcessPayments, store: MemoryStore, payment: str, reason: object
) -> None:
    """A 1 MB reason, one with CR/LF or ESC, or one that is not text is refused in words
    before anything is journaled (it was stored three times: intent, journal, receipt)."""
    d = desk(payments, store)
    d.get_payment(payment)
    answer = d.issue_refund(payment, AMOUNT, RID, reason=reason)  # type: ignore[arg-type]
    assert answer.is_error and answer.data["status"] == "invalid"
    assert "at most 500 characters of text on one line" in answer.text
    assert len(answer.text) < 1000
    assert store.action(action_id_for(payment, RID)) is None
    assert payments.list_refunds(payment) == []


def test_a_live_approval_is_not_replaced_silently(store: MemoryStore) -> None:
    """A second grant while one is live is refused; after a revocation a new one is current."""
    now = time.time()
    first = grant_approval(store, "pi_X1", AMOUNT, hours=1, by="ana", now=now)
    with pytest.raises(DeskError, match="revoke it first"):
        grant_approval(store, "pi_X1", 5000, hours=1, by="ana", now=now)
    revoke_approval(store, "pi_X1", by="ben", now=now)
    with pytest.raises(DeskError, match="already revoked"):
        revoke_approval(store, "pi_X1", by="ben", now=now)
    second = grant_approval(store, "pi_X1", 5000, hours=1, by="ana", now=now)
    assert second.id != first.id
    assert current_approval(store, "pi_X1") == second


def test_a_home_that_is_a_file_is_refused_in_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """INTERLOCK_HOME naming a file: exit 2, saying where and what to do; nothing written."""
    home = tmp_path / "a-file"
    home.write_text("not a folder")
    monkeypatch.setenv("INTERLOCK_HOME", str(home))
    assert main(["mcp", "approve", "pi_Home1", "--cap", "2000"]) == 2
    err = capsys.readouterr().err
    assert f"cannot keep the journal in {home / 'mcp'}" in err
    assert "set INTERLOCK_HOME" in err
    assert home.read_text() == "not a folder"


@pytest.mark.parametrize(
    ("argv", "env_key", "words"),
    [
        (["mcp"], None, "STRIPE_SECRET_KEY"),
        (["mcp"], "sk_live_MadeUpKeyForTests123", "live secret key"),
        (["mcp", "--stripe-base", "http://127.0.0.1:9"], None, "add --offline"),
        (["mcp", "--offline", "--approve", "pi_A1"], None, "go together"),
    ],
)
def test_serve_refuses_bad_configuration(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env_key: str | None,
    words: str,
) -> None:
    """No test key, a live key, --stripe-base without --offline, a flag without its pair: exit 2.

    A refused key is never echoed.
    """
    monkeypatch.setenv("PATH", "/nonexistent")  # no `stripe` CLI to find a key with
    if env_key is not None:
        monkeypatch.setenv("STRIPE_SECRET_KEY", env_key)
    assert main(argv) == 2
    out = capsys.readouterr()
    assert words in out.err and out.out == ""
    if env_key is not None:
        assert env_key not in out.err

"""The emulator's faults for the gate's "maybe sent" rules, driven through the real SDK.

Each fault is armed in-process (`model.add_fault`) or over HTTP (`POST /_emulator/faults`)
and observed through `interlock.make_stripe_client` / `StripePayments` against the
loopback emulator: what the client sees, and what Stripe (the model) then holds.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import stripe

from interlock import PaymentsUnsettledError, StripePayments, make_stripe_client
from interlock.testing import InProcessPayments, PaymentsModel, StripeEmulator
from interlock.testing.model import (
    CREATE_FAULT_KINDS,
    FAULT_KINDS,
    FAULT_STAGES,
    READ_FAULT_KINDS,
)
from tests.conftest import TEST_KEY
from tests.loopback.test_emulator import (
    _all_refunds,
    _client,
    _headers,
    _http,
    _paid,
    _refund,
)


def _arm(emu: StripeEmulator, **fault: Any) -> dict[str, Any]:
    """Arm a fault over the control route; returns the fault as the route describes it."""
    status, body, _ = _http(emu, "POST", "/_emulator/faults", fault)
    assert status == 200, body
    return dict(body)


def _wait(emu: StripeEmulator, fault_id: str, until: str, wait: float = 5) -> dict[str, Any]:
    status, body, _ = _http(emu, "GET", f"/_emulator/faults/{fault_id}?wait={wait}&until={until}")
    assert status == 200, body
    return dict(body)


# -- one definition of the kinds ---------------------------------------------------------


def test_kinds_are_one_tuple_split_into_creates_and_reads() -> None:
    """FAULT_KINDS is exactly the create kinds then the read kinds, each named once."""
    assert FAULT_KINDS == CREATE_FAULT_KINDS + READ_FAULT_KINDS
    assert len(set(FAULT_KINDS)) == len(FAULT_KINDS)
    assert set(FAULT_STAGES) <= set(CREATE_FAULT_KINDS)
    assert {"error_429", "garbled_2xx", "trickle"} <= set(CREATE_FAULT_KINDS)
    assert set(READ_FAULT_KINDS) == {"read_401", "read_403", "read_429", "read_500"}


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_kind_is_armable_both_ways(emu: StripeEmulator, kind: str) -> None:
    """Every kind arms in-process and over HTTP, with its default stage, and is documented."""
    from interlock.testing import emulator as emulator_module
    from interlock.testing import model as model_module

    here = emu.model.add_fault(kind)
    there = _arm(emu, kind=kind)
    default = FAULT_STAGES[kind][0] if kind in FAULT_STAGES else None
    assert here.stage == there["stage"] == default
    assert there["kind"] == kind
    assert f"`{kind}`" in (model_module.__doc__ or "")
    assert emulator_module.__doc__ and "FAULT_KINDS" in emulator_module.__doc__


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ({"kind": "hold", "stage": "sometime"}, "unknown stage 'sometime'"),
        ({"kind": "error_429", "stage": "after_commit"}, "use none"),
        ({"kind": "hold", "stage": "never_commits", "commit": True}, "disagree"),
        ({"kind": "drop", "commit": False}, "no commit=false"),
        ({"kind": "hold", "stage": 3}, "stage must be a string"),
        ({"kind": "read_401", "payment_intent": 7}, "payment_intent must be a string"),
        ({"kind": "hold", "count": True}, "count must be an integer"),
        ({"kind": "hold", "later": 1}, "unknown fields later"),
    ],
)
def test_bad_fault_is_400_and_arms_nothing(
    emu: StripeEmulator, fault: dict[str, Any], needle: str
) -> None:
    """A fault the model cannot arm is refused in words over HTTP, and nothing is armed."""
    status, body, _ = _http(emu, "POST", "/_emulator/faults", fault)
    assert status == 400
    assert needle in body["error"]
    assert emu.model.faults() == []


def test_commit_flag_still_maps_to_stages() -> None:
    """The older commit flag arms the same faults as the stages it stands for."""
    model = PaymentsModel()
    assert model.add_fault("hold", commit=True).stage == "after_commit"
    assert model.add_fault("hold", commit=False).stage == "before_commit"
    assert model.add_fault("error_500", commit=True).stage == "after_commit"
    assert model.add_fault("error_500", commit=False).stage == "before_execution"
    assert model.add_fault("drop", commit=True).stage is None


# -- creates -----------------------------------------------------------------------------


def test_error_429_makes_and_saves_nothing(emu: StripeEmulator) -> None:
    """A 429 is Stripe's RateLimitError; no refund, and the same key then goes through fresh."""
    client = _client(emu)
    pi = _paid(client)
    fault = _arm(emu, kind="error_429")
    with pytest.raises(stripe.RateLimitError) as err:
        _refund(client, pi.id, 300, key="k-429")
    assert err.value.http_status == 429
    assert err.value.error is not None and err.value.error.code == "rate_limit"
    assert _all_refunds(client, pi.id) == []
    assert _wait(emu, fault["id"], "ended")["committed"] is False
    retry = _refund(client, pi.id, 300, key="k-429")
    assert retry.amount == 300
    assert "idempotent-replayed" not in _headers(retry)
    payments = StripePayments(client)
    emu.model.add_fault("error_429")
    with pytest.raises(PaymentsUnsettledError) as unsettled:
        payments.create_refund(pi.id, 100, idempotency_key="k-429b")
    assert unsettled.value.http_status == 429


def test_garbled_2xx_makes_the_refund_and_saves_the_real_answer(emu: StripeEmulator) -> None:
    """A 200 whose body is not JSON: the SDK cannot read it, yet the refund exists and replays."""
    client = _client(emu)
    pi = _paid(client)
    fault = _arm(emu, kind="garbled_2xx")
    with pytest.raises(stripe.APIError) as err:
        _refund(client, pi.id, 400, key="k-garbled")
    assert err.value.http_status == 200
    assert "Invalid response body" in str(err.value)
    [refund] = _all_refunds(client, pi.id)
    assert refund.amount == 400
    assert _wait(emu, fault["id"], "committed")["committed"] is True
    replay = _refund(client, pi.id, 400, key="k-garbled")
    assert replay.id == refund.id
    assert _headers(replay)["idempotent-replayed"] == "true"


@pytest.mark.parametrize(
    ("stage", "made", "replayed_500"),
    [
        ("before_execution", False, False),
        ("after_commit", True, True),
        ("no_refund", False, True),
    ],
)
def test_error_500_stages(emu: StripeEmulator, stage: str, made: bool, replayed_500: bool) -> None:
    """A 500 before execution saves nothing; after commit or with no refund it is replayed."""
    client = _client(emu)
    pi = _paid(client)
    fault = _arm(emu, kind="error_500", stage=stage)
    with pytest.raises(stripe.APIError) as err:
        _refund(client, pi.id, 500, key="k-500")
    assert err.value.http_status == 500
    assert err.value.error.type == "api_error"
    assert len(_all_refunds(client, pi.id)) == int(made)
    assert _wait(emu, fault["id"], "ended")["committed"] is made
    if replayed_500:
        for _ in range(2):
            with pytest.raises(stripe.APIError) as again:
                _refund(client, pi.id, 500, key="k-500")
            assert again.value.http_status == 500
            assert _headers(again.value)["idempotent-replayed"] == "true"
        assert len(_all_refunds(client, pi.id)) == int(made)
    else:
        retry = _refund(client, pi.id, 500, key="k-500")
        assert "idempotent-replayed" not in _headers(retry)
        assert [r.id for r in _all_refunds(client, pi.id)] == [retry.id]


def test_hold_before_commit_lands_after_the_clients_deadline(emu: StripeEmulator) -> None:
    """A create held before commit past a 0.3 s deadline: the client gives up, the refund lands."""
    client = _client(emu)
    pi = _paid(client)
    fault = _arm(emu, kind="hold", stage="before_commit", hold_ms=800)
    short = StripePayments(make_stripe_client(TEST_KEY, timeout_s=0.3, base_url=emu.url))
    with pytest.raises(PaymentsUnsettledError) as err:
        short.create_refund(pi.id, 250, idempotency_key="k-late")
    assert "timed out" in str(err.value)
    assert _all_refunds(client, pi.id) == [], "the refund landed before the hold ended"
    assert _wait(emu, fault["id"], "committed")["committed"] is True
    [refund] = _all_refunds(client, pi.id)
    assert refund.amount == 250
    assert _refund(client, pi.id, 250, key="k-late").id == refund.id


def test_hold_that_never_commits(emu: StripeEmulator, release_hold: threading.Event) -> None:
    """A never-committing hold: 409 meanwhile, then no answer and no refund, and the key is
    free. Armed twice: the transport's one resend under the key meets it too."""
    client = _client(emu, timeout_s=10)
    pi = _paid(client)
    fault = emu.model.add_fault("hold", stage="never_commits", hold_ms=8000, count=2)
    errors: list[BaseException] = []

    def first() -> None:
        try:
            _refund(client, pi.id, 300, key="k-never")
        except stripe.StripeError as e:
            errors.append(e)

    worker = threading.Thread(target=first)
    worker.start()
    try:
        assert _wait(emu, fault.id, "started")["started"] is True
        with pytest.raises(stripe.APIError) as busy:
            _refund(client, pi.id, 300, key="k-never")
        assert busy.value.http_status == 409
    finally:
        release_hold.set()
        worker.join(10)
    assert not worker.is_alive()
    [error] = errors
    assert isinstance(error, stripe.APIConnectionError)
    assert fault.ended.is_set() and not fault.committed.is_set()
    assert _all_refunds(client, pi.id) == []
    fresh = _refund(client, pi.id, 300, key="k-never")
    assert "idempotent-replayed" not in _headers(fresh)
    assert [r.id for r in _all_refunds(client, pi.id)] == [fresh.id]


def test_trickled_answer_outlasts_a_per_read_timeout_but_not_the_deadline(
    emu: StripeEmulator,
) -> None:
    """A trickled answer arrives whole to a patient client; a 0.5 s deadline cuts it off."""
    client = _client(emu)
    pi = _paid(client)
    emu.model.add_fault("trickle", hold_ms=600)
    started = time.monotonic()
    whole = _refund(client, pi.id, 100, key="k-trickle")
    assert time.monotonic() - started >= 0.5
    assert whole.amount == 100
    assert _headers(whole)["idempotency-key"] == "k-trickle"

    emu.model.add_fault("trickle", hold_ms=6000)
    short = make_stripe_client(TEST_KEY, timeout_s=0.5, base_url=emu.url)
    started = time.monotonic()
    with pytest.raises(stripe.APIConnectionError) as err:
        _refund(short, pi.id, 200, key="k-trickle-2")
    elapsed = time.monotonic() - started
    assert "timed out" in str(err.value)
    assert elapsed < 2.5, f"a 0.5 s deadline took {elapsed:.2f} s against a 6 s trickle"
    assert sorted(r.amount for r in _all_refunds(client, pi.id)) == [100, 200]


def test_faults_wait_for_their_payment(emu: StripeEmulator) -> None:
    """A create fault limited to one payment leaves another payment's refunds alone."""
    client = _client(emu)
    a, b = _paid(client), _paid(client)
    fault = _arm(emu, kind="error_429", payment_intent=a.id)
    assert _refund(client, b.id, 100).amount == 100
    with pytest.raises(stripe.RateLimitError):
        _refund(client, a.id, 100)
    assert emu.model.fault(fault["id"]).fired == 1  # type: ignore[union-attr]


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        ("read_401", stripe.AuthenticationError, 401),
        ("read_403", stripe.PermissionError, 403),
        ("read_429", stripe.RateLimitError, 429),
        ("read_500", stripe.APIError, 500),
    ],
)
def test_read_faults_fail_both_reads(
    emu: StripeEmulator, kind: str, error: type[stripe.StripeError], status: int
) -> None:
    """Each read fault fails a refund list and a payment read with Stripe's error, then stops."""
    client = _client(emu)
    pi = _paid(client)
    _refund(client, pi.id, 100)
    fault = _arm(emu, kind=kind, count=2)
    with pytest.raises(error) as listed:
        client.v1.refunds.list(params={"payment_intent": pi.id, "limit": 100})
    with pytest.raises(error) as read:
        client.v1.payment_intents.retrieve(pi.id)
    for e in (listed.value, read.value):
        assert e.http_status == status
        assert e.error is not None and e.error.message
        assert e.error.type == ("api_error" if status == 500 else "invalid_request_error")
        assert "sk_test" not in str(e.error.message)
    assert _wait(emu, fault["id"], "ended")["remaining"] == 0
    assert [r.amount for r in _all_refunds(client, pi.id)] == [100]
    assert client.v1.payment_intents.retrieve(pi.id).id == pi.id


def test_read_fault_for_one_payment(emu: StripeEmulator) -> None:
    """A read fault limited to one payment fails its reads only; creates never take it."""
    client = _client(emu)
    a, b = _paid(client), _paid(client)
    _arm(emu, kind="read_401", payment_intent=a.id, count=3)
    assert _refund(client, a.id, 100).amount == 100
    assert [r.amount for r in _all_refunds(client, b.id)] == []
    assert client.v1.payment_intents.retrieve(b.id).id == b.id
    with pytest.raises(stripe.AuthenticationError):
        client.v1.refunds.list(params={"payment_intent": a.id})
    with pytest.raises(stripe.AuthenticationError):
        client.v1.payment_intents.retrieve(a.id)


def test_read_fault_in_process() -> None:
    """In-process, a read fault is raised by InProcessPayments like any 4xx/5xx answer."""
    payments = InProcessPayments()
    pi = payments.create_payment(1000)
    payments.model.add_fault("read_500", payment_intent=pi.id)
    with pytest.raises(PaymentsUnsettledError) as err:
        payments.list_refunds(pi.id)
    assert err.value.http_status == 500
    assert payments.list_refunds(pi.id) == []


# -- acting while a create is held -------------------------------------------------------


def test_outage_action_while_a_create_is_held_over_http(
    emu: StripeEmulator, release_hold: threading.Event
) -> None:
    """until=started answers while the create is held; a hand refund then lands before it."""
    client = _client(emu, timeout_s=10)
    pi = _paid(client, 5000)
    fault = _arm(emu, kind="hold", stage="before_commit", hold_ms=8000)
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(_refund(client, pi.id, 2000, key="k-agent"))
    )
    worker.start()
    try:
        seen = _wait(emu, fault["id"], "started")
        assert (seen["started"], seen["committed"]) == (True, False)
        hand = _refund(_client(emu), pi.id, 2000)
        assert [r.id for r in _all_refunds(client, pi.id)] == [hand.id]
    finally:
        release_hold.set()
        worker.join(10)
    assert not worker.is_alive()
    assert [r.id for r in _all_refunds(client, pi.id)] == [done[0].id, hand.id]


def test_on_start_runs_an_outage_action_inside_the_held_create() -> None:
    """In-process, on_start runs in the create's thread once its key is in progress."""
    payments = InProcessPayments()
    pi = payments.create_payment(5000)
    seen: list[Any] = []

    def hand_refund() -> None:
        params = {"payment_intent": pi.id, "amount": "2000"}
        busy = payments.model.post("refunds", params, "k-agent")
        seen.append(busy.status)
        seen.append(payments.create_refund(pi.id, 2000).amount)

    fault = payments.model.add_fault("hold", stage="before_commit", on_start=hand_refund)
    agent = payments.create_refund(pi.id, 2000, idempotency_key="k-agent")
    assert seen == [409, 2000]
    assert fault.started.is_set() and fault.committed.is_set() and fault.ended.is_set()
    assert payments.list_refunds(pi.id)[0].id == agent.id
    assert len(payments.list_refunds(pi.id)) == 2

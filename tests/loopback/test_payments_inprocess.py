"""The two faces of the payments model: `InProcessPayments` and `StripePayments`.

`StripePayments` drives the real `stripe` SDK against the loopback emulator; the in-process
face calls the same `PaymentsModel` class directly. Both must give the same results and
the same error classes for the same scenarios. Also here: how `StripePayments` sorts SDK
errors, `refunds_fingerprint`, and `new_id`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import stripe

from interlock import (
    Payment,
    Payments,
    PaymentsAuthError,
    PaymentsError,
    PaymentsRejectedError,
    PaymentsUnsettledError,
    Refund,
    StripePayments,
    make_stripe_client,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments, PaymentsModel, StripeEmulator
from interlock.testing.model import Reply, new_id
from tests.conftest import TEST_KEY

DAY_S = 24 * 3600


def _handler_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "process_request_thread" in t.name}


@pytest.fixture(scope="module")
def _server() -> Iterator[StripeEmulator]:
    """One emulator for the module, its threads and socket made once."""
    with StripeEmulator() as emu:
        yield emu


@dataclass
class Face:
    """One face of the payments model, and the model behind it."""

    name: str
    payments: Payments
    model: PaymentsModel


def _stripe_face(server: StripeEmulator, timeout_s: float = 5.0) -> Face:
    model = PaymentsModel()
    server.model = server._server.model = model
    client = make_stripe_client(TEST_KEY, timeout_s=timeout_s, base_url=server.url)
    return Face("stripe", StripePayments(client), model)


def _inprocess_face() -> Face:
    model = PaymentsModel()
    return Face("inprocess", InProcessPayments(model), model)


@pytest.fixture(params=["stripe", "inprocess"])
def face(request: pytest.FixtureRequest) -> Iterator[Face]:
    """Each face in turn, over a fresh model; joins the emulator's request threads after."""
    if request.param == "inprocess":
        yield _inprocess_face()
        return
    server = request.getfixturevalue("_server")
    before = _handler_threads()
    stripe_face = _stripe_face(server)
    yield stripe_face
    assert isinstance(stripe_face.payments, StripePayments)
    stripe_face.payments.close()  # its kept-alive connection holds a request thread
    for t in _handler_threads() - before:
        t.join(10)


# -- same results on both faces --------------------------------------------------------


def test_both_faces_are_payments() -> None:
    """Both faces satisfy the `interlock.Payments` protocol."""
    client = make_stripe_client(TEST_KEY, timeout_s=1.0, base_url="http://127.0.0.1:9")
    assert isinstance(StripePayments(client), Payments)
    assert isinstance(InProcessPayments(), Payments)


def test_create_payment(face: Face) -> None:
    """create_payment makes a succeeded card payment with a charge, its metadata and no refunds."""
    payment = face.payments.create_payment(4200, metadata={"case": "c-7"})
    assert isinstance(payment, Payment)
    assert payment.id.startswith("pi_")
    assert (payment.amount, payment.currency, payment.status) == (4200, "usd", "succeeded")
    assert payment.latest_charge is not None and payment.latest_charge.startswith("ch_")
    assert dict(payment.metadata) == {"case": "c-7"}
    assert payment.refunds == ()
    assert payment.amount_left == 4200


def test_refunds_default_partial_and_metadata(face: Face) -> None:
    """Refunds take an amount or default to what is left, and keep their metadata."""
    pi = face.payments.create_payment(5000)
    part = face.payments.create_refund(pi.id, 1200, metadata={"by": "agent"})
    rest = face.payments.create_refund(pi.id)
    assert isinstance(part, Refund)
    assert (part.amount, part.status, part.payment_intent) == (1200, "succeeded", pi.id)
    assert dict(part.metadata) == {"by": "agent"}
    assert rest.amount == 3800
    assert rest.id.startswith("re_") and rest.id != part.id


def test_get_payment_counts_only_counting_refunds(face: Face) -> None:
    """get_payment lists every refund newest first; failed ones do not count as refunded."""
    pi = face.payments.create_payment(5000)
    a = face.payments.create_refund(pi.id, 1000)
    b = face.payments.create_refund(pi.id, 2000)
    face.model.set_refund_status(a.id, "failed")
    payment = face.payments.get_payment(pi.id)
    assert [r.id for r in payment.refunds] == [b.id, a.id]
    assert [r.status for r in payment.refunds] == ["succeeded", "failed"]
    assert payment.amount_refunded == 2000
    assert payment.amount_left == 3000


def test_over_refund_is_rejected_with_stripes_wording(face: Face) -> None:
    """Refunding more than is left is a PaymentsRejectedError on param amount, HTTP 400."""
    pi = face.payments.create_payment(2000)
    face.payments.create_refund(pi.id, 500)
    with pytest.raises(PaymentsRejectedError) as err:
        face.payments.create_refund(pi.id, 1600)
    assert (err.value.code, err.value.param, err.value.http_status) == (
        "invalid_request_error",
        "amount",
        400,
    )
    assert err.value.provider_message == (
        "Refund amount ($16.00) is greater than unrefunded amount on charge ($15.00)"
    )
    assert err.value.operation == "create refund"


def test_fully_refunded_is_rejected(face: Face) -> None:
    """A refund on a fully refunded payment is rejected with code charge_already_refunded."""
    pi = face.payments.create_payment(2000)
    face.payments.create_refund(pi.id)
    with pytest.raises(PaymentsRejectedError) as err:
        face.payments.create_refund(pi.id, 1)
    assert (err.value.code, err.value.http_status) == ("charge_already_refunded", 400)


@pytest.mark.parametrize("operation", ["get_payment", "list_refunds", "create_refund"])
def test_unknown_payment_is_rejected_as_missing(face: Face, operation: str) -> None:
    """Reading, listing or refunding an unknown payment is rejected with resource_missing (404)."""
    with pytest.raises(PaymentsRejectedError) as err:
        getattr(face.payments, operation)("pi_unknown")
    assert (err.value.code, err.value.http_status) == ("resource_missing", 404)
    assert "pi_unknown" in err.value.provider_message


@pytest.mark.parametrize("amount", [0, -100])
def test_non_positive_refund_amount_is_rejected(face: Face, amount: int) -> None:
    """A zero or negative refund amount is rejected as an invalid integer, nothing refunded."""
    pi = face.payments.create_payment(2000)
    with pytest.raises(PaymentsRejectedError) as err:
        face.payments.create_refund(pi.id, amount)
    assert (err.value.code, err.value.param) == ("parameter_invalid_integer", "amount")
    assert face.payments.list_refunds(pi.id) == []


def test_same_key_replays_the_refund(face: Face) -> None:
    """A retry with the same key returns the same refund and makes no second one."""
    pi = face.payments.create_payment(3000)
    first = face.payments.create_refund(pi.id, 700, idempotency_key="case-9:refund")
    again = face.payments.create_refund(pi.id, 700, idempotency_key="case-9:refund")
    assert again == first
    assert [r.id for r in face.payments.list_refunds(pi.id)] == [first.id]


def test_same_key_other_params_is_rejected(face: Face) -> None:
    """The same key with other params is rejected (idempotency_error, 400), nothing created."""
    pi = face.payments.create_payment(3000)
    face.payments.create_refund(pi.id, 700, idempotency_key="k")
    with pytest.raises(PaymentsRejectedError) as err:
        face.payments.create_refund(pi.id, 701, idempotency_key="k")
    assert (err.value.code, err.value.http_status) == ("idempotency_error", 400)
    assert len(face.payments.list_refunds(pi.id)) == 1


def test_same_key_in_flight_is_unsettled(face: Face, release_hold: threading.Event) -> None:
    """While a request with a key is still running, the same key is unsettled (409)."""
    pi = face.payments.create_payment(3000)
    fault = face.model.add_fault("hold", hold_ms=8000, commit=False)
    done: list[Refund] = []
    worker = threading.Thread(
        target=lambda: done.append(face.payments.create_refund(pi.id, 300, idempotency_key="k"))
    )
    worker.start()
    try:
        assert fault.started.wait(5), "the held request never started"
        with pytest.raises(PaymentsUnsettledError) as err:
            face.payments.create_refund(pi.id, 300, idempotency_key="k")
        assert err.value.http_status == 409
        assert err.value.operation == "create refund"
    finally:
        release_hold.set()
        worker.join(10)
    assert not worker.is_alive()
    assert [r.id for r in face.payments.list_refunds(pi.id)] == [done[0].id]


def test_error_500_after_commit(face: Face) -> None:
    """error_500 after commit is unsettled; the refund exists; a same-key retry is unsettled too."""
    pi = face.payments.create_payment(3000)
    face.model.add_fault("error_500", commit=True)
    for _ in range(2):
        with pytest.raises(PaymentsUnsettledError) as err:
            face.payments.create_refund(pi.id, 400, idempotency_key="k5")
        assert err.value.http_status == 500
    assert [r.amount for r in face.payments.list_refunds(pi.id)] == [400]


def test_error_500_before_commit(face: Face) -> None:
    """error_500 before commit is unsettled, leaves no refund, and a same-key retry succeeds."""
    pi = face.payments.create_payment(3000)
    face.model.add_fault("error_500", commit=False)
    with pytest.raises(PaymentsUnsettledError) as err:
        face.payments.create_refund(pi.id, 400, idempotency_key="k5")
    assert err.value.http_status == 500
    assert face.payments.list_refunds(pi.id) == []
    assert face.payments.create_refund(pi.id, 400, idempotency_key="k5").amount == 400


def test_drop_after_commit(face: Face) -> None:
    """A dropped answer, dropped again on the one resend, is unsettled (no status), yet the
    refund exists and a retry replays it."""
    pi = face.payments.create_payment(3000)
    fault = face.model.add_fault("drop", count=2)
    with pytest.raises(PaymentsUnsettledError) as err:
        face.payments.create_refund(pi.id, 900, idempotency_key="kd")
    assert err.value.http_status is None
    assert fault.committed.is_set()
    [refund] = face.payments.list_refunds(pi.id)
    assert refund.amount == 900
    assert face.payments.create_refund(pi.id, 900, idempotency_key="kd").id == refund.id


@pytest.mark.parametrize("key", ["kd1", None])
def test_an_answer_dropped_once_is_recovered_by_the_resend(face: Face, key: str | None) -> None:
    """Dropped once: the create goes once more under the same key (the SDK's own when none
    was given) and the replay is the answer; one refund, the fault spent."""
    pi = face.payments.create_payment(3000)
    fault = face.model.add_fault("drop")
    refund = face.payments.create_refund(pi.id, 900, idempotency_key=key)
    assert fault.fired == 1 and fault.committed.is_set()
    assert [r.id for r in face.payments.list_refunds(pi.id)] == [refund.id]


def test_key_pruned_after_24_hours(face: Face) -> None:
    """After 24 h on the model's clock the same key creates a new refund."""
    pi = face.payments.create_payment(3000)
    first = face.payments.create_refund(pi.id, 100, idempotency_key="kday")
    face.model.advance(DAY_S)
    later = face.payments.create_refund(pi.id, 100, idempotency_key="kday")
    assert later.id != first.id
    assert len(face.payments.list_refunds(pi.id)) == 2


def test_validation_error_does_not_use_up_the_key(face: Face) -> None:
    """A refund refused in validation (no payment_intent) leaves its key free for a real one."""
    pi = face.payments.create_payment(3000)
    with pytest.raises(PaymentsRejectedError) as err:
        face.payments.create_refund("", 100, idempotency_key="kv")
    assert err.value.code == "parameter_missing"
    assert face.payments.create_refund(pi.id, 100, idempotency_key="kv").amount == 100


def test_list_refunds_walks_every_page(face: Face) -> None:
    """205 one-cent refunds on one payment all come back, distinct and newest first."""
    pi = face.payments.create_payment(1000)
    made = [
        face.model.post("refunds", {"payment_intent": pi.id, "amount": "1"}) for _ in range(205)
    ]
    assert {r.status for r in made} == {200}
    listed = face.payments.list_refunds(pi.id)
    assert [r.id for r in listed] == [r.body["id"] for r in made][::-1]
    assert len({r.id for r in listed}) == 205
    assert face.payments.get_payment(pi.id).amount_refunded == 205


def test_fingerprint_over_a_face(face: Face) -> None:
    """The fingerprint of read-back refunds ignores settling and failures, but sees new refunds."""
    pi = face.payments.create_payment(3000)
    a = face.payments.create_refund(pi.id, 100)
    face.model.set_refund_status(a.id, "pending")
    pending = refunds_fingerprint(face.payments.list_refunds(pi.id))
    face.model.set_refund_status(a.id, "succeeded")
    assert refunds_fingerprint(face.payments.list_refunds(pi.id)) == pending
    b = face.payments.create_refund(pi.id, 200)
    with_b = refunds_fingerprint(face.payments.list_refunds(pi.id))
    assert with_b != pending
    face.model.set_refund_status(b.id, "failed")
    assert refunds_fingerprint(face.payments.list_refunds(pi.id)) == pending


def _scenario(face: Face) -> list[Any]:
    """One script of calls; outcomes with ids replaced by their order of first appearance."""
    names: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        return names.setdefault(match[0], f"{match[1]}#{len(names)}")

    def norm(value: Any) -> Any:
        if isinstance(value, str):
            return re.sub(r"\b(pi|re|ch)_[A-Za-z0-9]{24}\b", name, value)
        if isinstance(value, (list, tuple)):
            return [norm(v) for v in value]
        if isinstance(value, Mapping):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, (Payment, Refund)):
            fields = dict(vars(value))
            fields.pop("created", None)
            return {type(value).__name__: norm(fields)}
        return value

    def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return norm(fn(*args, **kwargs))
        except (PaymentsRejectedError, PaymentsUnsettledError) as e:
            # A dropped connection is worded by each transport; answers with a status are not.
            text = str(e) if e.http_status is not None else None
            return norm([type(e).__name__, getattr(e, "code", None), e.http_status, text])

    p = face.payments
    pi = p.create_payment(5000, metadata={"case": "same"})
    out = [norm(pi)]
    out.append(run(p.create_refund, pi.id, 1000, idempotency_key="a", metadata={"n": "1"}))
    out.append(run(p.create_refund, pi.id, 1000, idempotency_key="a", metadata={"n": "1"}))
    out.append(run(p.create_refund, pi.id, 999, idempotency_key="a"))
    out.append(run(p.create_refund, pi.id, 9999))
    face.model.add_fault("error_500", commit=False)
    out.append(run(p.create_refund, pi.id, 100, idempotency_key="b"))
    out.append(run(p.create_refund, pi.id, 100, idempotency_key="b"))
    face.model.add_fault("error_500", commit=True)
    out.append(run(p.create_refund, pi.id, 200, idempotency_key="c"))
    out.append(run(p.create_refund, pi.id, 200, idempotency_key="c"))
    face.model.add_fault("drop", count=2)  # the send and its one resend
    out.append(run(p.create_refund, pi.id, 300, idempotency_key="d"))
    out.append(run(p.create_refund, pi.id, 300, idempotency_key="d"))
    out.append(run(p.create_refund, pi.id))
    out.append(run(p.create_refund, pi.id, 1))
    out.append(run(p.get_payment, pi.id))
    out.append(run(p.get_payment, "pi_missing"))
    return out


def test_both_faces_give_the_same_results(_server: StripeEmulator) -> None:
    """One script of payments, refunds, replays and faults gives identical results on both faces."""
    before = _handler_threads()
    stripe_face = _stripe_face(_server)
    over_http = _scenario(stripe_face)
    in_process = _scenario(_inprocess_face())
    assert isinstance(stripe_face.payments, StripePayments)
    stripe_face.payments.close()
    for t in _handler_threads() - before:
        t.join(10)
    assert over_http == in_process
    # The script did reach the interesting answers, on both faces alike.
    kinds = [o[0] for o in over_http if isinstance(o, list)]
    assert kinds.count("PaymentsUnsettledError") == 4
    assert kinds.count("PaymentsRejectedError") == 4


def test_inprocess_hold_has_no_deadline() -> None:
    """In-process there is no transport deadline: a hold delays the answer, which then succeeds."""
    payments = InProcessPayments()
    pi = payments.create_payment(1000)
    payments.model.add_fault("hold", hold_ms=200)
    started = time.monotonic()
    refund = payments.create_refund(pi.id, 10)
    assert time.monotonic() - started >= 0.2
    assert refund.amount == 10


# -- error sorting: StripePayments and InProcessPayments agree ---------------------------


class _Canned(stripe.HTTPClient):
    """A transport that answers every request with one fixed status and JSON body."""

    name = "canned"

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__()
        self.status, self.body = status, body

    def request(self, method: str, url: str, headers: Any, post_data: Any = None, **_: Any) -> Any:
        return json.dumps(self.body).encode(), self.status, {"request-id": "req_canned"}

    def request_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to close."""


class _CannedModel:
    """Stands in for `PaymentsModel`: every payment read gets one fixed reply."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply

    def get_payment_intent(self, intent_id: str) -> Reply:
        return self.reply


def _err(type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type_, "message": f"canned {type_} {code}"}
    if code is not None:
        error["code"] = code
    if param is not None:
        error["param"] = param
    return error


@pytest.mark.parametrize(
    ("status", "error", "kind", "code", "param"),
    [
        (
            400,
            _err("invalid_request_error", "parameter_missing", "amount"),
            "rejected",
            "parameter_missing",
            "amount",
        ),
        (
            400,
            _err("invalid_request_error", None, "amount"),
            "rejected",
            "invalid_request_error",
            "amount",
        ),
        (400, _err("idempotency_error"), "rejected", "idempotency_error", None),
        (400, _err("invalid_request_error", "rate_limit"), "rejected", "rate_limit", None),
        (401, _err("invalid_request_error"), "auth", None, None),
        (402, _err("card_error", "card_declined"), "rejected", "card_declined", None),
        (403, _err("invalid_request_error", "secret_key_required"), "auth", None, None),
        (
            404,
            _err("invalid_request_error", "resource_missing", "intent"),
            "rejected",
            "resource_missing",
            "intent",
        ),
        (409, _err("invalid_request_error", "idempotency_key_in_use"), "unsettled", None, None),
        (429, _err("invalid_request_error", "rate_limit"), "unsettled", None, None),
        (500, _err("api_error"), "unsettled", None, None),
        (502, _err("api_error"), "unsettled", None, None),
        (503, _err("api_error"), "unsettled", None, None),
    ],
)
def test_error_sorting_agrees(
    status: int, error: dict[str, Any], kind: str, code: str | None, param: str | None
) -> None:
    """409, 429 and 5xx are unsettled; 401/403 a refused key; other 4xx are rejections with a
    code, on both faces alike."""
    sdk = stripe.StripeClient(
        TEST_KEY, http_client=_Canned(status, {"error": error}), max_network_retries=0
    )
    errors = []
    for payments in (
        StripePayments(sdk),
        InProcessPayments(_CannedModel(Reply(status, {"error": error}))),  # type: ignore[arg-type]
    ):
        with pytest.raises(PaymentsError) as err:
            payments.get_payment("pi_x")
        errors.append(err.value)
    via_sdk, in_process = errors
    expected = {
        "rejected": PaymentsRejectedError,
        "unsettled": PaymentsUnsettledError,
        "auth": PaymentsAuthError,
    }[kind]
    assert type(via_sdk) is type(in_process) is expected
    assert isinstance(via_sdk, (PaymentsRejectedError, PaymentsUnsettledError, PaymentsAuthError))
    assert isinstance(in_process, type(via_sdk))
    assert via_sdk.http_status == in_process.http_status == status
    assert str(via_sdk) == str(in_process)
    if isinstance(via_sdk, PaymentsRejectedError):
        assert isinstance(in_process, PaymentsRejectedError)
        assert via_sdk.code == in_process.code == code
        assert via_sdk.param == in_process.param == param
        assert via_sdk.provider_message == error["message"]


# -- refunds_fingerprint ---------------------------------------------------------------


def _r(rid: str, amount: int = 100, status: str = "succeeded", **kw: Any) -> Refund:
    return Refund(id=rid, amount=amount, status=status, payment_intent="pi_1", **kw)


def test_fingerprint_ignores_failed_and_canceled() -> None:
    """Failed and canceled refunds do not change the fingerprint."""
    base = refunds_fingerprint([_r("re_a")])
    assert refunds_fingerprint([_r("re_a"), _r("re_b", status="failed")]) == base
    assert refunds_fingerprint([_r("re_a"), _r("re_c", status="canceled")]) == base
    assert refunds_fingerprint([_r("re_b", status="failed")]) == refunds_fingerprint([])


@pytest.mark.parametrize("before", ["pending", "requires_action"])
def test_fingerprint_unchanged_when_refund_settles(before: str) -> None:
    """A refund moving from pending (or requires_action) to succeeded is not a change."""
    assert refunds_fingerprint([_r("re_a", status=before)]) == refunds_fingerprint([_r("re_a")])


def test_fingerprint_changes_with_a_counting_refund() -> None:
    """Adding a counting refund, or a different amount, changes the fingerprint."""
    base = refunds_fingerprint([_r("re_a")])
    assert refunds_fingerprint([_r("re_a"), _r("re_b")]) != base
    assert refunds_fingerprint([_r("re_a"), _r("re_b", status="pending")]) != base
    assert refunds_fingerprint([_r("re_a", amount=101)]) != base
    assert refunds_fingerprint([_r("re_z")]) != base
    assert refunds_fingerprint([]) != base


def test_fingerprint_is_order_independent() -> None:
    """The same refunds in any order have the same fingerprint."""
    refunds = [_r("re_a", 100), _r("re_b", 200), _r("re_c", 300), _r("re_d", 5, "failed")]
    assert refunds_fingerprint(refunds) == refunds_fingerprint(refunds[::-1])
    assert refunds_fingerprint(refunds) == refunds_fingerprint(iter([refunds[2], *refunds[:2]]))


def test_fingerprint_ignores_metadata_and_created() -> None:
    """Only id and amount of counting refunds matter, not metadata or created."""
    a = _r("re_a", metadata={"by": "agent"}, created=10)
    b = _r("re_a", metadata={}, created=99)
    assert refunds_fingerprint([a]) == refunds_fingerprint([b])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", refunds_fingerprint([a]))


# -- ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["pi", "re", "ch"])
def test_new_id_is_prefixed_and_random(prefix: str) -> None:
    """new_id gives Stripe-style ids: prefix, underscore, 24 letters/digits, never repeated."""
    ids = [new_id(prefix) for _ in range(2000)]
    assert all(re.fullmatch(rf"{prefix}_[A-Za-z0-9]{{24}}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_model_ids_do_not_collide_across_models() -> None:
    """Two fresh models hand out different ids, so stores and runs never collide."""
    first, second = InProcessPayments(), InProcessPayments()
    a, b = first.create_payment(1000), second.create_payment(1000)
    assert a.id != b.id
    assert a.latest_charge != b.latest_charge
    ra, rb = first.create_refund(a.id), second.create_refund(b.id)
    assert ra.id != rb.id
    assert ra.id.startswith("re_") and rb.id.startswith("re_")

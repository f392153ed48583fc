"""The loopback Stripe emulator, driven by the real `stripe` SDK and by raw HTTP.

Every SDK call goes through `interlock.make_stripe_client` (SDK retries off, the
`DeadlineHTTPClient` transport) pointed at a `StripeEmulator` on 127.0.0.1. Idempotency
keys travel in the request options (the `Idempotency-Key` header), never in params.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any
from urllib.parse import urlencode

import pytest
import stripe

from interlock import (
    PaymentsRejectedError,
    PaymentsUnsettledError,
    StripePayments,
    make_stripe_client,
)
from interlock._stripe.adapter import DeadlineHTTPClient
from interlock.testing import InProcessPayments, StripeEmulator
from interlock.testing.emulator import CONTROL_PREFIX, TOKEN_HEADER, decode_form
from tests.conftest import TEST_KEY, emulator_handler_threads, join_emulator_handlers

LIVE_KEY = "sk_live_" + "Qz7Vw3Nc9Lp2Hx8Rt4Ym6Kb1"
DAY_S = 24 * 3600

# -- helpers ---------------------------------------------------------------------------


def _client(emu: StripeEmulator, timeout_s: float = 5.0, key: str = TEST_KEY) -> Any:
    return make_stripe_client(key, timeout_s=timeout_s, base_url=emu.url)


def _headers(obj: Any) -> dict[str, str]:
    """Response headers of an SDK object or error, with lower-case names."""
    raw = obj.last_response.headers if hasattr(obj, "last_response") else obj.headers
    return {k.lower(): v for k, v in dict(raw or {}).items()}


def _paid(client: Any, amount: int = 5000, **extra: Any) -> Any:
    """A confirmed card payment created through the SDK."""
    params: dict[str, Any] = {
        "amount": amount,
        "currency": "usd",
        "confirm": True,
        "payment_method": "pm_card_visa",
        "allowed_payment_method_types": ["card"],
    }
    params.update(extra)
    return client.v1.payment_intents.create(params=params)


def _refund(client: Any, pi: str, amount: int | None = None, key: str | None = None) -> Any:
    params: dict[str, Any] = {"payment_intent": pi}
    if amount is not None:
        params["amount"] = amount
    options = {"idempotency_key": key} if key is not None else {}
    return client.v1.refunds.create(params=params, options=options)


def _all_refunds(client: Any, pi: str) -> list[Any]:
    return list(
        client.v1.refunds.list(params={"payment_intent": pi, "limit": 100}).auto_paging_iter()
    )


def _http(
    emu: StripeEmulator,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """One raw HTTP request to the emulator: (status, decoded JSON body, lower-case headers).

    Control routes get the headers their caller would send (the token, a JSON body) unless
    `headers` is given.
    """
    if headers is None and path.startswith(CONTROL_PREFIX):
        headers = _control_headers(emu)
    if body is None or isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = json.dumps(body).encode()
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    try:
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
        answer = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, (json.loads(raw) if raw else None), answer
    finally:
        conn.close()


def _control_headers(emu: StripeEmulator, **extra: str) -> dict[str, str]:
    """What a rightful caller sends to a control route: the token and a JSON body."""
    return {TOKEN_HEADER: emu.control_token, "Content-Type": "application/json", **extra}


def _auth(key: str = TEST_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _form(key: str = TEST_KEY, **extra: str) -> dict[str, str]:
    return {**_auth(key), "Content-Type": "application/x-www-form-urlencoded", **extra}


# -- payment intents -------------------------------------------------------------------


def test_confirmed_card_payment_succeeds_with_a_charge(emu: StripeEmulator) -> None:
    """A confirmed pm_card_visa PaymentIntent succeeds at once and carries its charge."""
    pi = _paid(_client(emu), 4200, metadata={"case": "c-1", "agent": "standard"})
    assert pi.id.startswith("pi_")
    assert pi.status == "succeeded"
    assert pi.latest_charge is not None and pi.latest_charge.startswith("ch_")
    assert (pi.amount, pi.amount_received, pi.currency) == (4200, 4200, "usd")
    assert pi.payment_method_types == ["card"]
    assert pi.metadata.to_dict() == {"case": "c-1", "agent": "standard"}
    assert pi.livemode is False


def test_automatic_payment_methods_are_accepted(emu: StripeEmulator) -> None:
    """automatic_payment_methods in place of payment_method_types still yields a card charge."""
    pi = _client(emu).v1.payment_intents.create(
        params={
            "amount": 2000,
            "currency": "usd",
            "confirm": True,
            "payment_method": "pm_card_visa",
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
        }
    )
    assert pi.status == "succeeded"
    assert pi.latest_charge.startswith("ch_")


def test_unconfirmed_payment_is_not_refundable(emu: StripeEmulator) -> None:
    """Without confirm a PaymentIntent waits for confirmation and has no charge to refund."""
    client = _client(emu)
    pi = client.v1.payment_intents.create(
        params={"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}
    )
    assert pi.status == "requires_confirmation"
    assert pi.latest_charge is None
    with pytest.raises(stripe.InvalidRequestError) as err:
        _refund(client, pi.id)
    assert err.value.code == "charge_not_refundable"


@pytest.mark.parametrize(
    ("params", "code", "param"),
    [
        ({"amount": 20, "currency": "usd"}, "amount_too_small", "amount"),
        ({"currency": "usd"}, "parameter_missing", "amount"),
        ({"amount": 2000}, "parameter_missing", "currency"),
        ({"amount": 2000, "currency": "usd", "confirm": True}, None, "payment_method"),
        (
            {"amount": 2000, "currency": "usd", "payment_method": "pm_nonexistent"},
            "resource_missing",
            "payment_method",
        ),
    ],
)
def test_bad_payment_intents_are_refused(
    emu: StripeEmulator, params: dict[str, Any], code: str | None, param: str
) -> None:
    """Missing or bad PaymentIntent params give a 4xx InvalidRequestError naming the param."""
    with pytest.raises(stripe.InvalidRequestError) as err:
        _client(emu).v1.payment_intents.create(params=params)
    assert err.value.param == param
    assert err.value.http_status in (400, 404)
    if code is not None:
        assert err.value.code == code


def test_retrieve_returns_the_created_intent(emu: StripeEmulator) -> None:
    """GET /v1/payment_intents/{id} returns what the create returned."""
    client = _client(emu)
    created = _paid(client, metadata={"k": "v"})
    read = client.v1.payment_intents.retrieve(created.id)
    assert read.to_dict() == created.to_dict()


def test_retrieve_unknown_intent_is_resource_missing(emu: StripeEmulator) -> None:
    """An unknown PaymentIntent id is a 404 InvalidRequestError with code resource_missing."""
    with pytest.raises(stripe.InvalidRequestError) as err:
        _client(emu).v1.payment_intents.retrieve("pi_doesNotExist")
    assert err.value.http_status == 404
    assert err.value.code == "resource_missing"
    assert err.value.param == "intent"
    assert "pi_doesNotExist" in err.value.user_message
    assert err.value.request_id.startswith("req_")


# -- refunds ---------------------------------------------------------------------------


def test_refund_defaults_to_the_whole_payment(emu: StripeEmulator) -> None:
    """A refund without amount refunds the whole payment and succeeds at once."""
    client = _client(emu)
    pi = _paid(client, 3000)
    refund = _refund(client, pi.id)
    assert refund.id.startswith("re_")
    assert refund.status == "succeeded"
    assert refund.amount == 3000
    assert refund.payment_intent == pi.id
    assert refund.charge == pi.latest_charge
    assert refund.currency == "usd"


def test_refund_amount_defaults_to_what_is_left(emu: StripeEmulator) -> None:
    """After a partial refund, a refund without amount refunds exactly the remainder."""
    client = _client(emu)
    pi = _paid(client, 5000)
    assert _refund(client, pi.id, 1500).amount == 1500
    assert _refund(client, pi.id).amount == 3500


def test_refund_above_what_is_left_uses_stripes_wording(emu: StripeEmulator) -> None:
    """Refunding more than is left is a 400 on param amount, worded as Stripe words it."""
    client = _client(emu)
    pi = _paid(client, 5000)
    _refund(client, pi.id, 1500)
    with pytest.raises(stripe.InvalidRequestError) as err:
        _refund(client, pi.id, 4000)
    assert err.value.http_status == 400
    assert err.value.param == "amount"
    assert err.value.user_message == (
        "Refund amount ($40.00) is greater than unrefunded amount on charge ($35.00)"
    )
    assert len(_all_refunds(client, pi.id)) == 1


def test_fully_refunded_payment_is_charge_already_refunded(emu: StripeEmulator) -> None:
    """Once a payment is fully refunded, another refund is refused with charge_already_refunded."""
    client = _client(emu)
    pi = _paid(client, 2000)
    _refund(client, pi.id)
    with pytest.raises(stripe.InvalidRequestError) as err:
        _refund(client, pi.id, 1)
    assert err.value.http_status == 400
    assert err.value.code == "charge_already_refunded"
    assert pi.latest_charge in err.value.user_message


def test_refund_of_unknown_payment_is_resource_missing(emu: StripeEmulator) -> None:
    """A refund for an unknown PaymentIntent is a 404 resource_missing on payment_intent."""
    with pytest.raises(stripe.InvalidRequestError) as err:
        _refund(_client(emu), "pi_nope")
    assert (err.value.http_status, err.value.code) == (404, "resource_missing")
    assert err.value.param == "payment_intent"


@pytest.mark.parametrize("amount", [0, -5, "abc"])
def test_refund_amount_must_be_a_positive_integer(emu: StripeEmulator, amount: Any) -> None:
    """A zero, negative or non-numeric refund amount is a 400 on param amount."""
    client = _client(emu)
    pi = _paid(client)
    with pytest.raises(stripe.InvalidRequestError) as err:
        _refund(client, pi.id, amount)
    assert (err.value.http_status, err.value.param) == (400, "amount")
    assert _all_refunds(client, pi.id) == []


def test_failed_refund_frees_its_amount(emu: StripeEmulator) -> None:
    """A refund moved to failed no longer counts, so its amount can be refunded again."""
    client = _client(emu)
    pi = _paid(client, 2000)
    first = _refund(client, pi.id)
    emu.model.set_refund_status(first.id, "failed")
    again = _refund(client, pi.id)
    assert again.amount == 2000
    assert again.id != first.id


@pytest.mark.parametrize(
    ("reason", "ok"), [("requested_by_customer", True), ("duplicate", True), ("bored", False)]
)
def test_refund_reason_is_checked(emu: StripeEmulator, reason: str, ok: bool) -> None:
    """Stripe's refund reasons are accepted and kept; any other is a 400 on param reason."""
    client = _client(emu)
    pi = _paid(client)
    params = {"payment_intent": pi.id, "amount": 100, "reason": reason}
    if ok:
        assert client.v1.refunds.create(params=params).reason == reason
    else:
        with pytest.raises(stripe.InvalidRequestError) as err:
            client.v1.refunds.create(params=params)
        assert (err.value.http_status, err.value.param) == (400, "reason")


# -- listing refunds -------------------------------------------------------------------


def test_list_is_newest_first_and_filtered_by_payment(emu: StripeEmulator) -> None:
    """GET /v1/refunds?payment_intent= lists only that payment's refunds, newest first."""
    client = _client(emu)
    pi, other = _paid(client), _paid(client)
    made = [_refund(client, pi.id, n).id for n in (100, 200, 300)]
    _refund(client, other.id, 50)
    page = client.v1.refunds.list(params={"payment_intent": pi.id})
    assert [r.id for r in page.data] == made[::-1]
    assert page.has_more is False


def test_list_newest_first_across_clock_seconds(emu: StripeEmulator) -> None:
    """Refunds created later by the model's clock list before earlier ones."""
    client = _client(emu)
    pi = _paid(client)
    first = _refund(client, pi.id, 100)
    emu.model.advance(5)
    second = _refund(client, pi.id, 100)
    assert second.created > first.created
    assert [r.id for r in _all_refunds(client, pi.id)] == [second.id, first.id]


@pytest.mark.parametrize("limit", [0, 101, -1])
def test_list_limit_out_of_range_is_refused(emu: StripeEmulator, limit: int) -> None:
    """limit outside 1..100 is a 400 on param limit."""
    client = _client(emu)
    pi = _paid(client)
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.refunds.list(params={"payment_intent": pi.id, "limit": limit})
    assert (err.value.http_status, err.value.param) == (400, "limit")


@pytest.mark.parametrize("limit", [1, 100])
def test_list_limit_bounds_are_accepted(emu: StripeEmulator, limit: int) -> None:
    """limit 1 and limit 100 are both valid page sizes."""
    client = _client(emu)
    pi = _paid(client)
    _refund(client, pi.id, 10)
    _refund(client, pi.id, 10)
    page = client.v1.refunds.list(params={"payment_intent": pi.id, "limit": limit})
    assert len(page.data) == min(limit, 2)
    assert page.has_more is (limit == 1)


def test_list_pages_with_starting_after_and_ending_before(emu: StripeEmulator) -> None:
    """starting_after and ending_before walk the newest-first list with correct has_more."""
    client = _client(emu)
    pi = _paid(client)
    ids = [_refund(client, pi.id, 10).id for _ in range(5)][::-1]  # newest first
    q = {"payment_intent": pi.id, "limit": 2}
    p1 = client.v1.refunds.list(params=q)
    p2 = client.v1.refunds.list(params={**q, "starting_after": p1.data[-1].id})
    p3 = client.v1.refunds.list(params={**q, "starting_after": p2.data[-1].id})
    assert [[r.id for r in p.data] for p in (p1, p2, p3)] == [ids[0:2], ids[2:4], ids[4:5]]
    assert [p.has_more for p in (p1, p2, p3)] == [True, True, False]
    back = client.v1.refunds.list(params={**q, "ending_before": ids[4]})
    assert [r.id for r in back.data] == ids[2:4]
    assert back.has_more is True


def test_list_unknown_cursor_or_payment_is_resource_missing(emu: StripeEmulator) -> None:
    """An unknown starting_after or payment_intent in a list is a 404 resource_missing."""
    client = _client(emu)
    pi = _paid(client)
    for params in (
        {"payment_intent": pi.id, "starting_after": "re_unknown"},
        {"payment_intent": "pi_unknown"},
    ):
        with pytest.raises(stripe.InvalidRequestError) as err:
            client.v1.refunds.list(params=params)
        assert (err.value.http_status, err.value.code) == (404, "resource_missing")


def test_auto_paging_walks_past_one_hundred_refunds(emu: StripeEmulator) -> None:
    """205 one-cent refunds on one payment all come back, distinct and newest first, in 3 pages."""
    client = _client(emu)
    pi = _paid(client, 1000)
    made = [_refund(client, pi.id, 1).id for _ in range(205)]
    gets_before = emu.model.requests.count(("GET", "refunds"))
    listed = [r.id for r in _all_refunds(client, pi.id)]
    assert listed == made[::-1]
    assert len(set(listed)) == 205
    assert emu.model.requests.count(("GET", "refunds")) - gets_before == 3

    via_stripe = StripePayments(client).list_refunds(pi.id)
    via_model = InProcessPayments(emu.model).list_refunds(pi.id)
    assert [r.id for r in via_stripe] == made[::-1]
    assert [r.id for r in via_model] == made[::-1]
    assert StripePayments(client).get_payment(pi.id).amount_refunded == 205


# -- idempotency -----------------------------------------------------------------------


def test_same_key_same_params_replays_the_refund(emu: StripeEmulator) -> None:
    """A retry with the same key and params replays the saved answer; no second refund."""
    client = _client(emu)
    pi = _paid(client)
    first = _refund(client, pi.id, 700, key="case-1:refund")
    again = _refund(client, pi.id, 700, key="case-1:refund")
    assert "idempotent-replayed" not in _headers(first)
    assert _headers(again)["idempotent-replayed"] == "true"
    assert _headers(again)["idempotency-key"] == "case-1:refund"
    assert again.last_response.code == first.last_response.code == 200
    assert again.to_dict() == first.to_dict()
    assert [r.id for r in _all_refunds(client, pi.id)] == [first.id]


def test_sdk_generated_keys_do_not_dedupe(emu: StripeEmulator) -> None:
    """Without a caller key the SDK sends a fresh key each time, so two calls make two refunds."""
    client = _client(emu)
    pi = _paid(client)
    a, b = _refund(client, pi.id, 100), _refund(client, pi.id, 100)
    assert a.id != b.id
    assert _headers(a)["idempotency-key"] != _headers(b)["idempotency-key"]


def test_same_key_other_params_is_an_idempotency_error(emu: StripeEmulator) -> None:
    """Reusing a key with other params is a 400 IdempotencyError and creates nothing."""
    client = _client(emu)
    pi = _paid(client)
    first = _refund(client, pi.id, 700, key="k-other")
    with pytest.raises(stripe.IdempotencyError) as err:
        _refund(client, pi.id, 800, key="k-other")
    assert err.value.http_status == 400
    assert err.value.error.type == "idempotency_error"
    assert [r.id for r in _all_refunds(client, pi.id)] == [first.id]


def test_same_key_while_first_is_running_is_409(
    emu: StripeEmulator, release_hold: threading.Event
) -> None:
    """While the first request with a key is still running, a second one gets a 409."""
    client = _client(emu, timeout_s=10)
    pi = _paid(client)
    fault = emu.model.add_fault("hold", hold_ms=8000, commit=False)
    results: list[Any] = []
    first = threading.Thread(
        target=lambda: results.append(_refund(client, pi.id, 300, key="k-busy"))
    )
    first.start()
    try:
        assert fault.started.wait(5), "the held request never started"
        with pytest.raises(stripe.APIError) as err:
            _refund(client, pi.id, 300, key="k-busy")
        assert err.value.http_status == 409
        assert err.value.error.code == "idempotency_key_in_use"
    finally:
        release_hold.set()
        first.join(10)
    assert not first.is_alive()
    assert len(results) == 1
    assert [r.id for r in _all_refunds(client, pi.id)] == [results[0].id]
    replay = _refund(client, pi.id, 300, key="k-busy")
    assert replay.id == results[0].id
    assert _headers(replay)["idempotent-replayed"] == "true"


def test_saved_4xx_is_replayed(emu: StripeEmulator) -> None:
    """A refused refund is saved under its key: the same request replays the 400 even later."""
    client = _client(emu)
    pi = _paid(client, 1000)
    held = _refund(client, pi.id, 600)
    with pytest.raises(stripe.InvalidRequestError) as first:
        _refund(client, pi.id, 800, key="k-4xx")
    assert "idempotent-replayed" not in _headers(first.value)
    emu.model.set_refund_status(held.id, "failed")  # 800 would fit now
    with pytest.raises(stripe.InvalidRequestError) as again:
        _refund(client, pi.id, 800, key="k-4xx")
    assert _headers(again.value)["idempotent-replayed"] == "true"
    assert again.value.user_message == first.value.user_message
    assert again.value.http_status == 400
    assert _refund(client, pi.id, 800, key="k-fresh").amount == 800


@pytest.mark.parametrize("how", ["model", "control-route"])
def test_keys_are_pruned_after_24_hours(emu: StripeEmulator, how: str) -> None:
    """A key replays just before 24 h; after 24 h on the emulator clock it makes a new refund."""
    client = _client(emu)
    pi = _paid(client)
    first = _refund(client, pi.id, 100, key="k-day")

    def advance(seconds: float) -> None:
        if how == "model":
            emu.model.advance(seconds)
        else:
            status, body, _ = _http(emu, "POST", "/_emulator/clock/advance", {"seconds": seconds})
            assert status == 200
            assert body["now"] == pytest.approx(emu.model.now(), abs=5)

    advance(DAY_S - 60)
    assert _refund(client, pi.id, 100, key="k-day").id == first.id
    advance(60)
    later = _refund(client, pi.id, 100, key="k-day")
    assert later.id != first.id
    assert "idempotent-replayed" not in _headers(later)
    assert {r.id for r in _all_refunds(client, pi.id)} == {first.id, later.id}


def test_validation_error_is_not_saved(emu: StripeEmulator) -> None:
    """A request refused in validation (no payment_intent) does not use up its key."""
    client = _client(emu)
    pi = _paid(client)
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.refunds.create(params={"amount": 100}, options={"idempotency_key": "k-val"})
    assert err.value.code == "parameter_missing"
    refund = _refund(client, pi.id, 100, key="k-val")
    assert refund.amount == 100
    assert "idempotent-replayed" not in _headers(refund)


# -- wire format -----------------------------------------------------------------------


def test_error_envelope_has_stripes_shape(emu: StripeEmulator) -> None:
    """An error answer is JSON {"error": {type, code, param, message}} with a Request-Id."""
    status, body, headers = _http(
        emu, "POST", "/v1/refunds", "payment_intent=pi_missing&amount=5", _form()
    )
    assert status == 404
    assert headers["content-type"] == "application/json"
    assert headers["request-id"].startswith("req_")
    assert body == {
        "error": {
            "type": "invalid_request_error",
            "code": "resource_missing",
            "param": "payment_intent",
            "message": "No such payment_intent: 'pi_missing'",
        }
    }


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/v1/refunds", _auth(), 200),
        ("GET", "/v1/payment_intents/pi_none", _auth(), 404),
        ("GET", "/v1/refunds?limit=0", _auth(), 400),
        ("GET", "/v1/customers", _auth(), 404),
        ("POST", "/v1/customers", _form(), 404),
        ("GET", "/v1/refunds", {}, 401),
        ("GET", "/v1/refunds", _auth(LIVE_KEY), 401),
        ("GET", "/_emulator/faults/flt_none", None, 404),
        ("DELETE", "/_emulator/faults", None, 200),
        ("DELETE", "/_emulator/faults", {}, 403),
    ],
)
def test_every_answer_carries_a_request_id(
    emu: StripeEmulator, method: str, path: str, headers: dict[str, str] | None, status: int
) -> None:
    """Successes, errors, 401s and control answers all carry a fresh Request-Id."""
    got, _, answer = _http(emu, method, path, "" if method == "POST" else None, headers)
    assert got == status
    again = _http(emu, method, path, "" if method == "POST" else None, headers)[2]
    assert answer["request-id"].startswith("req_")
    assert answer["request-id"] != again["request-id"]


@pytest.mark.parametrize(
    ("body", "decoded"),
    [
        ("a[0]=x&a[1]=y", {"a": ["x", "y"]}),
        ("a[]=x&a[]=y", {"a": ["x", "y"]}),
        ("a[1]=y&a[0]=x", {"a": ["x", "y"]}),
        (
            "&".join(f"a[{i}]=v{i}" for i in range(12)),
            {"a": [f"v{i}" for i in range(12)]},
        ),
        ("metadata[case]=c1&metadata[agent]=std", {"metadata": {"case": "c1", "agent": "std"}}),
        ("x[y][z]=1&x[y][w]=2", {"x": {"y": {"z": "1", "w": "2"}}}),
        ("a[0][b]=1&a[1][b]=2", {"a": [{"b": "1"}, {"b": "2"}]}),
        ("amount=500&currency=usd", {"amount": "500", "currency": "usd"}),
        ("metadata[note]=a%20b%26c%3Dd&k=", {"metadata": {"note": "a b&c=d"}, "k": ""}),
        ("", {}),
    ],
)
def test_decode_form(body: str, decoded: dict[str, Any]) -> None:
    """decode_form turns Stripe's form encoding into nested dicts and lists."""
    assert decode_form(body) == decoded


def test_sdk_list_params_round_trip(emu: StripeEmulator) -> None:
    """An allowed_payment_method_types list sent by the SDK (a[0]=) comes back as the types."""
    pi = _paid(_client(emu), allowed_payment_method_types=["card", "link", "us_bank_account"])
    assert pi.payment_method_types == ["card", "link", "us_bank_account"]


def test_bracket_array_form_over_http(emu: StripeEmulator) -> None:
    """The a[]= array form and metadata[k]= work on the wire, not only in decode_form."""
    body = (
        "amount=2500&currency=usd&confirm=true&payment_method=pm_card_visa"
        "&allowed_payment_method_types[]=card&allowed_payment_method_types[]=link"
        "&metadata[case]=c9&metadata[by]=hand"
    )
    status, pi, _ = _http(emu, "POST", "/v1/payment_intents", body, _form())
    assert status == 200
    assert pi["payment_method_types"] == ["card", "link"]
    assert pi["metadata"] == {"case": "c9", "by": "hand"}


def test_refund_metadata_round_trips(emu: StripeEmulator) -> None:
    """Nested metadata on a refund is stored and listed as a flat string map."""
    client = _client(emu)
    pi = _paid(client)
    refund = client.v1.refunds.create(
        params={"payment_intent": pi.id, "amount": 100, "metadata": {"by": "agent", "n": 3}}
    )
    assert refund.metadata.to_dict() == {"by": "agent", "n": "3"}
    assert _all_refunds(client, pi.id)[0].metadata.to_dict() == {"by": "agent", "n": "3"}


# -- auth and binding ------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer"}, {"Authorization": f"Basic {TEST_KEY}"}]
)
def test_missing_bearer_key_is_401(emu: StripeEmulator, headers: dict[str, str]) -> None:
    """Without a Bearer key the API answers 401 in Stripe's envelope."""
    status, body, answer = _http(emu, "GET", "/v1/refunds", None, headers)
    assert status == 401
    assert body["error"]["type"] == "invalid_request_error"
    assert "API key" in body["error"]["message"]
    assert answer["request-id"].startswith("req_")


@pytest.mark.parametrize(
    "key", [LIVE_KEY, "rk_live_" + "Jd8Fs2Kq5Wn7", "pk_test_" + "Mb4Xc6Vz1Lq9", "nonsense-key-here"]
)
def test_non_test_key_is_401_and_never_echoed(emu: StripeEmulator, key: str) -> None:
    """A live, publishable or malformed key gets 401 AuthenticationError; the key is not echoed."""
    with pytest.raises(stripe.AuthenticationError) as err:
        _paid(_client(emu, key=key))
    assert err.value.http_status == 401
    secret = key.split("_")[-1]
    raw_headers = json.dumps(dict(err.value.headers or {}))
    for text in (err.value.http_body or "", raw_headers, str(err.value), repr(err.value)):
        assert secret not in text
        assert key not in text
    assert emu.model.requests == []


def test_sdk_authentication_error_for_missing_key(emu: StripeEmulator) -> None:
    """The SDK maps the emulator's missing-key 401 to stripe.AuthenticationError."""
    client = stripe.StripeClient(
        "sk_test_placeholder",
        base_addresses={"api": emu.url},
        http_client=_StripHeader(5.0),
        max_network_retries=0,
    )
    with pytest.raises(stripe.AuthenticationError) as err:
        client.v1.payment_intents.retrieve("pi_x")
    assert err.value.http_status == 401


class _StripHeader(DeadlineHTTPClient):
    """A transport that drops the Authorization header the SDK always sends."""

    def request(self, method: str, url: str, headers: Any, post_data: Any = None, **kw: Any) -> Any:
        headers = {k: v for k, v in dict(headers or {}).items() if k.lower() != "authorization"}
        return super().request(method, url, headers, post_data, **kw)


def test_binds_loopback_only(emu: StripeEmulator) -> None:
    """The emulator listens on 127.0.0.1 only, on a free port when asked for port 0."""
    assert emu.url == f"http://127.0.0.1:{emu.port}"
    assert emu._server.server_address[0] == "127.0.0.1"
    assert emu.port > 0
    sock = emu._server.socket
    assert sock.getsockname()[0] == "127.0.0.1"


# -- control interface -----------------------------------------------------------------


def test_hold_fault_delays_the_answer_after_commit(emu: StripeEmulator) -> None:
    """A hold fault answers normally, but only after its hold, with the refund committed first."""
    client = _client(emu, timeout_s=10)
    pi = _paid(client)
    fault = emu.model.add_fault("hold", hold_ms=300)
    started = time.monotonic()
    refund = _refund(client, pi.id, 100)
    assert time.monotonic() - started >= 0.3
    assert refund.status == "succeeded"
    assert fault.committed.is_set()
    assert fault.describe()["fired"] == 1


def test_hold_beyond_deadline_is_unsettled_yet_refunded(
    emu: StripeEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    """A hold armed over HTTP outlasts a short deadline: unsettled, yet the refund exists."""
    client = _client(emu)
    pi = _paid(client)
    status, fault, _ = _http(emu, "POST", "/_emulator/faults", {"kind": "hold", "hold_ms": 1500})
    assert status == 200
    assert fault["id"].startswith("flt_")
    assert (fault["kind"], fault["hold_ms"], fault["committed"]) == ("hold", 1500, False)

    before = emulator_handler_threads()
    short = StripePayments(make_stripe_client(TEST_KEY, timeout_s=0.3, base_url=emu.url))
    started = time.monotonic()
    with pytest.raises(PaymentsUnsettledError) as err:
        short.create_refund(pi.id, 400, idempotency_key="k-hold")
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, f"the 0.3 s deadline took {elapsed:.2f} s against a 1.5 s hold"
    assert err.value.http_status is None
    assert "timed out" in str(err.value)

    status, seen, _ = _http(emu, "GET", f"/_emulator/faults/{fault['id']}?wait=5")
    assert (status, seen["committed"], seen["fired"], seen["remaining"]) == (200, True, 1, 0)
    refunds = _all_refunds(client, pi.id)
    assert [r.amount for r in refunds] == [400]

    join_emulator_handlers(before)
    assert "Traceback" not in capfd.readouterr().err, "a timed-out client made the emulator print"
    replay = _refund(client, pi.id, 400, key="k-hold")
    assert replay.id == refunds[0].id


def test_held_request_does_not_block_others(
    emu: StripeEmulator, release_hold: threading.Event
) -> None:
    """While one refund is held, other requests (another refund, a list) are answered."""
    client = _client(emu, timeout_s=10)
    pi = _paid(client)
    fault = emu.model.add_fault("hold", hold_ms=8000)
    worker = threading.Thread(target=lambda: _refund(client, pi.id, 100, key="k-held"))
    worker.start()
    try:
        assert fault.committed.wait(5)
        other = _refund(_client(emu, timeout_s=2), pi.id, 200, key="k-other")
        amounts = sorted(r.amount for r in _all_refunds(_client(emu, timeout_s=2), pi.id))
        assert worker.is_alive(), "the held request ended before the hold was released"
    finally:
        release_hold.set()
        worker.join(10)
    assert other.amount == 200
    assert amounts == [100, 200]


def test_error_500_with_commit_is_saved_and_replayed(emu: StripeEmulator) -> None:
    """error_500 after commit: the refund exists and a retry with the same key replays the 500."""
    client = _client(emu)
    pi = _paid(client)
    status, _, _ = _http(emu, "POST", "/_emulator/faults", {"kind": "error_500", "commit": True})
    assert status == 200
    with pytest.raises(stripe.APIError) as err:
        _refund(client, pi.id, 500, key="k-500")
    assert err.value.http_status == 500
    assert err.value.error.type == "api_error"
    assert [r.amount for r in _all_refunds(client, pi.id)] == [500]
    with pytest.raises(stripe.APIError) as again:
        _refund(client, pi.id, 500, key="k-500")
    assert again.value.http_status == 500
    assert _headers(again.value)["idempotent-replayed"] == "true"
    assert len(_all_refunds(client, pi.id)) == 1


def test_error_500_without_commit_saves_nothing(emu: StripeEmulator) -> None:
    """error_500 before commit: no refund, and a retry with the same key goes through."""
    client = _client(emu)
    pi = _paid(client)
    fault = emu.model.add_fault("error_500", commit=False)
    with pytest.raises(stripe.APIError) as err:
        _refund(client, pi.id, 500, key="k-500n")
    assert err.value.http_status == 500
    assert _all_refunds(client, pi.id) == []
    assert not fault.committed.is_set()
    retry = _refund(client, pi.id, 500, key="k-500n")
    assert retry.amount == 500
    assert "idempotent-replayed" not in _headers(retry)


def test_drop_after_commit_is_unsettled_yet_refunded(emu: StripeEmulator) -> None:
    """drop closes the connection after committing, and again on the transport's one
    resend (a replay takes the drop too): unsettled, refund exists, a retry replays."""
    payments = StripePayments(_client(emu))
    pi = payments.create_payment(3000)
    status, fault, _ = _http(emu, "POST", "/_emulator/faults", {"kind": "drop", "count": 2})
    assert status == 200
    with pytest.raises(PaymentsUnsettledError) as err:
        payments.create_refund(pi.id, 1000, idempotency_key="k-drop")
    assert err.value.http_status is None
    assert emu.model.fault(fault["id"]).committed.is_set()
    assert emu.model.fault(fault["id"]).fired == 2
    [refund] = payments.list_refunds(pi.id)
    assert refund.amount == 1000
    assert payments.create_refund(pi.id, 1000, idempotency_key="k-drop").id == refund.id


def test_fault_count_and_clear(emu: StripeEmulator) -> None:
    """A fault with count=2 fires twice then stops; DELETE /_emulator/faults disarms the rest."""
    client = _client(emu)
    pi = _paid(client)
    status, fault, _ = _http(
        emu, "POST", "/_emulator/faults", {"kind": "error_500", "commit": False, "count": 2}
    )
    assert (status, fault["remaining"]) == (200, 2)
    for _ in range(2):
        with pytest.raises(stripe.APIError):
            _refund(client, pi.id, 10)
    assert _refund(client, pi.id, 10).amount == 10

    _http(emu, "POST", "/_emulator/faults", {"kind": "error_500", "commit": False, "count": 5})
    status, body, _ = _http(emu, "DELETE", "/_emulator/faults")
    assert (status, body) == (200, {"cleared": True})
    assert _refund(client, pi.id, 10).amount == 10
    assert all(f.remaining == 0 for f in emu.model.faults())
    assert len(_all_refunds(client, pi.id)) == 2


def test_fault_wait_reports_commit(emu: StripeEmulator) -> None:
    """GET /_emulator/faults/{id}?wait=S reports uncommitted before, committed after the refund."""
    client = _client(emu)
    pi = _paid(client)
    fault = emu.model.add_fault("hold", hold_ms=0)
    status, seen, _ = _http(emu, "GET", f"/_emulator/faults/{fault.id}?wait=0")
    assert (status, seen["committed"]) == (200, False)

    waited: list[Any] = []
    waiter = threading.Thread(
        target=lambda: waited.append(_http(emu, "GET", f"/_emulator/faults/{fault.id}?wait=10"))
    )
    waiter.start()
    _refund(client, pi.id, 100)
    waiter.join(15)
    assert not waiter.is_alive()
    assert waited[0][0] == 200
    assert waited[0][1]["committed"] is True


def test_refund_status_route(emu: StripeEmulator) -> None:
    """POST /_emulator/refunds/{id}/status settles or fails a refund, as the API then shows."""
    client = _client(emu)
    pi = _paid(client, 1000)
    refund = _refund(client, pi.id)
    status, body, _ = _http(
        emu, "POST", f"/_emulator/refunds/{refund.id}/status", {"status": "pending"}
    )
    assert (status, body["id"], body["status"]) == (200, refund.id, "pending")
    assert _all_refunds(client, pi.id)[0].status == "pending"
    with pytest.raises(stripe.InvalidRequestError):
        _refund(client, pi.id, 1)  # a pending refund still counts
    _http(emu, "POST", f"/_emulator/refunds/{refund.id}/status", {"status": "failed"})
    assert _refund(client, pi.id, 1).amount == 1


@pytest.mark.parametrize(
    ("method", "path", "body", "needle"),
    [
        ("POST", "/_emulator/clock/advance", {}, "seconds"),
        ("POST", "/_emulator/clock/advance", {"seconds": -1}, "forward"),
        ("POST", "/_emulator/clock/advance", {"seconds": "soon"}, "ValueError"),
        ("POST", "/_emulator/clock/advance", {"seconds": "nan"}, "ValueError"),
        ("POST", "/_emulator/clock/advance", {"seconds": "inf"}, "ValueError"),
        ("POST", "/_emulator/clock/advance", "{not json", "JSONDecodeError"),
        ("POST", "/_emulator/clock/advance", [1, 2], "TypeError"),
        ("POST", "/_emulator/faults", {"kind": "explode"}, "unknown fault kind"),
        ("POST", "/_emulator/faults", {}, "kind"),
        ("POST", "/_emulator/faults", {"kind": "hold", "count": 0}, "count"),
        ("POST", "/_emulator/faults", {"kind": "hold", "hold_ms": -1}, "hold_ms"),
        ("POST", "/_emulator/faults", {"kind": "hold", "hold_ms": "long"}, "ValueError"),
        ("POST", "/_emulator/faults", {"kind": "drop", "commit": "false"}, "commit"),
        ("POST", "/_emulator/refunds/re_nope/status", {"status": "failed"}, "re_nope"),
        ("GET", "/_emulator/faults/flt_x?wait=later", None, "ValueError"),
    ],
)
def test_bad_control_requests_are_400(
    emu: StripeEmulator, method: str, path: str, body: Any, needle: str
) -> None:
    """A bad control body is a 400 whose message says what was wrong, and changes nothing."""
    now = emu.model.now()
    if path.startswith("/_emulator/faults/flt_x"):
        path = path.replace("flt_x", emu.model.add_fault("hold").id)
        emu.model.clear_faults()
    status, answer, headers = _http(emu, method, path, body)
    assert status == 400
    assert answer["error"].startswith("bad control request")
    assert needle in answer["error"]
    assert headers["request-id"].startswith("req_")
    assert emu.model.now() == pytest.approx(now, abs=5)
    assert all(f.remaining == 0 for f in emu.model.faults())


def test_bad_refund_status_is_400(emu: StripeEmulator) -> None:
    """Setting a refund to a status Stripe does not have is a 400 and leaves it as it was."""
    client = _client(emu)
    pi = _paid(client)
    refund = _refund(client, pi.id)
    status, answer, _ = _http(
        emu, "POST", f"/_emulator/refunds/{refund.id}/status", {"status": "vanished"}
    )
    assert status == 400
    assert "vanished" in answer["error"]
    assert _all_refunds(client, pi.id)[0].status == "succeeded"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/_emulator/nothing"),
        ("POST", "/_emulator/faults/x/y"),
        ("GET", "/_emulator/faults/flt_none"),
    ],
)
def test_unknown_control_routes_are_404(emu: StripeEmulator, method: str, path: str) -> None:
    """Unknown control routes and unknown fault ids are 404 with a message."""
    status, answer, _ = _http(emu, method, path, {} if method == "POST" else None)
    assert status == 404
    assert answer["error"]


# -- StripePayments and its transport --------------------------------------------------


def test_stripe_payments_sorts_emulator_errors(emu: StripeEmulator) -> None:
    """4xx answers become PaymentsRejectedError with a code; a 500 is PaymentsUnsettledError."""
    payments = StripePayments(_client(emu))
    pi = payments.create_payment(1000)
    with pytest.raises(PaymentsRejectedError) as missing:
        payments.get_payment("pi_unknown")
    assert (missing.value.code, missing.value.http_status) == ("resource_missing", 404)
    payments.create_refund(pi.id)
    with pytest.raises(PaymentsRejectedError) as done:
        payments.create_refund(pi.id, 1)
    assert (done.value.code, done.value.http_status) == ("charge_already_refunded", 400)
    emu.model.add_fault("error_500", commit=False)
    with pytest.raises(PaymentsUnsettledError) as boom:
        payments.create_refund(pi.id, 1)
    assert boom.value.http_status == 500


def test_stripe_payments_in_flight_key_is_unsettled(
    emu: StripeEmulator, release_hold: threading.Event
) -> None:
    """The emulator's 409 for a key in use is sorted as PaymentsUnsettledError (HTTP 409)."""
    payments = StripePayments(_client(emu, timeout_s=10))
    pi = payments.create_payment(1000)
    fault = emu.model.add_fault("hold", hold_ms=8000, commit=False)
    worker = threading.Thread(
        target=lambda: payments.create_refund(pi.id, 100, idempotency_key="k-409")
    )
    worker.start()
    try:
        assert fault.started.wait(5), "the held request never started"
        with pytest.raises(PaymentsUnsettledError) as err:
            payments.create_refund(pi.id, 100, idempotency_key="k-409")
        assert err.value.http_status == 409
    finally:
        release_hold.set()
        worker.join(10)
    assert len(payments.list_refunds(pi.id)) == 1


def test_connection_refused_is_unsettled() -> None:
    """A base address where nothing listens gives PaymentsUnsettledError, not a raw OSError."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    payments = StripePayments(
        make_stripe_client(TEST_KEY, timeout_s=2, base_url=f"http://127.0.0.1:{port}/")
    )
    with pytest.raises(PaymentsUnsettledError) as err:
        payments.get_payment("pi_x")
    assert err.value.http_status is None
    assert "failed" in str(err.value)


def test_deadline_bounds_a_slowly_dribbled_answer() -> None:
    """The deadline covers the whole answer: a server dribbling bytes cannot outlast it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def dribble() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            body = b'{"id": "pi_slow", "object": "payment_intent"}' + b" " * 200
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
            )
            for byte in body:
                # The slow server under test: each byte comes well within a per-read timeout.
                if stop.wait(0.05):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    server = threading.Thread(target=dribble)
    server.start()
    try:
        client = make_stripe_client(TEST_KEY, timeout_s=0.5, base_url=f"http://127.0.0.1:{port}")
        started = time.monotonic()
        with pytest.raises(stripe.APIConnectionError) as err:
            client.v1.payment_intents.retrieve("pi_slow")
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        server.join(5)
        listener.close()
    assert "timed out" in str(err.value)
    assert elapsed < 3.0, f"a 0.5 s deadline took {elapsed:.2f} s (the dribble takes ~12 s)"


def test_spent_deadline_is_a_connection_error(emu: StripeEmulator) -> None:
    """A deadline spent before the connection opens is an APIConnectionError, hence unsettled."""
    client = make_stripe_client(TEST_KEY, timeout_s=1e-9, base_url=emu.url)
    with pytest.raises(stripe.APIConnectionError, match="timed out"):
        client.v1.payment_intents.retrieve("pi_x")
    with pytest.raises(PaymentsUnsettledError) as err:
        StripePayments(client).get_payment("pi_x")
    assert err.value.http_status is None


@pytest.mark.parametrize("timeout_s", [0, -1.0])
def test_deadline_must_be_positive(timeout_s: float) -> None:
    """DeadlineHTTPClient refuses a zero or negative timeout."""
    with pytest.raises(ValueError, match="positive"):
        DeadlineHTTPClient(timeout_s)


def test_deadline_client_does_not_stream() -> None:
    """DeadlineHTTPClient refuses streaming requests plainly."""
    with pytest.raises(NotImplementedError):
        DeadlineHTTPClient(1.0).request_stream("get", "http://127.0.0.1:1/", {})


def test_emulator_context_manager_stops_listening() -> None:
    """Leaving the `with` block stops the emulator and frees its port."""
    with StripeEmulator() as emu:
        port = emu.port
        assert _http(emu, "DELETE", "/_emulator/faults")[0] == 200
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(2)
        s.connect(("127.0.0.1", port))


@pytest.mark.parametrize("amount", ["٣٠٠", "５０", "²", "--5", "5-", "1e3"])
def test_amounts_are_ascii_digits_only(emu: StripeEmulator, amount: str) -> None:
    """An amount in other digits (Arabic-Indic, full-width, superscript) or malformed is
    Stripe's 400 parameter_invalid_integer, never a refund and never a 500."""
    pi = _paid(_client(emu))
    for path, body in (
        ("/v1/refunds", {"payment_intent": pi.id, "amount": amount}),
        ("/v1/payment_intents", {"currency": "usd", "amount": amount}),
    ):
        status, answer, _ = _http(emu, "POST", path, urlencode(body), headers=_form())
        assert status == 400, (path, answer)
        assert answer["error"]["code"] == "parameter_invalid_integer"
        assert answer["error"]["param"] == "amount"
    assert _all_refunds(_client(emu), pi.id) == []

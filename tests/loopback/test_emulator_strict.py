"""The emulator is as strict as Stripe on the endpoints the demo uses, so offline cannot drift.

Its objects carry exactly the fields of Stripe's published examples
(`tests/data/stripe-fixtures-subset.json`, a copy of the subset of stripe/openapi's
fixtures3.json the demo uses); every parameter it
accepts is one the installed stripe SDK lists for that call (its params TypedDicts, read
with `typing.get_type_hints`); what Stripe refuses it refuses with Stripe's message and
`param`. Every request the repo itself sends (StripePayments, InProcessPayments) passes.
"""

from __future__ import annotations

import importlib
import json
import typing
from pathlib import Path
from typing import Any

import pytest
import stripe
import typing_extensions
from stripe._request_options import RequestOptions
from stripe._stripe_context import StripeContext

from interlock import PaymentsRejectedError, StripePayments
from interlock.testing import InProcessPayments, PaymentsModel, StripeEmulator
from interlock.testing.routes import (
    ACCEPTED_PARAMS,
    METADATA_KEY_MAX,
    METADATA_MAX_KEYS,
    METADATA_VALUE_MAX,
    SDK_PARAMS,
    route_for,
    sdk_params,
)
from tests.loopback.test_emulator import _all_refunds, _client, _form, _http, _paid, _refund

FIXTURES = Path(__file__).parents[1] / "data" / "stripe-fixtures-subset.json"


def _fixture(name: str) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads(FIXTURES.read_text())[name]
    return fixture


def _hints(endpoint: str) -> dict[str, Any]:
    """The SDK's params TypedDict for an endpoint, its annotations evaluated."""
    module, name = SDK_PARAMS[endpoint]
    typed = getattr(importlib.import_module(module), name)
    # RequestOptions, their base, names these only under TYPE_CHECKING.
    names = {**vars(typing), "StripeContext": StripeContext}
    hints: dict[str, Any] = typing.get_type_hints(typed, localns=names)
    return hints


def _typed_dict_keys(annotation: Any) -> set[str]:
    """The keys of the TypedDict inside an annotation (NotRequired, unions unwrapped)."""
    found: set[str] = set()
    candidates = [annotation]
    while candidates:
        current = candidates.pop()
        if typing_extensions.is_typeddict(current):
            found |= set(typing.get_type_hints(current))
        candidates.extend(typing.get_args(current))
    return found


# -- drift: objects and parameters -------------------------------------------------------


def test_refund_fields_are_stripes(emu: StripeEmulator) -> None:
    """A refund (created, replayed, listed) has exactly the fields of Stripe's example refund."""
    client = _client(emu)
    pi = _paid(client)
    created = _refund(client, pi.id, 100, key="k-fields")
    replayed = _refund(client, pi.id, 100, key="k-fields")
    [listed] = _all_refunds(client, pi.id)
    expected = set(_fixture("refund"))
    for obj in (created, replayed, listed):
        assert set(obj.to_dict()) == expected


def test_payment_intent_fields_are_stripes(emu: StripeEmulator) -> None:
    """A payment intent (created, read) has exactly the fields of Stripe's example."""
    client = _client(emu)
    pi = _paid(client)
    expected = set(_fixture("payment_intent"))
    assert set(pi.to_dict()) == expected
    assert set(client.v1.payment_intents.retrieve(pi.id).to_dict()) == expected


@pytest.mark.parametrize("endpoint", sorted(ACCEPTED_PARAMS))
def test_accepted_parameters_are_ones_the_sdk_lists(endpoint: str) -> None:
    """Every parameter (and nested key) the emulator accepts is in the SDK's TypedDict."""
    hints = _hints(endpoint)
    assert set(ACCEPTED_PARAMS[endpoint]) <= set(hints), "the emulator accepts what Stripe refuses"
    for name, inner in ACCEPTED_PARAMS[endpoint].items():
        if inner:
            assert inner <= _typed_dict_keys(hints[name]), name
    options = RequestOptions.__required_keys__ | RequestOptions.__optional_keys__
    assert sdk_params(endpoint) == set(hints) - options


@pytest.mark.parametrize("endpoint", sorted(ACCEPTED_PARAMS))
def test_sdk_parameters_not_modelled_are_refused_in_words(endpoint: str) -> None:
    """A parameter Stripe accepts but the emulator does not model is refused, never ignored."""
    model = PaymentsModel()
    pi = InProcessPayments(model).create_payment(1000).id
    unmodelled = sorted(sdk_params(endpoint) - set(ACCEPTED_PARAMS[endpoint]))
    assert unmodelled, "every SDK parameter is modelled: this test has nothing to check"
    name = unmodelled[0]
    reply = _call(model, endpoint, pi, {name: "x"})
    assert reply.status == 400
    assert reply.body["error"]["param"] == name
    assert "does not model" in reply.body["error"]["message"]


def _call(model: PaymentsModel, endpoint: str, pi: str, params: dict[str, Any]) -> Any:
    base: dict[str, dict[str, Any]] = {
        "POST /v1/payment_intents": {"amount": "1000", "currency": "usd"},
        "GET /v1/payment_intents/{id}": {},
        "POST /v1/refunds": {"payment_intent": pi, "amount": "100"},
        "GET /v1/refunds": {"payment_intent": pi},
        "POST /v1/transfers": {"amount": "100", "currency": "usd", "destination": "acct_MadeUp"},
        "GET /v1/transfers": {"destination": "acct_MadeUp"},
        "POST /v1/payouts": {"amount": "100", "currency": "usd", "destination": "ba_MadeUp"},
        "GET /v1/payouts": {"destination": "ba_MadeUp"},
    }
    merged = {**base[endpoint], **params}
    if endpoint == "POST /v1/transfers":
        return model.post("transfers", merged)
    if endpoint == "GET /v1/transfers":
        return model.list_transfers(merged)
    if endpoint in ("POST /v1/payouts", "GET /v1/payouts"):
        route, ident = route_for(*endpoint.split(" "))
        return model.serve(route, ident, merged)
    if endpoint == "POST /v1/payment_intents":
        return model.post("payment_intents", merged)
    if endpoint == "POST /v1/refunds":
        return model.post("refunds", merged)
    if endpoint == "GET /v1/refunds":
        return model.list_refunds(merged)
    return model.get_payment_intent(pi, merged)


# -- unknown parameters ------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", sorted(ACCEPTED_PARAMS))
def test_unknown_parameter_is_stripes_400(emu: StripeEmulator, endpoint: str) -> None:
    """A parameter Stripe does not know: 400, `Received unknown parameter: X`, param X."""
    client = _client(emu)
    pi = _paid(client).id
    with pytest.raises(stripe.InvalidRequestError) as err:
        if endpoint == "POST /v1/payment_intents":
            _paid(client, amuont=5)
        elif endpoint == "POST /v1/refunds":
            client.v1.refunds.create(params={"payment_intent": pi, "amuont": 5})  # type: ignore[typeddict-unknown-key]
        elif endpoint == "GET /v1/refunds":
            client.v1.refunds.list(params={"payment_intent": pi, "amuont": 5})  # type: ignore[typeddict-unknown-key]
        elif endpoint == "POST /v1/transfers":
            client.v1.transfers.create(
                params={"amount": 5, "currency": "usd", "destination": "acct_MadeUp", "amuont": 5}  # type: ignore[typeddict-unknown-key]
            )
        elif endpoint == "GET /v1/transfers":
            client.v1.transfers.list(params={"destination": "acct_MadeUp", "amuont": 5})  # type: ignore[typeddict-unknown-key]
        elif endpoint == "POST /v1/payouts":
            client.v1.payouts.create(
                params={"amount": 5, "currency": "usd", "destination": "ba_MadeUp", "amuont": 5}  # type: ignore[typeddict-unknown-key]
            )
        elif endpoint == "GET /v1/payouts":
            client.v1.payouts.list(params={"destination": "ba_MadeUp", "amuont": 5})  # type: ignore[typeddict-unknown-key]
        else:
            client.v1.payment_intents.retrieve(pi, params={"amuont": 5})  # type: ignore[typeddict-unknown-key]
    assert err.value.http_status == 400
    assert err.value.user_message == "Received unknown parameter: amuont"
    assert err.value.param == "amuont"
    assert err.value.code == "parameter_unknown"
    assert _all_refunds(client, pi) == []


def test_unknown_nested_parameter_names_its_path(emu: StripeEmulator) -> None:
    """An unknown key inside a hash is named with its path, as Stripe does."""
    with pytest.raises(stripe.InvalidRequestError) as err:
        _paid(
            _client(emu),
            allowed_payment_method_types=None,
            automatic_payment_methods={"enabled": True, "allow_redirect": "never"},
        )
    assert err.value.user_message == (
        "Received unknown parameter: automatic_payment_methods[allow_redirect]"
    )
    assert err.value.param == "automatic_payment_methods[allow_redirect]"


def test_payment_method_types_is_refused_as_on_the_sdks_api_version(emu: StripeEmulator) -> None:
    """payment_method_types is no longer writable on the SDK's API version: Stripe's code."""
    with pytest.raises(stripe.InvalidRequestError) as err:
        _paid(_client(emu), allowed_payment_method_types=None, payment_method_types=["card"])
    assert err.value.code == "payment_method_types_no_longer_supported"
    assert err.value.param == "payment_method_types"
    assert "payment_method_types" not in sdk_params("POST /v1/payment_intents")


def test_validation_errors_are_not_saved_under_the_key(emu: StripeEmulator) -> None:
    """An unknown parameter is refused before execution: the key is still free afterwards."""
    client = _client(emu)
    pi = _paid(client).id
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.refunds.create(
            params={"payment_intent": pi, "amount": 100, "bogus": 1},  # type: ignore[typeddict-unknown-key]
            options={"idempotency_key": "k-strict"},
        )
    assert _refund(client, pi, 100, key="k-strict").amount == 100


# -- metadata --------------------------------------------------------------------------


def _metadata_payment(emu: StripeEmulator, metadata: dict[str, str]) -> Any:
    return _paid(_client(emu), metadata=metadata)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            {f"k{i}": "v" for i in range(METADATA_MAX_KEYS + 1)},
            f"Metadata can have up to 50 keys, but you've set {METADATA_MAX_KEYS + 1}.",
        ),
        (
            {"k" * (METADATA_KEY_MAX + 1): "v"},
            "Metadata keys can have up to 40 characters, but you passed in a key that is 41 "
            f"characters. Invalid key: {'k' * 41}",
        ),
        (
            {"case": "v" * (METADATA_VALUE_MAX + 1)},
            "Metadata values can have up to 500 characters, but you passed in a value that is "
            "501 characters.",
        ),
    ],
    ids=["51-keys", "41-char-key", "501-char-value"],
)
def test_metadata_limits(emu: StripeEmulator, metadata: dict[str, str], message: str) -> None:
    """Past 50 keys, 40-character keys or 500-character values: Stripe's message, param metadata."""
    with pytest.raises(stripe.InvalidRequestError) as err:
        _metadata_payment(emu, metadata)
    assert err.value.user_message == message
    assert err.value.param == "metadata"
    client = _client(emu)
    pi = _paid(client).id
    with pytest.raises(stripe.InvalidRequestError) as on_refund:
        client.v1.refunds.create(params={"payment_intent": pi, "metadata": metadata})
    assert on_refund.value.user_message == message
    assert _all_refunds(client, pi) == []


def test_metadata_at_the_limits_is_accepted(emu: StripeEmulator) -> None:
    """Exactly 50 keys, a 40-character key and a 500-character value are fine."""
    metadata = {f"k{i}": "v" for i in range(METADATA_MAX_KEYS - 2)}
    metadata["k" * METADATA_KEY_MAX] = "v"
    metadata["long"] = "v" * METADATA_VALUE_MAX
    assert len(metadata) == METADATA_MAX_KEYS
    assert _metadata_payment(emu, metadata).metadata.to_dict() == metadata


def test_nested_metadata_value_is_refused(emu: StripeEmulator) -> None:
    """A metadata value that is a hash, not a string, is refused on param metadata."""
    status, body, _ = _http(
        emu,
        "POST",
        "/v1/payment_intents",
        "amount=1000&currency=usd&metadata[a][b]=c",
        _form(),
    )
    assert status == 400
    assert body["error"]["param"] == "metadata"


# -- amounts and currencies ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({"amount": "ten"}, "parameter_invalid_integer", "Invalid integer: ten"),
        ({"amount": "1.5"}, "parameter_invalid_integer", "Invalid integer: 1.5"),
        ({"amount": 0}, "parameter_invalid_integer", "greater than or equal to 1"),
        ({"amount": 49}, "amount_too_small", "Amount must be at least $0.50 usd"),
        ({"amount": 100_000_000}, "amount_too_large", "no more than $999,999.99"),
        ({"currency": "xyz"}, "parameter_invalid_string", "Invalid currency: xyz"),
        ({"currency": "jpy", "amount": 49}, "amount_too_small", "at least ¥50 jpy"),
        ({"currency": "gbp", "amount": 29}, "amount_too_small", "at least £0.30 gbp"),
        ({"confirm": "maybe"}, "parameter_invalid_boolean", "Invalid boolean: maybe"),
    ],
)
def test_amount_and_currency_rules(
    emu: StripeEmulator, params: dict[str, Any], code: str, message: str
) -> None:
    """Amounts are positive integers within Stripe's bounds, in a currency it supports."""
    body = {"amount": "5000", "currency": "usd", **{k: str(v) for k, v in params.items()}}
    form = "&".join(f"{k}={v}" for k, v in body.items())
    status, answer, _ = _http(emu, "POST", "/v1/payment_intents", form, _form())
    assert status == 400
    assert answer["error"]["code"] == code
    assert message in answer["error"]["message"]


def test_currency_is_lowercased_and_zero_decimal_minimum_applies(emu: StripeEmulator) -> None:
    """`USD` is taken as usd; 50 yen is enough for jpy."""
    client = _client(emu)
    assert _paid(client, currency="USD").currency == "usd"
    assert _paid(client, amount=50, currency="jpy").amount == 50


def test_refund_amount_rules(emu: StripeEmulator) -> None:
    """A refund amount that is not a positive integer is refused on param amount."""
    client = _client(emu)
    pi = _paid(client).id
    for amount, message in (("ten", "Invalid integer: ten"), ("-5", "greater than or equal")):
        status, body, _ = _http(
            emu, "POST", "/v1/refunds", f"payment_intent={pi}&amount={amount}", _form()
        )
        assert (status, body["error"]["param"]) == (400, "amount")
        assert message in body["error"]["message"]


# -- the repo's own requests pass ----------------------------------------------------------


def test_every_request_the_repo_sends_is_accepted(emu: StripeEmulator) -> None:
    """StripePayments' four calls, metadata included, pass the strict emulator."""
    payments = StripePayments(_client(emu))
    pi = payments.create_payment(5000, metadata={"case": "c-1", "agent": "standard"})
    refund = payments.create_refund(
        pi.id, 1000, idempotency_key="act_1", metadata={"interlock_action": "act_1"}
    )
    assert payments.get_payment(pi.id).refunds[0].id == refund.id
    assert [r.id for r in payments.list_refunds(pi.id)] == [refund.id]
    assert payments.create_refund(pi.id).amount == 4000
    with pytest.raises(PaymentsRejectedError):
        payments.create_refund(pi.id, 1)


def test_every_request_in_process_is_accepted() -> None:
    """InProcessPayments sends the same requests to the model, and they pass too."""
    payments = InProcessPayments()
    pi = payments.create_payment(5000, metadata={"case": "c-1"})
    refund = payments.create_refund(
        pi.id, 1000, idempotency_key="act_1", metadata={"interlock_action": "act_1"}
    )
    assert payments.get_payment(pi.id).refunds[0].id == refund.id
    assert payments.create_refund(pi.id).amount == 4000

"""Payouts, the object added to the emulator as one row per endpoint plus the model's
operation (`docs/guides/add-an-effect.md` walks it): the real SDK creates and lists them,
under Stripe's idempotency rules, with the fields of the SDK's own `Payout`."""

from __future__ import annotations

import pytest
import stripe

from interlock.testing import PaymentsModel, StripeEmulator
from interlock.testing.routes import ROUTES, route_for
from tests.loopback.test_emulator import _client, _headers


def test_every_route_names_an_operation_of_the_model_and_is_found_by_its_path() -> None:
    """Each row's operation is a method of the model, and routing a path finds that row."""
    model = PaymentsModel()
    for endpoint, route in ROUTES.items():
        assert callable(getattr(model, route.operation, None)), endpoint
        method, path = endpoint.split(" ")
        assert route_for(method, path.replace("{id}", "pi_x")) == (
            route,
            "pi_x" if "{id}" in path else "",
        )


def test_a_payout_has_the_fields_of_the_sdks_payout(emu: StripeEmulator) -> None:
    """A payout created, replayed and listed has exactly the fields stripe.Payout declares."""
    client = _client(emu)
    params = {"amount": 2_500, "currency": "usd", "destination": "ba_Fields"}
    created = client.v1.payouts.create(params=params, options={"idempotency_key": "k-po"})
    replayed = client.v1.payouts.create(params=params, options={"idempotency_key": "k-po"})
    [listed] = client.v1.payouts.list(params={"destination": "ba_Fields"}).data
    expected = set(stripe.Payout.__annotations__) - {"OBJECT_NAME"}
    for obj in (created, replayed, listed):
        assert set(obj.to_dict()) == expected
    assert replayed.id == created.id == listed.id
    assert _headers(replayed).get("idempotent-replayed") == "true"
    assert (created.object, created.amount, created.status) == ("payout", 2_500, "pending")


def test_payouts_are_listed_by_bank_account_newest_first_a_page_at_a_time(
    emu: StripeEmulator,
) -> None:
    """A destination's payouts come newest first, others' apart, and the SDK pages them."""
    client = _client(emu)
    made = [
        client.v1.payouts.create(
            params={"amount": 100 + i, "currency": "usd", "destination": "ba_Pages"}
        ).id
        for i in range(5)
    ]
    client.v1.payouts.create(params={"amount": 999, "currency": "usd", "destination": "ba_Other"})
    pages = client.v1.payouts.list(params={"destination": "ba_Pages", "limit": 2})
    assert [p.id for p in pages.auto_paging_iter()] == made[::-1]
    assert pages.has_more is True


def test_a_payout_to_no_bank_account_is_refused(emu: StripeEmulator) -> None:
    """A destination that is not a bank account is Stripe's resource_missing; none is made."""
    client = _client(emu)
    with pytest.raises(stripe.InvalidRequestError) as err:
        client.v1.payouts.create(
            params={"amount": 100, "currency": "usd", "destination": "acct_NotABank"}
        )
    assert (err.value.code, err.value.param) == ("resource_missing", "destination")
    assert client.v1.payouts.list(params={"destination": "acct_NotABank"}).data == []

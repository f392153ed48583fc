"""A gate refuses a Stripe client whose calls may outlast the Stripe timeout it plans with.

Each client is a real `stripe.StripeClient`; nothing is sent (construction only), which
the generated clients check against a loopback emulator.
"""

from __future__ import annotations

import math

import pytest
import stripe
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import (
    UNSIGNED_APPROVALS,
    ConfigError,
    Gate,
    MemoryStore,
    SigningKey,
    StripePayments,
    StripeRefund,
    Timing,
    make_stripe_client,
)
from interlock._stripe.adapter import DeadlineHTTPClient
from interlock.testing import StripeEmulator
from tests.conftest import TEST_KEY

PLAN = Timing(claim_ttl_s=6, stripe_timeout_s=1)


def _gate(client: stripe.StripeClient, timing: Timing = PLAN) -> Gate:
    return Gate(
        MemoryStore(),
        StripeRefund(StripePayments(client)),
        timing=timing,
        signing_key=SigningKey.generate(),
        approvers=UNSIGNED_APPROVALS,
    )


@pytest.mark.parametrize(
    ("client", "deadline"),
    [
        pytest.param(stripe.StripeClient(TEST_KEY), "none per call", id="plain-sdk-defaults"),
        pytest.param(
            stripe.StripeClient(TEST_KEY, http_client=stripe.RequestsClient(timeout=1)),
            "none per call",
            id="per-read-timeout-transport",
        ),
        pytest.param(
            stripe.StripeClient(TEST_KEY, http_client=DeadlineHTTPClient(1), max_network_retries=2),
            "13 s per call",  # three tries of 1 s and two pauses of up to 5 s
            id="deadline-transport-with-retries",
        ),
        pytest.param(make_stripe_client(TEST_KEY, timeout_s=30), "30 s per call", id="readme-30s"),
    ],
)
def test_a_client_that_may_outlast_the_plan_is_refused(
    client: stripe.StripeClient, deadline: str
) -> None:
    """The refusal names the client's deadline and the planned timeout."""
    with pytest.raises(ConfigError) as refused:
        _gate(client)
    assert deadline in str(refused.value)
    assert "(1 s)" in str(refused.value)
    assert "make_stripe_client(key, timeout_s=timing.stripe_timeout_s)" in str(refused.value)


@pytest.mark.parametrize("timeout_s", [1.0, 0.5])
def test_a_client_inside_the_plan_is_accepted(timeout_s: float) -> None:
    """A client built from the timing (or with a shorter deadline) builds a gate."""
    client = make_stripe_client(TEST_KEY, timeout_s=timeout_s)
    assert StripePayments(client).deadline_s == timeout_s
    assert _gate(client).effect.deadline_s == timeout_s  # type: ignore[attr-defined]


def test_the_deadline_reads_the_sdk_retries_and_transport() -> None:
    """Deadlines as the SDK will run them: unbounded transports are infinite."""
    assert StripePayments(stripe.StripeClient(TEST_KEY)).deadline_s == math.inf
    one_retry = stripe.StripeClient(
        TEST_KEY, http_client=DeadlineHTTPClient(2), max_network_retries=1
    )
    assert StripePayments(one_retry).deadline_s == 2 * 2 + stripe.HTTPClient.MAX_DELAY


def test_the_transport_deadline_cannot_change_after_the_gate_checked_it() -> None:
    """`timeout_s` is read-only, so a checked client cannot be widened later."""
    transport = DeadlineHTTPClient(1)
    with pytest.raises(AttributeError):
        transport.timeout_s = 30  # type: ignore[misc]


@settings(max_examples=60, deadline=None)
@given(
    timeout_s=st.floats(0.05, 90.0),
    retries=st.integers(0, 3),
    claim_ttl_s=st.integers(6, 120),
    data=st.data(),
)
def test_any_client_against_any_plan_is_refused_exactly_when_it_may_outlast_it(
    shared_emulator: StripeEmulator,
    timeout_s: float,
    retries: int,
    claim_ttl_s: int,
    data: st.DataObject,
) -> None:
    """Clients whose deadline differs from the plan, either way: a gate is built exactly
    when one call (every try and pause) ends within the planned Stripe timeout, and a
    refusal names both numbers; building one sends nothing to Stripe."""
    plan_timeout = data.draw(st.floats(0.5, claim_ttl_s - 5.0))
    plan = Timing(claim_ttl_s=claim_ttl_s, stripe_timeout_s=plan_timeout)
    emu = shared_emulator
    before = len(emu.model.requests)
    client = stripe.StripeClient(
        TEST_KEY,
        http_client=DeadlineHTTPClient(timeout_s),
        max_network_retries=retries,
        base_addresses={"api": emu.url},
    )
    deadline = timeout_s * (retries + 1) + retries * stripe.HTTPClient.MAX_DELAY
    if deadline <= plan_timeout:
        built = _gate(client, plan).effect.deadline_s  # type: ignore[attr-defined]
        assert built == pytest.approx(deadline)
    else:
        with pytest.raises(ConfigError) as refused:
            _gate(client, plan)
        assert f"({plan_timeout:g} s)" in str(refused.value)
    assert len(emu.model.requests) == before

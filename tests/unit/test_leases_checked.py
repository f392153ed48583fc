"""Approvals are checked when granted, and a bad one already stored refuses its action.

A lease with a cap of infinity, a NaN expiry, an expiry before its grant or an id that
would not pass as an intent's is refused when made (`LeaseError`, nothing stored). One
written into the store by hand (or by an older version) is read back as damaged: the
action under it is refused, saying so, instead of raising on every attempt and staying
pending for good.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from interlock import (
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    LeaseError,
    MemoryStore,
    Owner,
    SQLiteStore,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments

NOW = 1_700_000_000.0
GOOD: dict[str, Any] = {
    "id": "lease_1",
    "kind": "refund",
    "target": "pi_1",
    "cap": 2000,
    "expires_at": NOW + 3600,
    "granted_by": "support",
    "granted_at": NOW,
}

# Values no approval can hold: each breaks one field, and each is refused at grant.
EXTREME = st.one_of(
    st.tuples(st.just("cap"), st.sampled_from([math.inf, -math.inf, math.nan, 0, -1, 10**10,
                                                10**30, True, 20.5, "2000", None])),
    st.tuples(st.just("spent"), st.sampled_from([-1, 10**10, math.inf, 1.5])),
    st.tuples(st.just("expires_at"), st.sampled_from([math.nan, math.inf, -math.inf, NOW,
                                                       NOW - 1, "tomorrow", None])),
    st.tuples(st.just("granted_at"), st.sampled_from([math.nan, math.inf, -math.inf, None])),
    st.tuples(st.just("revoked_at"), st.sampled_from([math.nan, math.inf, "now"])),
    st.tuples(st.sampled_from(["id", "target"]),
              st.sampled_from(["", "a b", "x" * 201, "é", "\x1b[2J", "tab\t", 7])),
    st.tuples(st.sampled_from(["kind", "granted_by"]), st.sampled_from(["", "  ", "\x1b[2J", 3])),
    st.tuples(st.just("reservations"), st.sampled_from([{"a b": 1}, {"act": math.inf},
                                                        {"act": 0}, {"act": -5}])),
)  # fmt: skip


def test_a_good_lease_is_accepted() -> None:
    """The values every caller uses pass the checks unchanged."""
    lease = Lease(**GOOD)
    assert lease.invalid() is None and lease.damaged is None
    assert Lease.from_dict(lease.to_dict()) == lease


@settings(max_examples=200, deadline=None)
@given(EXTREME)
def test_an_extreme_value_is_refused_at_grant_and_nothing_is_stored(bad: tuple[str, Any]) -> None:
    """Every broken field raises LeaseError naming it; the store holds no lease after."""
    name, value = bad
    store = MemoryStore()
    with pytest.raises(LeaseError, match=rf"\b{name.rstrip('s')}"):
        store.grant_lease(Lease(**{**GOOD, name: value}))
    assert store.lease(GOOD["id"]) is None


@settings(max_examples=100, deadline=None)
@given(
    cap=st.integers(min_value=1, max_value=10**10 - 1),
    life=st.floats(min_value=1e-3, max_value=1e9, allow_nan=False),
)
def test_any_lease_in_range_round_trips(cap: int, life: float) -> None:
    """Whole cents in range and a finite expiry after the grant are always accepted."""
    lease = Lease(**{**GOOD, "cap": cap, "expires_at": NOW + life})
    assert Lease.from_dict(json.loads(json.dumps(lease.to_dict()))) == lease


def _gate(store: SQLiteStore, payments: InProcessPayments) -> Gate:
    return Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        owner=Owner("test-worker", os.getpid(), 0.0, "test-host"),
        signing_key=None,
        approvers=UNSIGNED_APPROVALS,
    )


LEASE_TEXT = "SELECT lease FROM leases WHERE lease_id=?"
SET_LEASE_TEXT = "UPDATE leases SET lease=? WHERE lease_id=?"


def _lease_and_intent(path: Path) -> tuple[SQLiteStore, InProcessPayments, Intent]:
    """A SQLite store at `path` with a $20 approval on a new $50 payment, and an intent
    to refund $20 under it."""
    store = SQLiteStore(path)
    payments = InProcessPayments()
    pi = payments.create_payment(5000).id
    now = time.time()
    lease_id = f"lease-{uuid.uuid4().hex[:8]}"
    store.grant_lease(Lease(lease_id, "refund", pi, 2000, now + 3600, "test", now))
    intent = Intent(new_action_id(), "refund", pi, 2000, lease_id,
                    refunds_fingerprint(payments.list_refunds(pi)))  # fmt: skip
    return store, payments, intent


@pytest.mark.parametrize(
    ("field", "value"),
    [("cap", math.inf), ("expires_at", math.nan), ("cap", "lots"), ("granted_at", None)],
)
def test_a_bad_lease_in_the_store_refuses_its_action_instead_of_sticking_it(
    tmp_path: Path, field: str, value: object
) -> None:
    """A lease rewritten by hand in the SQLite file (as an older version could store it):
    submit refuses the action naming the damage, nothing is sent, and the row keeps what
    was stored. Before the check, cap=inf raised OverflowError on every attempt and NaN
    expiry never expired."""
    path = tmp_path / "store.sqlite3"
    store, payments, intent = _lease_and_intent(path)
    with sqlite3.connect(path) as db:
        (text,) = db.execute(LEASE_TEXT, (intent.lease_id,)).fetchone()
        data = {**json.loads(text), field: value}
        db.execute(SET_LEASE_TEXT, (json.dumps(data), intent.lease_id))
    db.close()

    outcome = _gate(store, payments).submit(intent)

    assert outcome.status == "refused", outcome
    assert outcome.reason is not None and "damaged in the store" in outcome.reason
    assert field in outcome.reason
    assert payments.list_refunds(intent.target) == []
    state = store.action(intent.action_id)
    assert state is not None and state.settlement is not None
    assert state.settlement.status == "refused"
    stored = store.lease(intent.lease_id)
    assert stored is not None and stored.damaged is not None
    assert stored.to_dict() == json.loads(json.dumps(data))
    store.close()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{oops", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ("OTHER", "its stored data names 'lease-other'"),
    ],
)
def test_a_lease_row_that_is_not_its_lease_refuses_and_is_kept(
    tmp_path: Path, text: str, why: str
) -> None:
    """A lease row whose text is not JSON, not an object, or another lease's data (a row
    copied under another key): submit refuses the action naming the damage, revoking it
    says it cannot and changes nothing, and the row keeps its text."""
    path = tmp_path / "store.sqlite3"
    store, payments, intent = _lease_and_intent(path)
    pi, lease_id, now = intent.target, intent.lease_id, time.time()
    if text == "OTHER":
        text = json.dumps(Lease("lease-other", "refund", pi, 9000, now + 3600, "x", now).to_dict())
    with sqlite3.connect(path) as db:
        db.execute(SET_LEASE_TEXT, (text, lease_id))
    db.close()

    outcome = _gate(store, payments).submit(intent)
    with pytest.raises(LeaseError, match=r"damaged in the store .*nothing was changed"):
        store.revoke_lease(lease_id, "ops")

    assert outcome.status == "refused", outcome
    assert outcome.reason is not None and "damaged in the store" in outcome.reason
    assert why in outcome.reason
    assert payments.list_refunds(pi) == []
    store.close()
    with sqlite3.connect(path) as db:
        (kept,) = db.execute(LEASE_TEXT, (lease_id,)).fetchone()
    db.close()
    assert kept == text


@settings(max_examples=60, deadline=None)
@given(EXTREME)
def test_any_extreme_stored_value_reads_back_damaged_never_raises(bad: tuple[str, Any]) -> None:
    """Whatever a lease row holds, reading it gives a lease whose problem names the damage."""
    name, value = bad
    # A number where a string belongs reads back as its text, which is a valid id.
    assume(not (name in ("id", "target", "kind", "granted_by") and isinstance(value, int)))
    raw = json.loads(json.dumps({**GOOD, name: value}))
    lease = Lease.from_dict(raw)
    problem = lease.problem(kind="refund", target="pi_1", amount=1, action_id="act", now=NOW)
    assert problem is not None and "damaged" in problem

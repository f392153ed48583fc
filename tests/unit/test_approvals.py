"""Signed approvals: only an approver's signature over what a lease authorizes lets the gate
act under it, at every send and resend; exact approvals cover one action of their amount.

The gate tests run on the gate rig's in-memory Stripe; the store's own rules (commit 2
bound to the checked lease, exact leases used once) are in tests/unit/test_store_contract.py,
and the forged lease across processes in tests/e2e/test_forged_approvals.py.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    UNSIGNED_APPROVALS,
    Approver,
    Approvers,
    ConfigError,
    Gate,
    Lease,
    LeaseError,
    Owner,
    SQLiteStore,
    Store,
    StripeRefund,
    verify,
)
from tests.helpers.approvals import APPROVER, APPROVERS
from tests.helpers.gate_rig import AMOUNT, TIMING, GateWorld


@pytest.fixture
def world() -> Iterator[GateWorld]:
    """The gate rig: a $100 payment, an in-memory store, a fake clock."""
    yield GateWorld()


def _write_row(store: Store, lease: Lease) -> None:
    """Write a lease row as anyone who can write the store can: no rule in between."""
    with store._write() as tx:  # type: ignore[attr-defined]
        tx.put_lease(lease, new=tx.get_lease(lease.id) is None)


def _send(world: GateWorld, lease_id: str, amount: int = AMOUNT, **hooks: Any) -> Any:
    intent = world.decide(amount, lease_id)
    return world.gate(Owner.current("worker"), hooks=hooks).submit(intent)


def test_a_signed_grant_is_sent_and_its_receipt_names_the_signer(world: GateWorld) -> None:
    """An approver's signed lease lets the gate send; the receipt says who signed it."""
    lease = world.grant(AMOUNT)

    outcome = _send(world, lease.id)

    assert outcome.status == "sent"
    assert outcome.receipt is not None
    (check,) = [c for c in outcome.receipt.checks if c["name"] == "approval_signature"]
    assert check["passed"] and check["observed"] == f"signed by support (key {APPROVER.key_id})"
    assert verify(world.store, world.payments, approvers=APPROVERS).ok


def test_an_unsigned_lease_is_refused_and_nothing_is_sent(world: GateWorld) -> None:
    """A lease a store writer wrote (no signature) does not make the gate act."""
    now = world.clock()
    forged = world.store.grant_lease(
        Lease("lease_forged", "refund", world.pi, AMOUNT, now + 3600, "support", now)
    )

    outcome = _send(world, forged.id)

    assert outcome.status == "refused"
    assert outcome.reason is not None and "is not signed" in outcome.reason
    assert world.refunds() == []
    problems = verify(world.store, world.payments, approvers=APPROVERS).problems
    assert any("lease_forged is not signed" in p for p in problems), problems


def test_a_grant_altered_after_signing_is_refused(world: GateWorld) -> None:
    """Raising a signed lease's cap in the store breaks its signature: refused, not sent."""
    lease = world.grant(AMOUNT)
    _write_row(world.store, replace(lease, cap=9_000))

    outcome = _send(world, lease.id, 9_000)

    assert outcome.status == "refused"
    assert outcome.reason is not None and "signature does not verify" in outcome.reason
    assert world.refunds() == []
    problems = verify(world.store, world.payments, approvers=APPROVERS).problems
    assert any("signature does not verify" in p for p in problems), problems


def test_a_grant_signed_by_an_unknown_key_is_refused(world: GateWorld) -> None:
    """A lease signed by a key the gate does not trust (the writer's own) is refused."""
    stranger = Approver.generate("support")
    now = world.clock()
    lease = world.store.grant_lease(
        stranger.grant(kind="refund", target=world.pi, cap=AMOUNT, expires_in_s=3600, now=now)
    )

    outcome = _send(world, lease.id)

    assert outcome.status == "refused"
    assert outcome.reason is not None and "not one of this gate's approvers" in outcome.reason
    assert world.refunds() == []


def test_a_revocation_needs_no_signature(world: GateWorld) -> None:
    """Anyone may take authority away: a revoked signed lease refuses, unsigned revocation."""
    lease = world.grant(AMOUNT)

    world.store.revoke_lease(lease.id, "on-call")
    outcome = _send(world, lease.id)

    assert outcome.status == "refused"
    assert outcome.reason == "approval revoked by on-call"
    assert world.refunds() == []
    assert verify(world.store, world.payments, approvers=APPROVERS).ok


def test_a_lease_swapped_between_the_check_and_commit_2_is_refused(world: GateWorld) -> None:
    """A writer who swaps the lease row after the gate verified it (a bigger cap, the old
    signature) is refused at the commit that marks `sending` (a first attempt's one
    commit), which sends only under the lease that was checked."""
    lease = world.grant(AMOUNT)
    intent = world.decide(AMOUNT, lease.id)
    swapped: list[bool] = []

    def swap(data: Any) -> None:
        if data.get("name") == "approval" and not swapped:
            swapped.append(True)
            _write_row(world.store, replace(lease, cap=9_000, target=world.pi))

    outcome = world.gate(Owner.current("worker"), hooks={"check": swap}).submit(intent)

    assert swapped and outcome.status == "refused"
    assert outcome.reason is not None and "changed in the store after it was checked" in (
        outcome.reason
    )
    assert world.refunds() == []


def test_an_exact_approval_covers_one_action_of_its_amount_once(world: GateWorld) -> None:
    """An exact grant sends its one action; a second action, or another amount, is refused."""
    now = world.clock()
    lease = world.store.grant_lease(
        APPROVER.grant(kind="refund", target=world.pi, amount=AMOUNT, expires_in_s=3600, now=now)
    )
    assert lease.exact and lease.cap == AMOUNT

    other_amount = _send(world, lease.id, AMOUNT - 1)
    first = _send(world, lease.id)
    second = _send(world, lease.id)

    assert other_amount.status == "refused"
    assert other_amount.reason == f"approval is for exactly {AMOUNT}, not {AMOUNT - 1}"
    assert first.status == "sent"
    assert second.status == "refused"
    assert second.reason is not None and "already used" in second.reason
    assert [r.amount for r in world.refunds()] == [AMOUNT]


def test_an_exact_approval_turned_into_a_cap_breaks_its_signature(world: GateWorld) -> None:
    """`exact` is signed: a writer cannot turn an exact approval into a reusable cap."""
    now = world.clock()
    lease = world.store.grant_lease(
        APPROVER.grant(kind="refund", target=world.pi, amount=AMOUNT, expires_in_s=3600, now=now)
    )
    _write_row(world.store, replace(lease, exact=False))

    outcome = _send(world, lease.id)

    assert outcome.status == "refused"
    assert outcome.reason is not None and "signature does not verify" in outcome.reason


def test_a_gate_with_no_approvers_says_what_to_pass(world: GateWorld) -> None:
    """No trust list and no opt-in: the gate is refused at construction, naming both."""
    with pytest.raises(ConfigError, match=r"approvers=.*UNSIGNED_APPROVALS"):
        Gate(world.store, StripeRefund(world.payments), timing=TIMING)


def test_unsigned_approvals_is_an_explicit_opt_in(world: GateWorld) -> None:
    """`UNSIGNED_APPROVALS` accepts an unsigned lease, and the receipt says so."""
    now = world.clock()
    lease = world.store.grant_lease(
        Lease("lease_old", "refund", world.pi, AMOUNT, now + 3600, "support", now)
    )
    gate = Gate(
        world.store,
        StripeRefund(world.payments),
        timing=TIMING,
        clock=world.clock,
        sleep=world.clock.sleep,
        approvers=UNSIGNED_APPROVALS,
    )

    outcome = gate.submit(world.decide(AMOUNT, lease.id))

    assert outcome.status == "sent" and outcome.receipt is not None
    (check,) = [c for c in outcome.receipt.checks if c["name"] == "approval_signature"]
    assert check["observed"].startswith("unsigned, accepted")


def test_the_gate_reads_the_approvers_public_keys_from_the_environment(
    world: GateWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker is given public keys only: INTERLOCK_APPROVERS names their PEM files."""
    keys = tmp_path / "approvers.pem"
    keys.write_bytes(APPROVER.public_pem() + Approver.generate("ops").public_pem())
    monkeypatch.setenv("INTERLOCK_APPROVERS", str(keys))
    lease = world.grant(AMOUNT)

    gate = Gate(
        world.store,
        StripeRefund(world.payments),
        timing=TIMING,
        clock=world.clock,
        sleep=world.clock.sleep,
    )

    assert len(gate.approvers.keys) == 2
    assert gate.submit(world.decide(AMOUNT, lease.id)).status == "sent"


def test_an_approvers_key_is_saved_0600_and_loads_back(tmp_path: Path) -> None:
    """The private key is written for its owner only and signs the same after loading."""
    path = tmp_path / "support.key"
    APPROVER.save(path)

    loaded = Approver.load("support", path)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert loaded.key_id == APPROVER.key_id
    lease = loaded.grant(kind="refund", target="pi_1", cap=100, expires_in_s=60, now=1.0)
    assert APPROVERS.problem(lease) is None
    with pytest.raises(FileExistsError):
        APPROVER.save(path)


def test_the_signature_covers_every_authorized_field_and_nothing_the_store_changes() -> None:
    """Changing any authorized field breaks the signature; spend, reservations and
    revocation do not (the store changes them as the lease is used)."""
    lease = APPROVER.grant(
        kind="refund", target="pi_1", cap=500, currency="usd", expires_in_s=60, now=10.0
    )
    changed = {
        "id": "lease_other",
        "kind": "transfer",
        "target": "pi_2",
        "currency": "eur",
        "cap": 501,
        "exact": True,
        "expires_at": 71.0,
        "granted_by": "mallory",
        "granted_at": 9.0,
    }
    for name, value in changed.items():
        assert APPROVERS.problem(replace(lease, **{name: value})) is not None, name
    used = replace(lease, spent=100, reservations={"act_1": 50}, revoked_at=11.0, revoked_by="x")
    assert APPROVERS.problem(used) is None
    assert Lease.from_dict(lease.to_dict()) == lease


def test_a_grant_gives_a_cap_or_an_exact_amount() -> None:
    """`grant` takes one of cap= and amount=, and a currency as a lowercase ISO code."""
    with pytest.raises(LeaseError, match="either cap"):
        APPROVER.grant(kind="refund", target="pi_1", cap=1, amount=1, expires_in_s=60)
    with pytest.raises(LeaseError, match="currency"):
        APPROVER.grant(kind="refund", target="pi_1", cap=1, currency="USD", expires_in_s=60)


def test_a_lease_stored_before_signatures_reads_back_unsigned() -> None:
    """Old rows (no currency, exact, key id or signature) read back as unsigned cap leases."""
    old = {
        "id": "lease_1",
        "kind": "refund",
        "target": "pi_1",
        "cap": 100,
        "expires_at": 2.0,
        "granted_by": "support",
        "granted_at": 1.0,
    }
    lease = Lease.from_dict(old)
    assert lease.damaged is None
    assert (lease.currency, lease.exact, lease.key_id, lease.signature) == (None, False, None, None)
    assert "is not signed" in (APPROVERS.problem(lease) or "")


def test_an_approvers_list_needs_a_key() -> None:
    """An empty trust list is a mistake, not an opt-in: it names the opt-in instead."""
    with pytest.raises(ConfigError, match="UNSIGNED_APPROVALS"):
        Approvers([])


def test_a_list_that_takes_unsigned_leases_checks_the_signatures_of_its_own_keys() -> None:
    """With allow_unsigned (migration), a lease signed by one of its keys must still verify;
    one signed by an unknown key counts as unsigned, which the list takes anyway."""
    migrating = Approvers([APPROVER.public_key], allow_unsigned=True)
    ours = APPROVER.grant(kind="refund", target="pi_1", cap=100, expires_in_s=60, now=1.0)
    theirs = Approver.generate("x").grant(kind="refund", target="pi_1", cap=100, expires_in_s=60)

    assert migrating.problem(ours) is None
    assert "does not verify" in (migrating.problem(replace(ours, cap=101)) or "")
    assert migrating.problem(theirs) is None
    assert migrating.describe(theirs).endswith("accepted as unsigned")


def test_a_grant_in_whole_seconds_verifies_after_the_store_read_it_back(tmp_path: Path) -> None:
    """Times given as ints are stored and read back as floats: the signature still holds."""
    store = SQLiteStore(tmp_path / "journal.sqlite3")
    try:
        lease = store.grant_lease(
            APPROVER.grant(kind="refund", target="pi_1", cap=100, expires_at=2_000, now=1_000)
        )
        stored = store.lease(lease.id)
    finally:
        store.close()

    assert stored is not None and isinstance(stored.expires_at, float)
    assert APPROVERS.problem(stored) is None

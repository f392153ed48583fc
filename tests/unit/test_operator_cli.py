"""The operator's commands (`python -m interlock pending/show/resolve/revoke`), in process.

A SQLite store on a fake clock holds the actions a crashed worker leaves (the gate rig's
crashes); the CLI reads it with the real clock, so a dead worker's claim has run out, as
it has when an operator looks. Stripe is the in-process model (the CLI's `_payments` seam),
so every test runs in milliseconds; tests/e2e/test_operator_cli_postgres.py runs the commands as
processes against the loopback emulator, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import json
import sqlite3
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from interlock import (
    ACTION_METADATA_KEY,
    Gate,
    Intent,
    KeyList,
    Lease,
    Owner,
    PaymentsUnsettledError,
    SigningKey,
    SQLiteStore,
    StripeTransfer,
    _operator,
    new_action_id,
    transfers_fingerprint,
    verify,
)
from interlock import Event as GateEventSeen
from interlock import __main__ as cli
from interlock._core.errors import ActionError
from interlock._core.journal import CODE_REFUSED_BY_PERSON, Settlement
from interlock._core.payments import Transfer
from interlock.testing import InProcessPayments
from tests.helpers.approvals import APPROVER, APPROVERS
from tests.helpers.gate_rig import AMOUNT, TIMING, Crash, GateWorld, gone_owner

TEST_KEY = "sk_test_operator"


class Payments(InProcessPayments):
    """The in-process Stripe, closable as the CLI's client is; with `transfer_500` set, a
    transfer's create answers HTTP 500 (after making it, or before)."""

    closed = False
    transfer_500: str | None = None

    def close(self) -> None:
        self.closed = True

    def create_transfer(
        self,
        destination: str,
        amount: int,
        *,
        currency: str = "usd",
        idempotency_key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Transfer:
        if self.transfer_500 is None:
            return super().create_transfer(
                destination,
                amount,
                currency=currency,
                idempotency_key=idempotency_key,
                metadata=metadata,
            )
        if self.transfer_500 == "made":
            super().create_transfer(
                destination,
                amount,
                currency=currency,
                idempotency_key=idempotency_key,
                metadata=metadata,
            )
        raise PaymentsUnsettledError("create transfer", "Internal Server Error", 500)


class World(GateWorld):
    """The gate rig on a SQLite file the CLI opens by its path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(lambda clock: SQLiteStore(path, clock=clock), Payments())
        self.lease = self.grant(10_000)

    def crash(self, at: str, *, fault: str | None = None) -> Intent:
        """A decision whose worker dies at the gate event `at` (after a 500 at `fault`)."""
        if fault is not None:
            self.model.add_fault("error_500", stage=fault)
        intent = self.decide(AMOUNT, self.lease.id)
        try:
            self.gate(gone_owner(), crash_at=at).submit(intent)
        except BaseException as e:  # the rig's Crash, a simulated SIGKILL
            assert type(e).__name__ == "Crash"
        return intent

    def posts(self) -> int:
        return self.model.requests.count(("POST", "refunds"))

    def crash_transfer(self, *, made: bool) -> Intent:
        """A transfer to a connected account whose create answered HTTP 500 (the transfer
        made, or not), its worker dead at the unknown mark."""
        account = f"acct_{uuid.uuid4().hex[:16]}"
        lease = self.store.grant_lease(
            APPROVER.sign(
                Lease(
                    f"lease_{uuid.uuid4().hex[:10]}", "transfer", account, 10_000,
                    self.clock() + 3600, "support", self.clock(), currency="usd",
                )
            )
        )  # fmt: skip
        intent = Intent(
            new_action_id(), "transfer", account, AMOUNT, lease.id,
            transfers_fingerprint([]), currency="usd",
        )  # fmt: skip

        def die_at_unknown(event: GateEventSeen) -> None:
            if event.kind == "unknown":
                raise Crash(event.kind)

        gate = Gate(
            self.store, StripeTransfer(self.payments), timing=TIMING, owner=gone_owner(),
            on_event=die_at_unknown, clock=self.clock, sleep=self.clock.sleep,
            monotonic=self.clock.monotonic, approvers=APPROVERS,
        )  # fmt: skip
        self.payments.transfer_500 = "made" if made else "nothing"
        with pytest.raises(Crash):
            gate.submit(intent)
        self.payments.transfer_500 = None
        return intent

    def transfers(self, intent: Intent) -> list[Transfer]:
        """The transfers to the intent's account that name it."""
        return [
            t
            for t in self.payments.list_transfers(intent.target)
            if t.metadata.get(ACTION_METADATA_KEY) == intent.action_id
        ]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = World(tmp_path / "store.sqlite3")
    for name in ("STRIPE_SECRET_KEY", "INTERLOCK_STORE", "INTERLOCK_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STRIPE_SECRET_KEY", TEST_KEY)
    monkeypatch.setattr(_operator, "_payments", lambda key: w.payments)
    # No terminal: a command without --yes must refuse, not wait for an answer.
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return w


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def history(world: World, action_id: str) -> list[str]:
    return [r.record for r in world.store.history(action_id)]


# -- pending ------------------------------------------------------------------------------


def test_pending_says_each_state_why_and_the_evidence(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown action (a 500, its refund made), one whose worker died while sending, and
    one that died before: each with its state, why, its claim and the journal's evidence;
    `--stripe` adds the lookup, and nothing reads as a settled action."""
    unknown = world.crash("unknown", fault="after_commit")
    sending = world.crash("before-send")
    checked = world.crash("check")
    settled = world.decide(AMOUNT, world.lease.id)
    world.gate(Owner.current("w")).submit(settled)
    # Another kind of action, journaled by its own gate, which is not looked up here.
    email = Intent("act_email", "email", "cus_1", 1, world.lease.id, "", created_at=world.clock())
    world.store.begin(email, gone_owner(), TIMING.claim_ttl_s, TIMING.grace_s)

    code, out, err = run(capsys, "pending", str(world.path), "--json", "--stripe")

    assert code == 0, err
    items = {i["action_id"]: i for i in json.loads(out)["pending"]}
    assert set(items) == {unknown.action_id, sending.action_id, checked.action_id, "act_email"}
    assert items["act_email"]["evidence"][-1]["words"].startswith("not looked up: action")
    u = items[unknown.action_id]
    assert (u["state"], u["kind"], u["amount"]) == ("unknown", "refund", AMOUNT)
    assert "HTTP 500" in u["why"] and "never resent" in u["why"]
    assert u["claim"]["sending"] is True and u["claim"]["live"] is False
    kinds = [e["kind"] for e in u["evidence"]]
    assert kinds == ["send_attempt", "unknown_mark", "lookup"]
    assert u["evidence"][0]["idempotency_key"] == unknown.action_id
    [refund] = world.agent_refunds(unknown.action_id)
    assert u["evidence"][2]["own"]["id"] == refund.id
    s = items[sending.action_id]
    assert s["state"] == "sending" and "claim ran out" in s["why"]
    assert items[checked.action_id]["state"] == "journaled"
    assert items[checked.action_id]["evidence"][-1]["own"] is None
    assert TEST_KEY not in out + err and world.payments.closed

    code, out, _ = run(capsys, "pending", str(world.path))
    assert code == 0
    assert out.startswith(f"{world.path}: 4 unsettled actions")
    assert f"idempotency key {unknown.action_id}" in out
    assert "since 2023-11-14T22:13:20Z" in out


# -- show ---------------------------------------------------------------------------------


def test_show_gives_history_receipt_and_proof(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A settled, logged action: its journal records in order, its receipt and the same
    proof `proof` gives; an unlogged one says it is not in a head yet; an unknown id fails."""
    intent = world.decide(AMOUNT, world.lease.id)
    gate = world.gate(Owner.current("w"), signing_key=SigningKey.generate())
    gate.submit(intent)
    code, out, _ = run(capsys, "show", intent.action_id, str(world.path))
    assert code == 0 and "proof: not in a signed tree head yet" in out
    gate.close()

    code, out, err = run(capsys, "show", intent.action_id, str(world.path), "--json")

    assert code == 0, err
    shown = json.loads(out)
    assert [h["record"] for h in shown["history"]] == ["intent", "claim", "sending", "outcome"]
    assert shown["state"] == "sent" and shown["receipt"]["hash"]
    code, proof_out, _ = run(capsys, "proof", intent.action_id, str(world.path), "--json")
    assert code == 0
    assert {k: v for k, v in shown["proof"].items() if k != "tree_size"} == json.loads(proof_out)
    code, _, err = run(capsys, "show", "act_nope", str(world.path))
    assert code == 1 and "action act_nope is not in the store" in err


# -- resolve ------------------------------------------------------------------------------


@pytest.mark.parametrize(("at", "fault"), [("unknown", "after_commit"), ("after-answer", None)])
def test_resolve_adopts_the_refund_the_lookup_finds_and_sends_nothing(
    world: World, capsys: pytest.CaptureFixture[str], at: str, fault: str | None
) -> None:
    """The refund of an unknown action (a 500 after it was made), or of one whose worker
    died after Stripe's answer, was made: resolve says so, then adopts it through the
    gate's recovery (no create call), its receipt naming the operator and their reason as
    a refusal's does; verify holds."""
    intent = world.crash(at, fault=fault)
    [refund] = world.agent_refunds(intent.action_id)
    posts = world.posts()
    why = "ticket 812: the customer saw it"

    code, out, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--stripe", "--by", "alice",
        "--reason", why, "--yes",
    )  # fmt: skip

    assert code == 0, err
    assert f"its own {refund.id}" in out and "settle it adopted" in out
    assert f"records why ({why})" in out
    assert f"adopted {refund.id}" in out and "operator:alice" in out
    assert world.posts() == posts
    state = world.store.action(intent.action_id)
    assert state is not None and state.settlement is not None and state.receipt is not None
    assert (state.settlement.status, state.settlement.external_id) == ("adopted", refund.id)
    body = state.receipt.body
    assert body["owner"]["worker_id"] == "operator:alice"
    assert body["operator"] == {"by": "alice", "reason": why, "command": "resolve --stripe"}
    assert body["checks"][-1]["observed"] == {"by": "alice", "reason": why}
    assert verify(world.store, world.payments).ok
    code, _, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--stripe", "--by", "a", "--yes"
    )
    assert code == 1 and "is already settled: adopted" in err


def test_resolve_adopts_the_transfer_the_lookup_finds(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transfer whose create answered 500 after it was made: resolve looks it up at the
    account (the transfer effect, in the intent's currency), adopts it with no create
    call, its receipt naming the operator; verify, reading transfers too, holds."""
    intent = world.crash_transfer(made=True)
    [transfer] = world.transfers(intent)
    state = world.store.action(intent.action_id)
    assert state is not None and state.unknown is not None
    creates = world.model.requests.count(("POST", "transfers"))
    assert creates == 1

    code, out, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--stripe", "--by", "alice",
        "--reason", "the account shows it", "--yes", "--json",
    )  # fmt: skip

    assert code == 0, err
    assert f"its own {transfer.id}" in err and "settle it adopted" in err
    assert json.loads(out)["external_id"] == transfer.id
    assert world.model.requests.count(("POST", "transfers")) == creates
    state = world.store.action(intent.action_id)
    assert state is not None and state.settlement is not None and state.receipt is not None
    assert (state.settlement.status, state.settlement.external_id) == ("adopted", transfer.id)
    assert state.receipt.body["kind"] == "transfer"
    assert state.receipt.body["operator"]["by"] == "alice"
    lease = world.store.lease(intent.lease_id)
    assert lease is not None and lease.spent == AMOUNT
    assert verify(world.store, world.payments).ok


def test_resolve_refuses_a_transfer_the_lookup_does_not_find(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transfer whose create answered 500 before anything was made: `--stripe` alone
    changes nothing; `--refused` marks it refused by the person, after the lookup at the
    account found nothing, and its approval's reservation is released."""
    intent = world.crash_transfer(made=False)
    assert world.transfers(intent) == []
    base = ["resolve", intent.action_id, str(world.path), "--stripe", "--by", "bob", "--yes"]
    code, _, err = run(capsys, *base)
    assert code == 1 and "no send naming it at Stripe" in err

    code, out, err = run(capsys, *base, "--refused", "--reason", "no transfer at Stripe")

    assert code == 0, err
    assert "lookup: no send naming it at Stripe" in out and "mark it refused by bob" in out
    state = world.store.action(intent.action_id)
    assert state is not None and state.settlement is not None and state.receipt is not None
    assert (state.settlement.status, state.settlement.code) == ("refused", CODE_REFUSED_BY_PERSON)
    assert state.receipt.body["checks"][-1]["observed"] == "none"
    lease = world.store.lease(intent.lease_id)
    assert lease is not None and dict(lease.reservations) == {} and lease.spent == 0
    assert world.transfers(intent) == [] and verify(world.store, world.payments).ok


def test_resolve_finding_nothing_changes_nothing(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 500 before anything was made: the lookup finds nothing, so nothing is adopted,
    refused or sent, and the journal is as it was."""
    intent = world.crash("unknown", fault="before_execution")
    before, posts = history(world, intent.action_id), world.posts()

    code, _, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--stripe", "--by", "al", "--yes"
    )

    assert code == 1 and "no send naming it at Stripe" in err and "--refused" in err
    assert history(world, intent.action_id) == before and world.posts() == posts


def test_resolve_refused_records_the_person_and_releases_the_reservation(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A person marks an unknown action refused: its receipt names them and their reason,
    the approval's reservation is released, verify (with Stripe) holds; the JSON has no key."""
    intent = world.crash("unknown", fault="before_execution")

    code, out, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--stripe", "--refused",
        "--by", "bob", "--reason", "checked the dashboard: no refund", "--yes", "--json",
    )  # fmt: skip

    assert code == 0, err
    assert json.loads(out)["status"] == "refused" and "will mark it refused by bob" in err
    state = world.store.action(intent.action_id)
    assert state is not None and state.settlement is not None and state.receipt is not None
    assert state.settlement.code == CODE_REFUSED_BY_PERSON
    body = state.receipt.body
    assert body["operator"] == {
        "by": "bob",
        "reason": "checked the dashboard: no refund",
        "command": "resolve --refused",
    }
    assert body["outcome"] == "refused"
    lease = world.store.lease(world.lease.id)
    assert lease is not None and dict(lease.reservations) == {} and lease.spent == 0
    assert verify(world.store, world.payments).ok and TEST_KEY not in out + err


def test_resolve_refused_is_refused_when_the_refund_exists(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Evidence wins: a refusal of an action whose refund Stripe shows is not written."""
    intent = world.crash("unknown", fault="after_commit")
    before = history(world, intent.action_id)

    code, _, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--stripe", "--refused",
        "--by", "bob", "--reason", "x", "--yes",
    )  # fmt: skip

    assert code == 1 and "so it was made: adopt it" in err
    assert history(world, intent.action_id) == before


def test_resolve_refuses_what_it_cannot_resolve(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown id, an action never sent, missing flags, no terminal without --yes: each an
    error in words, and the store is as it was."""
    # Journaled with a claim, never marked `sending`: what a recovery's worker leaves when
    # it dies before sending.
    never_sent = world.decide(AMOUNT, world.lease.id)
    world.store.begin(never_sent, gone_owner(), TIMING.claim_ttl_s, TIMING.grace_s)
    unknown = world.crash("unknown", fault="before_execution")
    before = history(world, unknown.action_id)
    base = ["resolve", "--store", str(world.path), "--by", "al"]

    cases = [
        (["act_missing", "--stripe", "--yes"], 1, "action act_missing is not in the store"),
        ([never_sent.action_id, "--stripe", "--yes"], 1, "is not unknown and was never sent"),
        ([unknown.action_id, "--yes"], 2, "give --stripe"),
        ([unknown.action_id, "--refused", "--yes"], 2, "--refused needs --reason"),
        ([unknown.action_id, "--refused", "--reason", "r"], 2, "stdin is not a terminal"),
    ]
    for extra, want, words in cases:
        code, _, err = run(capsys, *base[:1], *extra, *base[1:])
        assert (code, words in err) == (want, True), (extra, err)
    assert history(world, unknown.action_id) == before
    assert world.store.action(never_sent.action_id).settlement is None  # type: ignore[union-attr]


def test_the_lookup_only_effect_never_sends(world: World) -> None:
    """The effect resolve hands the gate reads and refuses to send."""
    effect = _operator.LookupOnly(_operator.StripeRefund(world.payments))
    intent = world.decide(AMOUNT, world.lease.id)
    with pytest.raises(ActionError, match="never sends"):
        effect.send(intent, intent.action_id)
    assert world.posts() == 0 and effect.kind == "refund"


def test_the_store_takes_a_person_s_refusal_of_an_unknown_action_only(world: World) -> None:
    """An unknown action refuses every refusal but a person's (its own code)."""
    intent = world.crash("unknown", fault="before_execution")
    store, owner = world.store, Owner.current("op")
    world.clock.now += 3600
    epoch = store.take_claim(intent.action_id, owner, TIMING.claim_ttl_s, TIMING.grace_s).epoch
    with pytest.raises(ActionError, match="is unknown"):
        store.settle(intent.action_id, epoch, owner, Settlement("refused", "x"), [], {}, None)
    refusal = Settlement("refused", "x", code=CODE_REFUSED_BY_PERSON)
    assert store.settle(intent.action_id, epoch, owner, refusal, [], {}, None) is not None


# -- revoke, keys -------------------------------------------------------------------------


def test_revoke_says_what_it_revokes_then_revokes(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Revoke names the approval and what it would stop, writes nothing unconfirmed, then
    records who revoked it; again, it says it is already revoked."""
    lid = world.lease.id
    code, out, err = run(capsys, "revoke", lid, str(world.path), "--by", "carol")
    assert code == 2 and "stdin is not a terminal" in err and f"approval {lid}" in out
    assert not world.store.lease(lid).revoked  # type: ignore[union-attr]

    code, out, err = run(capsys, "revoke", lid, str(world.path), "--by", "carol", "--yes", "--json")

    assert code == 0, err
    assert json.loads(out)["revoked_by"] == "carol"
    lease = world.store.lease(lid)
    assert lease is not None and lease.revoked and lease.revoked_by == "carol"
    code, out, _ = run(capsys, "revoke", lid, str(world.path), "--by", "dave", "--yes")
    assert code == 0 and "already revoked by carol" in out
    code, _, err = run(capsys, "revoke", "lease_none", str(world.path), "--by", "d", "--yes")
    assert code == 1 and "approval lease_none is not in the store" in err


def _signing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SigningKey, KeyList]:
    """The gate's key in INTERLOCK_SIGNING_KEY, as an operator runs the commands, and the
    key list that checks it."""
    key = SigningKey.generate()
    key.save(tmp_path / "signing-key.pem")
    monkeypatch.setenv("INTERLOCK_SIGNING_KEY", str(tmp_path / "signing-key.pem"))
    trusted = KeyList()
    trusted.add(key.public)
    return key, trusted


def _store_writer(path: Path, sql: str, *args: object) -> None:
    """One write straight into the store's file, as a store writer (not a gate) makes it."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, args)
    conn.close()


def _edit_lease(path: Path, lease_id: str, **changes: object) -> None:
    conn = sqlite3.connect(path)
    (text,) = conn.execute("SELECT lease FROM leases WHERE lease_id=?", (lease_id,)).fetchone()
    conn.close()
    data = {**json.loads(text), **changes}
    _store_writer(path, "UPDATE leases SET lease=? WHERE lease_id=?", json.dumps(data), lease_id)


def test_revoke_writes_a_signed_receipt_that_verify_holds_the_approval_to(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Revoke writes a receipt of its own, signed with the gate's key and in the receipt
    log: who revoked which approval, when and why. Verify checks it against the approval's
    row: a revocation undone or rewritten by a store writer, or its receipt deleted, is
    named."""
    key, trusted = _signing(tmp_path, monkeypatch)
    lid, why = world.lease.id, "the agent refunds a customer twice"

    code, out, err = run(
        capsys, "revoke", lid, str(world.path), "--by", "carol", "--reason", why, "--yes", "--json"
    )

    assert code == 0, err
    assert f"signed with key {key.key_id}" in err and f"({why})" in err
    lease = world.store.lease(lid)
    assert lease is not None and lease.revocation_receipt is not None
    receipt = world.store.receipt(lease.revocation_receipt)
    assert receipt is not None and json.loads(out)["receipt"] == receipt.hash
    body = receipt.body
    assert (body["record"], body["lease_id"], body["revoked_by"], body["reason"]) == (
        "revocation", lid, "carol", why,
    )  # fmt: skip
    assert body["at"] == lease.revoked_at and body["key_id"] == key.key_id
    assert body["owner"]["worker_id"] == "operator:carol"
    assert body["operator"] == {"by": "carol", "reason": why, "command": "revoke"}
    checked = verify(world.store, keys=trusted)
    assert checked.ok, checked.problems
    assert (checked.chain_length, checked.log_size, checked.formats) == (1, 1, {"ed25519": 1})
    stranger = KeyList()
    stranger.add(SigningKey.generate().public)
    assert not verify(world.store, keys=stranger).ok

    _edit_lease(world.path, lid, revoked_at=None, revoked_by=None)
    [undone] = verify(world.store, keys=trusted).problems
    assert f"receipt {receipt.seq} (revocation of {lid}): records approval {lid}" in undone
    assert "its revocation was undone" in undone
    _edit_lease(world.path, lid, revoked_at=lease.revoked_at, revoked_by="mallory")
    [rewritten] = verify(world.store, keys=trusted).problems
    assert "the store records it revoked by mallory" in rewritten
    _edit_lease(world.path, lid, revoked_by="carol")
    assert verify(world.store, keys=trusted).ok
    _store_writer(world.path, "DELETE FROM receipts WHERE seq=?", receipt.seq)
    gone = verify(world.store, keys=trusted).problems
    assert (
        f"approval {lid}: revoked, but its revocation's receipt {receipt.seq} is gone" in (gone[-1])
    )


def test_show_points_at_the_revocation_of_its_approval(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """An action whose approval `revoke` revoked shows who revoked it, when, and the
    revocation's receipt; one revoked through the library (as every older store has it)
    says it has none, and the store verifies as before."""
    intent = world.decide(AMOUNT, world.lease.id)
    world.gate(Owner.current("w")).submit(intent)
    other = world.grant(10_000)
    older = world.decide(AMOUNT, other.id)
    world.gate(Owner.current("w")).submit(older)
    world.store.revoke_lease(other.id, "support")
    code, _, err = run(capsys, "revoke", world.lease.id, str(world.path), "--by", "carol", "--yes")
    assert code == 0, err
    lease = world.store.lease(world.lease.id)
    assert lease is not None and lease.revocation_receipt is not None
    receipt = world.store.receipt(lease.revocation_receipt)
    assert receipt is not None

    code, out, err = run(capsys, "show", intent.action_id, str(world.path))

    assert code == 0, err
    assert f"approval {world.lease.id} revoked by carol at " in out
    assert f"receipt {receipt.seq} (hash {receipt.hash})" in out
    code, out, _ = run(capsys, "show", intent.action_id, str(world.path), "--json")
    approval = json.loads(out)["approval"]
    assert (
        approval["revoked_by"] == "carol" and approval["revocation_receipt"]["seq"] == receipt.seq
    )
    code, out, _ = run(capsys, "show", older.action_id, str(world.path))
    assert code == 0 and f"approval {other.id} revoked by support at " in out
    assert "no receipt (revoked through the library" in out
    assert verify(world.store, world.payments).ok


@pytest.mark.parametrize(
    ("prefix", "words"), [("sk_live_", "secret key"), ("rk_live_", "restricted key")]
)
@pytest.mark.parametrize(
    "argv",
    [
        ["pending"],
        ["show", "act_x"],
        ["resolve", "act_x", "--stripe", "--by", "a", "--yes"],
        ["revoke", "lease_x", "--by", "a", "--yes"],
    ],
)
def test_every_operator_command_refuses_a_live_key(
    world: World,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    words: str,
    argv: list[str],
) -> None:
    """A live key in the environment stops every command before it reads anything, and the
    key is not printed."""
    secret = prefix + "abcdefghijklmnop"
    monkeypatch.setenv("STRIPE_SECRET_KEY", secret)
    opened: list[Any] = []
    monkeypatch.setattr(_operator, "_open", lambda *a, **k: opened.append(a))

    code, out, err = run(capsys, *argv, "--store", str(world.path))

    assert code == 2 and f"it is a live {words}" in err and "only with test keys" in err
    assert secret not in out + err and opened == []


def test_resolve_waits_out_a_claim_that_may_cover_a_send_in_flight(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker died at the unknown mark moments ago: its `sending` claim still runs, so a
    person's refusal is not written before its expiry plus the grace, and says until when."""
    world.clock.now = time.time()
    world.lease = world.grant(10_000)
    intent = world.crash("unknown", fault="before_execution")
    before = history(world, intent.action_id)

    code, out, err = run(
        capsys, "resolve", intent.action_id, str(world.path), "--refused",
        "--by", "bob", "--reason", "x", "--yes",
    )  # fmt: skip

    assert code == 1 and "is claimed by crashed-" in err and "sending: a send may" in err
    assert out == "" and history(world, intent.action_id) == before


class Terminal(io.StringIO):
    """A terminal on stdin that answers with the given line."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_is_asked_and_only_a_yes_writes(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a terminal the plan is followed by a question: anything but yes writes nothing."""
    lid = world.lease.id
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    code, out, err = run(capsys, "revoke", lid, str(world.path), "--by", "carol")
    assert code == 1 and "Go ahead? [y/N]" in out and "declined; nothing was changed" in err
    assert not world.store.lease(lid).revoked  # type: ignore[union-attr]

    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))
    code, out, _ = run(capsys, "revoke", lid, str(world.path), "--by", "carol")
    assert code == 0 and f"approval {lid}: revoked by carol" in out
    assert world.store.lease(lid).revoked  # type: ignore[union-attr]

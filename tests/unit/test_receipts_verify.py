"""Receipts and `verify()`: the hash chain, signatures, Stripe's cross-check and the command.

Receipts come from real gate runs over the in-memory payments model, or are recorded
straight into a store where a test needs an outcome the world does not back. Tampering
is done on the stored rows (or on copies of the receipts), never through the library.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sqlite3
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import (
    ACTION_METADATA_KEY,
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    MemoryStore,
    Owner,
    Receipt,
    Settlement,
    SQLiteStore,
    Store,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._core.receipts import (
    GENESIS_HASH,
    canonical_json,
    chain_problems,
    load_json,
    seal,
    sign,
)
from interlock.testing import InProcessPayments

ROOT = Path(__file__).resolve().parents[2]
OWNER = Owner("test-worker", os.getpid(), 0.0, "test-host")
KEY = b"receipt-key-for-tests"

# Every field a receipt body carries; each is inside the hashed text.
RECEIPT_FIELDS = {
    "action_id",
    "kind",
    "target",
    "amount",
    "currency",
    "lease_id",
    "decision_fingerprint",
    "outcome",
    "reason",
    "code",
    "external_id",
    "checks",
    "owner",
    "attempt",
    "epoch",
    "at",
    "context",
    "unsettled_answers",
    "emulated",
    "idempotency_key",
    "v",
    "seq",
    "prev_hash",
    "signed",
}


@dataclass
class World:
    """In-memory payments, a store and a gate over them."""

    payments: InProcessPayments
    store: Store
    gate: Gate

    def decide(self, amount: int = 2000, payment_intent: str | None = None) -> Intent:
        """A payment (new unless given), an approval for `amount`, and a decision on it."""
        if payment_intent is None:
            payment_intent = self.payments.create_payment(5000).id
        lease_id = f"lease-{uuid.uuid4().hex[:8]}"
        now = time.time()
        self.store.grant_lease(
            Lease(lease_id, "refund", payment_intent, amount, now + 3600, "test", now)
        )
        return Intent(
            action_id=new_action_id(),
            kind="refund",
            target=payment_intent,
            amount=amount,
            lease_id=lease_id,
            fingerprint=refunds_fingerprint(self.payments.list_refunds(payment_intent)),
        )

    def record(self, intent: Intent, settlement: Settlement) -> Receipt:
        """Journal `intent` and record `settlement` for it without sending anything."""
        attempt = self.store.begin(intent, OWNER, 60.0, 2.0)
        assert attempt.status == "taken"
        receipt = self.store.settle(
            intent.action_id, attempt.epoch, OWNER, settlement, [], {}, self.gate._key
        )
        assert receipt is not None
        return receipt


def _world(store: Store, signing_key: bytes | None = None) -> World:
    payments = InProcessPayments()
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        signing_key=signing_key,
        approvers=UNSIGNED_APPROVALS,
    )
    return World(payments, store, gate)


@pytest.fixture
def world() -> World:
    """A world over a MemoryStore with unsigned receipts."""
    return _world(MemoryStore())


def _problems(receipts: list[Receipt], key: bytes | None = None) -> list[str]:
    """The chain's problems alone (what `verify()` reports of the chain)."""
    return chain_problems(receipts, key)


def _three_sends(world: World) -> list[Receipt]:
    for _ in range(3):
        assert world.gate.submit(world.decide()).status == "sent"
    return list(world.store.receipts())


def _edit_body(receipt: Receipt, field: str, value: object) -> Receipt:
    body = receipt.body
    body[field] = value
    return replace(receipt, body_text=canonical_json(body))


def _rehash(receipt: Receipt) -> Receipt:
    return replace(receipt, hash=hashlib.sha256(receipt.body_text.encode()).hexdigest())


def _store_with_receipts(path: Path, signing_key: bytes | None = None) -> list[Receipt]:
    world = _world(SQLiteStore(path), signing_key=signing_key)
    receipts = _three_sends(world)
    world.store.close()
    return receipts


# -- the chain ---------------------------------------------------------------------------


def test_each_receipt_is_hashed_canonical_json_linked_to_the_one_before(world: World) -> None:
    """Receipts are canonical JSON, hashed with SHA-256, each naming the previous hash."""
    receipts = _three_sends(world)

    prev = GENESIS_HASH
    for seq, r in enumerate(receipts, start=1):
        body = json.loads(r.body_text)
        assert r.body_text == canonical_json(body)
        assert r.hash == hashlib.sha256(r.body_text.encode()).hexdigest()
        assert (r.seq, body["seq"]) == (seq, seq)
        assert r.prev_hash == body["prev_hash"] == prev
        assert body["action_id"] == r.action_id
        assert (body["signed"], r.signature) == (False, None)
        prev = r.hash
    result = verify(world.store)
    assert (result.ok, result.chain_length, result.signed) == (True, 3, False)


def test_canonical_body_covers_every_field(world: World) -> None:
    """Every field of a receipt is in its hashed body: changing any one breaks the chain."""
    receipts = _three_sends(world)
    first, second = receipts[0], receipts[1]
    assert set(first.body) == RECEIPT_FIELDS
    assert set(first.checks[0]) == {"name", "expected", "observed", "passed"}
    assert [c["name"] for c in first.checks] == [
        "lookup",
        "world_unchanged",
        "approval_signature",
        "approval",
        "claim",
    ]

    for field in sorted(RECEIPT_FIELDS):
        edited = _edit_body(first, field, {"edited": field})
        problems = _problems([edited, *receipts[1:]])
        assert any("does not match its hash" in p for p in problems), field
        # Even with its hash recomputed, the next receipt no longer follows it.
        problems = _problems([_rehash(edited), *receipts[1:]])
        assert any(p.startswith(f"receipt 2 ({second.action_id})") for p in problems), field


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("seq", 7, "out of order or a gap"),
        ("action_id", "act_someone_else", "action column does not match its body"),
        ("prev_hash", "f" * 64, "does not follow the receipt before it"),
        ("hash", "e" * 64, "does not match its hash"),
        ("signature", "ab" * 32, "says unsigned but carries a signature"),
    ],
)
def test_each_stored_column_is_checked_against_the_body(
    world: World, column: str, value: object, expected: str
) -> None:
    """A stored column that disagrees with the hashed body is reported."""
    receipts = _three_sends(world)
    edited = replace(receipts[1], **{column: value})

    problems = _problems([receipts[0], edited, receipts[2]])

    assert any(expected in p for p in problems), problems


def test_reordered_receipts_are_reported(world: World) -> None:
    """Two receipts swapped in the chain are reported as out of order."""
    a, b, c = _three_sends(world)

    problems = _problems([a, c, b])

    assert any("receipt 3" in p and "out of order" in p for p in problems), problems
    assert any("does not follow" in p for p in problems), problems


def test_a_receipt_dropped_from_the_middle_is_a_gap(world: World) -> None:
    """A receipt removed from the middle leaves a gap that is reported."""
    a, _, c = _three_sends(world)

    problems = _problems([a, c])

    assert problems == [
        f"receipt 3 ({c.action_id}): out of order or a gap: expected receipt 2 here",
        f"receipt 3 ({c.action_id}): does not follow the receipt before it (reordered or dropped)",
    ]


def test_a_truncated_tail_still_verifies(world: World) -> None:
    """The stated limit: dropped newest receipts go unseen unless the head is kept elsewhere."""
    receipts = _three_sends(world)

    assert _problems(receipts[:2]) == []


def test_reordering_rows_on_disk_is_reported(tmp_path: Path) -> None:
    """Swapping two stored receipts' bodies in the SQLite file is caught when reopened."""
    path = tmp_path / "journal.sqlite3"
    world = _world(SQLiteStore(path))
    _three_sends(world)
    world.store.close()
    conn = sqlite3.connect(path)
    with conn:
        rows = conn.execute("SELECT seq, body, hash FROM receipts WHERE seq IN (1, 2)").fetchall()
        for (seq, _, _), (_, body, digest) in zip(rows, reversed(rows), strict=True):
            conn.execute("UPDATE receipts SET body=?, hash=? WHERE seq=?", (body, digest, seq))
    conn.close()

    store = SQLiteStore(path)
    result = verify(store)
    store.close()

    assert not result.ok
    assert any("out of order" in p for p in result.problems), result.problems


# -- signatures --------------------------------------------------------------------------


def test_signed_receipts_verify_with_the_key_only() -> None:
    """Receipts signed with a key verify with it, and are reported with another key or none."""
    world = _world(MemoryStore(), signing_key=KEY)
    receipts = _three_sends(world)
    assert all(r.signed and r.signature == sign(KEY, r.hash) for r in receipts)

    good = verify(world.store, signing_key=KEY)
    assert (good.ok, good.signed) == (True, True)
    wrong = verify(world.store, signing_key=b"another key")
    assert [p.split(": ", 1)[1] for p in wrong.problems] == ["bad signature"] * 3
    keyless = verify(world.store)
    assert len(keyless.problems) == 3
    assert all("signed, but no INTERLOCK_RECEIPT_KEY" in p for p in keyless.problems)


def test_receipt_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """With INTERLOCK_RECEIPT_KEY set, the gate signs and verify() checks with it by default."""
    monkeypatch.setenv("INTERLOCK_RECEIPT_KEY", KEY.decode())
    world = _world(MemoryStore())
    receipts = _three_sends(world)

    assert all(r.signature == sign(KEY, r.hash) for r in receipts)
    result = verify(world.store)
    assert (result.ok, result.signed) == (True, True)
    monkeypatch.setenv("INTERLOCK_RECEIPT_KEY", "not the key")
    assert not verify(world.store).ok


def test_rehashing_an_edited_signed_chain_without_the_key_is_caught() -> None:
    """An edit re-chained with fresh hashes still fails: the signatures need the key."""
    world = _world(MemoryStore(), signing_key=KEY)
    receipts = _three_sends(world)
    forged: list[Receipt] = []
    prev = GENESIS_HASH
    for r in receipts:
        body = r.body
        if r.seq == 1:
            body["amount"] = 999_999
        fields = {k: v for k, v in body.items() if k not in ("v", "seq", "prev_hash", "signed")}
        text, digest, _ = seal(r.seq, prev, fields, KEY)
        forged.append(replace(r, body_text=text, prev_hash=prev, hash=digest))
        prev = digest

    problems = _problems(forged, KEY)

    assert problems == [f"receipt {r.seq} ({r.action_id}): bad signature" for r in forged]


def test_a_chain_resealed_unsigned_is_a_downgrade_with_the_key() -> None:
    """An edit re-chained without signatures from there on fails `verify()` given the key."""
    world = _world(MemoryStore(), signing_key=KEY)
    receipts = _three_sends(world)
    resealed: list[Receipt] = [receipts[0]]
    prev = receipts[0].hash
    for r in receipts[1:]:
        body = r.body
        body["amount"] = 999_999
        fields = {k: v for k, v in body.items() if k not in ("v", "seq", "prev_hash", "signed")}
        text, digest, _ = seal(r.seq, prev, fields, None)
        resealed.append(replace(r, body_text=text, prev_hash=prev, hash=digest, signature=None))
        prev = digest

    assert verify(world.store, signing_key=KEY).ok
    world.store._receipts[:] = resealed  # type: ignore[attr-defined]

    result = verify(world.store, signing_key=KEY)

    assert result.signed is False and not result.ok
    assert [p for p in result.problems if "downgrade" in p] == [
        f"receipt {r.seq} ({r.action_id}): unsigned, but receipts are signed with "
        "INTERLOCK_RECEIPT_KEY: a downgrade (re-sealed without the key)"
        for r in resealed[1:]
    ]


# -- Stripe against the receipts ---------------------------------------------------------


def test_receipts_backed_by_stripe_verify(world: World) -> None:
    """A sent and an adopted refund, both at Stripe as their receipts say: no problems."""
    sent = world.gate.submit(world.decide())
    intent = world.decide()
    world.payments.create_refund(
        intent.target,
        intent.amount,
        idempotency_key=intent.action_id,
        metadata={ACTION_METADATA_KEY: intent.action_id},
    )
    adopted = world.gate.submit(intent)
    assert (sent.status, adopted.status) == ("sent", "adopted")

    result = verify(world.store, world.payments)

    assert result.ok, result.problems
    assert (result.chain_length, result.checked_refunds) == (2, 2)


def test_a_sent_receipt_whose_refund_is_missing_at_stripe(world: World) -> None:
    """A `sent` receipt naming a refund Stripe does not have is reported."""
    intent = world.decide()
    world.record(intent, Settlement("sent", None, "re_never_made", intent.amount))

    result = verify(world.store, world.payments)

    assert result.problems == [
        f"receipt 1 ({intent.action_id}, sent): names refund re_never_made, "
        "which Stripe does not have"
    ]


def test_a_refund_at_stripe_for_an_action_whose_receipt_refused(world: World) -> None:
    """A refund naming an action whose receipt says `refused` is a send the receipts hide."""
    intent = world.decide()
    refund = world.payments.create_refund(
        intent.target, intent.amount, metadata={ACTION_METADATA_KEY: intent.action_id}
    )
    world.record(intent, Settlement("refused", "the payment's refunds changed"))

    result = verify(world.store, world.payments)

    assert len(result.problems) == 1
    problem = result.problems[0]
    assert problem.startswith(f"refund {refund.id} ({intent.amount}) at Stripe names action")
    assert "records refused (the payment's refunds changed)" in problem
    assert problem.endswith("a send the receipts do not show")


def test_a_receipt_naming_someone_elses_refund(world: World) -> None:
    """A receipt naming a refund that is not this action's (amount, metadata) is reported."""
    intent = world.decide()
    hand = world.payments.create_refund(intent.target, 500)
    world.record(intent, Settlement("adopted", None, hand.id, hand.amount))

    problems = verify(world.store, world.payments).problems

    assert len(problems) == 2, problems
    assert f"Stripe's refund {hand.id} is 500, the receipt says {intent.amount}" in problems[0]
    assert "does not name this action in its metadata" in problems[1]


def test_a_sent_refund_that_later_failed_is_reported(world: World) -> None:
    """A refund Stripe later marked failed no longer backs its `sent` receipt."""
    outcome = world.gate.submit(world.decide())
    assert outcome.external_id is not None
    world.payments.model.set_refund_status(outcome.external_id, "failed")

    problems = verify(world.store, world.payments).problems

    assert problems == [
        f"receipt 1 ({outcome.action_id}, sent): Stripe's refund {outcome.external_id} is failed"
    ]


def test_cross_check_is_scoped_to_the_given_actions(world: World) -> None:
    """`actions=` limits the Stripe cross-check to those actions; the chain is always checked."""
    good = world.gate.submit(world.decide())
    bad = world.decide()
    world.record(bad, Settlement("sent", None, "re_never_made", bad.amount))

    assert len(verify(world.store, world.payments).problems) == 1
    scoped = verify(world.store, world.payments, actions=[good.action_id])
    assert scoped.ok and scoped.chain_length == 2 and scoped.checked_refunds == 1
    only_bad = verify(world.store, world.payments, actions=[bad.action_id])
    assert len(only_bad.problems) == 1 and "re_never_made" in only_bad.problems[0]
    unknown = verify(world.store, world.payments, actions=["act_unknown"])
    assert unknown.problems == ["action act_unknown: not in the store"]


def test_a_refund_for_an_action_without_receipt_is_reported_in_scope(world: World) -> None:
    """A refund naming a journaled action that has no receipt yet is reported when in scope."""
    intent = world.decide()
    assert world.store.begin(intent, OWNER, time.time(), 60.0).status == "taken"
    refund = world.payments.create_refund(
        intent.target, intent.amount, metadata={ACTION_METADATA_KEY: intent.action_id}
    )

    problems = verify(world.store, world.payments, actions=[intent.action_id]).problems

    assert problems == [
        f"refund {refund.id} ({intent.amount}) at Stripe names action {intent.action_id}, "
        "which has no receipt: a send the receipts do not show"
    ]


def test_unreadable_payment_is_a_problem_not_a_crash(world: World) -> None:
    """A payment Stripe cannot read is reported as a problem of the check."""
    intent = replace(world.decide(), target="pi_unknown")
    world.record(intent, Settlement("refused", "could not read the payment"))

    problems = verify(world.store, world.payments).problems

    assert len(problems) == 1 and problems[0].startswith("could not read the refunds of pi_unknown")


# -- python -m interlock verify ----------------------------------------------------------


# -- the whole store, read-only ----------------------------------------------------------


def test_a_deleted_last_receipt_of_a_settled_action_is_a_problem(tmp_path: Path) -> None:
    """A cut tail passes the chain alone, but the journal still records the outcome it lost."""
    path = tmp_path / "journal.sqlite3"
    receipts = _store_with_receipts(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM receipts WHERE seq=3")
    conn.close()

    store = SQLiteStore.open_read_only(path)
    result = verify(store)
    store.close()

    assert not result.ok and result.chain_length == 2
    assert result.problems == [
        f"action {receipts[2].action_id}: settled sent, but its receipt 3 is gone "
        "(deleted, or the chain's tail was cut)"
    ]


@pytest.mark.parametrize("body", ["[1, 2]", "5", "null", "{not json"])
def test_a_receipt_body_that_is_not_a_json_object_is_a_problem_not_a_crash(
    tmp_path: Path, body: str
) -> None:
    """A body that parses to a list, a number or nothing is reported, and verify goes on."""
    path = tmp_path / "journal.sqlite3"
    receipts = _store_with_receipts(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE receipts SET body=? WHERE seq=2", (body,))
    conn.close()

    store = SQLiteStore.open_read_only(path)
    result = verify(store)
    store.close()

    where = f"receipt 2 ({receipts[1].action_id})"
    assert f"{where}: its body is not a JSON object" in result.problems
    assert f"{where}: its body does not match its hash (edited)" in result.problems


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    text=st.one_of(
        JSON_VALUES.map(canonical_json),
        JSON_VALUES.map(lambda v: f" {json.dumps(v, indent=1)}\n"),
        st.text(max_size=20),
    )
)
def test_load_json_reads_exactly_what_json_loads_reads(text: str) -> None:
    """The faster reader of stored JSON gives json.loads's value, or its error, for any
    text: canonical, spaced around, or not JSON at all."""
    try:
        expected: object = json.loads(text)
    except ValueError as e:
        with pytest.raises(ValueError) as raised:
            load_json(text)
        assert str(raised.value) == str(e)
        return
    got = load_json(text)
    # NaN is not equal to itself: compare the texts the two values write.
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


# -- a stored value edited by hand --------------------------------------------------------

# What a hand edit can leave in a column verify reads: text that is not JSON, JSON of the
# wrong shape, a number where text belongs, a JSON number no int can hold.
EDITS = ["{oops", "[]", "x", '{"a":1}', 3.5, "1e999"]
# JSON nested past any parser's recursion limit, and a 50 MB value: each an ordinary
# unreadable value, never a RecursionError or a stall. The 50 MB value's cases take seconds
# each: they run in the scale tier (tests/scale/test_verify_huge_values.py).
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = '"' + "a" * 50_000_000 + '"'
EDITS += [DEEP]


def _edit_id(value: object) -> str:
    """A short test id for an edited value (the long ones by their shape)."""
    return (
        {DEEP: "deep", HUGE: "50MB"}.get(value, repr(value))
        if isinstance(value, str)
        else repr(value)
    )


# Each column verify depends on, on the rows of the second of three signed sends:
# (table, column, which rows). A `sending` journal record is not required by the store's
# rules (a lost one is not seen), and the journal's `at`, the actions' `kind` and
# `created_at` (copies of the intent's, kept for the indexes) are not checked: left out.
EDITED_COLUMNS = [
    *(("actions", c, "action_id=:action") for c in
      ("intent", "claim", "settlement", "attempts", "receipt_seq", "unknown")),
    *(("journal", c, f"action_id=:action AND record='{r}'") for c in ("action_id", "record",
      "data") for r in ("intent", "claim", "outcome")),
    *(("leases", c, "lease_id=:lease") for c in ("lease", "lease_id")),
    *(("receipts", c, "seq=2") for c in ("action_id", "body", "prev_hash", "hash", "signature")),
]  # fmt: skip


Sends = tuple[Path, InProcessPayments, Intent]


@pytest.fixture(scope="module")
def signed_sends(tmp_path_factory: pytest.TempPathFactory) -> Sends:
    """A signed store of three sends on one payment, its payments, and the second intent."""
    path = tmp_path_factory.mktemp("signed") / "journal.sqlite3"
    payments, intents = _sends_on_one_payment(path, 3)
    store = SQLiteStore.open_read_only(path)
    assert verify(store, payments, signing_key=KEY, account_wide=True).ok
    store.close()
    return path, payments, intents[1]


@pytest.mark.parametrize("value", EDITS, ids=_edit_id)
@pytest.mark.parametrize(("table", "column", "where"), EDITED_COLUMNS)
def test_any_edited_value_is_a_problem_never_a_crash(
    signed_sends: Sends,
    tmp_path: Path,
    table: str,
    column: str,
    where: str,
    value: object,
) -> None:
    """Whatever a hand edit leaves in a column verify reads, verify (with Stripe, account
    wide) reports a problem naming the action or approval edited, and goes on."""
    check_edited_value(signed_sends, tmp_path, table, column, where, value)


def check_edited_value(
    signed_sends: Sends, tmp_path: Path, table: str, column: str, where: str, value: object
) -> None:
    """`value` written into `column` of the signed sends' second action (`where`) is a
    problem verify names, never a crash (shared with the scale tier's 50 MB cases)."""
    original, payments, intent = signed_sends
    path = tmp_path / "journal.sqlite3"
    shutil.copyfile(original, path)
    conn = sqlite3.connect(path)
    with conn:
        edited = conn.execute(
            f"UPDATE {table} SET {column}=:value WHERE {where}",
            {"value": value, "action": intent.action_id, "lease": intent.lease_id},
        ).rowcount
    conn.close()
    assert edited >= 1

    store = SQLiteStore.open_read_only(path)
    try:
        result = verify(store, payments, signing_key=KEY, account_wide=True)
    finally:
        store.close()

    assert not result.ok
    named = (intent.action_id, intent.lease_id, "receipt 2 ")
    assert any(n in p for p in result.problems for n in named), result.problems


@pytest.mark.parametrize("value", [DEEP, "{oops"], ids=_edit_id)
@pytest.mark.parametrize("column", ["intent", "claim"])
def test_recovery_reports_an_unreadable_pending_row_and_goes_on(
    tmp_path: Path, column: str, value: str
) -> None:
    """A pending action whose stored intent or claim cannot be read (nested too deeply,
    or not JSON) is reported pending by every `recover()`, and the others are recovered:
    it never stops recovery with a store error or a RecursionError."""
    path = tmp_path / "journal.sqlite3"
    world = _world(SQLiteStore(path), signing_key=KEY)
    damaged, other = world.decide(), world.decide()
    # Journaled and claimed by a worker that died before sending (a pid past pid_max).
    dead = Owner("dead", 2**22 + 1, time.time(), socket.gethostname())
    for intent in (damaged, other):
        world.store.begin(intent, dead, 6, 2)
    world.store.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"UPDATE actions SET {column}=? WHERE action_id=?", (value, damaged.action_id))
    conn.close()

    runs = []
    for _ in range(2):
        store = SQLiteStore(path)
        gate = Gate(store, StripeRefund(world.payments), timing=world.gate.timing,
                    signing_key=KEY,
                    approvers=UNSIGNED_APPROVALS)  # fmt: skip
        runs.append({o.action_id: o for o in gate.recover()})
        store.close()
    for outcomes in runs:
        assert outcomes[damaged.action_id].status == "pending"
        assert str(outcomes[damaged.action_id].reason).startswith("recovery failed: ")
    assert runs[0][other.action_id].status == "sent"


# -- what the store no longer has ------------------------------------------------------


def _sends_on_one_payment(path: Path, n: int) -> tuple[InProcessPayments, list[Intent]]:
    """`n` refunds of $20 on one payment through a SQLite store, under a signing key."""
    world = _world(SQLiteStore(path), signing_key=KEY)
    pi = world.payments.create_payment(10_000).id
    intents = []
    for _ in range(n):
        intent = world.decide(payment_intent=pi)
        assert world.gate.submit(intent).status == "sent"
        intents.append(intent)
    world.store.close()
    return world.payments, intents


def _delete_action(path: Path, action_id: str) -> None:
    """Every row of one action gone, as a person with the file could do."""
    conn = sqlite3.connect(path)
    with conn:
        for table in ("actions", "journal", "action_metadata", "receipts"):
            conn.execute(f"DELETE FROM {table} WHERE action_id=?", (action_id,))
    conn.close()


def test_an_action_deleted_whole_is_seen_through_its_refund_at_stripe(tmp_path: Path) -> None:
    """The last action's rows deleted whole leave a chain that holds: its $20 refund at
    Stripe, on a payment verify lists for the other action, is what shows it."""
    path = tmp_path / "journal.sqlite3"
    payments, (_, gone) = _sends_on_one_payment(path, 2)
    _delete_action(path, gone.action_id)
    store = SQLiteStore.open_read_only(path)

    result = verify(store, payments, signing_key=KEY)

    store.close()
    assert not result.ok
    assert any(
        f"names action {gone.action_id}, which the store does not have" in p
        for p in result.problems
    ), result.problems


def test_an_action_lost_with_the_wal_is_seen_through_its_refund_at_stripe(tmp_path: Path) -> None:
    """The store as it is on disk when the -wal holding the second action is lost (the
    file as it was checkpointed after the first): verify names the second's refund."""
    path = tmp_path / "journal.sqlite3"
    payments, (first,) = _sends_on_one_payment(path, 1)  # closing checkpoints the -wal
    on_disk = path.read_bytes()
    world = World(payments, SQLiteStore(path), _world(MemoryStore()).gate)
    world.gate = Gate(world.store, StripeRefund(payments), timing=world.gate.timing,
                      signing_key=KEY,
                      approvers=UNSIGNED_APPROVALS)  # fmt: skip
    second = world.decide(payment_intent=first.target)
    assert world.gate.submit(second).status == "sent"
    world.store.close()
    path.write_bytes(on_disk)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store = SQLiteStore.open_read_only(path)

    result = verify(store, payments, signing_key=KEY)

    store.close()
    assert any(f"names action {second.action_id}, which the store" in p for p in result.problems)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(min_value=1, max_value=4), data=st.data())
def test_verify_is_clean_exactly_when_the_store_is_whole(n: int, data: st.DataObject) -> None:
    """Any set of actions deleted whole from a signed store with all its refunds on one
    payment, while one action still names that payment: verify, given Stripe, is clean
    exactly when none was deleted. (With every action on it gone, the payment is not
    listed: only the account-wide listing sees that, test_verify_account.py.)"""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.sqlite3"
        payments, intents = _sends_on_one_payment(path, n)
        doomed = data.draw(st.sets(st.sampled_from([i.action_id for i in intents]), max_size=n - 1))
        for action_id in doomed:
            _delete_action(path, action_id)
        store = SQLiteStore.open_read_only(path)
        result = verify(store, payments, signing_key=KEY)
        store.close()
    assert result.ok == (not doomed), (doomed, result.problems)

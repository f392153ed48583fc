"""Receipts and `verify()`: hashes, signatures, Stripe's cross-check and the store as a whole.

Receipts come from real gate runs over the in-memory payments model, or are recorded
straight into a store where a test needs an outcome the world does not back. Tampering
is done on the stored rows (or on copies of the receipts), never through the library.

New receipts (format 2) are each checked on their own: body, hash and Ed25519 signature
under the gate's public key. Their order, and receipts dropped from the middle or the end,
are the receipt log's to see: its heads and anchors are attacked in
`tests/unit/test_receipt_log.py`. The chained receipts of stores written before the log
(format 1, HMAC-signed or unsigned) are still checked as the chain they are: those tests
run on the receipts of a real version 4 store (`tests/data/store-v4-*.sql`).
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
    ConfigError,
    Gate,
    Intent,
    KeyList,
    Lease,
    MemoryStore,
    Owner,
    Receipt,
    Settlement,
    SigningKey,
    SQLiteStore,
    Store,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._core.merkle import leaf_hash
from interlock._core.receipts import (
    GENESIS_HASH,
    canonical_json,
    chain_problems,
    load_json,
    seal,
    seal_chained,
)
from interlock._core.signing import RECEIPT_TYPE
from interlock.testing import InProcessPayments

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
OWNER = Owner("test-worker", os.getpid(), 0.0, "test-host")
KEY = SigningKey.generate()
# The HMAC secret the version 4 stores in tests/data were written with.
HMAC_KEY = b"key-of-the-old-stores"


def _keys(*keys: SigningKey) -> KeyList:
    """A key list trusting `keys` (default: the gate's KEY)."""
    trusted = KeyList()
    for key in keys or (KEY,):
        trusted.add(key.public)
    return trusted


KEYS = _keys()

# Every field a receipt body carries; each is inside the hashed and signed text. Its id
# and place in the log are not: the log numbers receipts after their commits.
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
    "signed",
    "key_id",
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


def _gate(
    store: Store, payments: InProcessPayments, signing_key: SigningKey | None, log_every: int
) -> Gate:
    # The log is numbered every `log_every` receipts and never by the clock, so what a
    # test finds in it does not depend on how fast the machine is.
    return Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        signing_key=signing_key,
        approvers=UNSIGNED_APPROVALS,
        log_every=log_every,
        log_interval_s=3600,
    )


def _world(store: Store, signing_key: SigningKey | None = None, log_every: int = 100) -> World:
    payments = InProcessPayments()
    return World(payments, store, _gate(store, payments, signing_key, log_every))


@pytest.fixture
def world() -> World:
    """A world over a MemoryStore with unsigned receipts."""
    return _world(MemoryStore())


@pytest.fixture
def signed() -> World:
    """A world over a MemoryStore whose receipts are signed with KEY."""
    return _world(MemoryStore(), signing_key=KEY)


@pytest.fixture
def no_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key list or signing key from outside: verify's defaults are none."""
    for name in ("INTERLOCK_VERIFY_KEYS", "INTERLOCK_SIGNING_KEY", "INTERLOCK_RECEIPT_KEY"):
        monkeypatch.delenv(name, raising=False)


def _problems(
    receipts: list[Receipt], keys: KeyList | None = None, hmac_key: bytes | None = None
) -> list[str]:
    """The receipts' problems alone (what `verify()` reports of them)."""
    return chain_problems(receipts, keys, hmac_key)


def _three_sends(world: World) -> list[Receipt]:
    for _ in range(3):
        assert world.gate.submit(world.decide()).status == "sent"
    return list(world.store.receipts())


def _edit_body(receipt: Receipt, field: str, value: object) -> Receipt:
    body = receipt.body
    body[field] = value
    return replace(receipt, body_text=canonical_json(body))


def _rehash(receipt: Receipt) -> Receipt:
    """The receipt with its hash recomputed as format 2 hashes (an RFC 9162 leaf)."""
    return replace(receipt, hash=leaf_hash(receipt.body_text.encode()).hex())


def _store_with_receipts(path: Path, signing_key: SigningKey | None = None) -> list[Receipt]:
    world = _world(SQLiteStore(path), signing_key=signing_key)
    receipts = _three_sends(world)
    world.store.close()
    return receipts


def _v4_store(tmp_path: Path, name: str = "store-v4-hmac.sql") -> Path:
    """A version 4 store written by the code before the log, as a file of its own."""
    path = tmp_path / f"{name}.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript((DATA / name).read_text())
    conn.close()
    return path


def _v4_receipts(tmp_path: Path, name: str = "store-v4-hmac.sql") -> list[Receipt]:
    """The chained (format 1) receipts of a version 4 store, as its reader lists them."""
    store = SQLiteStore.open_read_only(_v4_store(tmp_path, name))
    try:
        receipts = list(store.receipts())
    finally:
        store.close()
    assert [r.body["v"] for r in receipts] == [1] * len(receipts) and len(receipts) == 4
    return receipts


def _rechain(
    receipts: list[Receipt], start: int, key: bytes | None, edit: dict[str, object]
) -> list[Receipt]:
    """Format 1 receipts re-sealed from index `start` on with `edit` applied, each linked to
    the one before with a fresh hash, under `key` (None: unsigned, no signature kept); a
    signed re-seal keeps the old signature (the forger has not the secret)."""
    out = list(receipts[:start])
    prev = out[-1].hash if out else GENESIS_HASH
    for r in receipts[start:]:
        fields = {k: v for k, v in r.body.items() if k not in ("v", "seq", "prev_hash", "signed")}
        text, digest, _ = seal_chained(r.seq, prev, {**fields, **edit}, key)
        signature = r.signature if key is not None else None
        out.append(replace(r, body_text=text, prev_hash=prev, hash=digest, signature=signature))
        prev = digest
    return out


# -- each receipt (format 2) -------------------------------------------------------------


def test_each_receipt_is_canonical_json_hashed_as_a_log_leaf(world: World) -> None:
    """Receipts are canonical JSON hashed as RFC 9162 leaves, with unique ids and no link
    to the receipt before (their order is the log's)."""
    receipts = _three_sends(world)

    assert len({r.seq for r in receipts}) == 3
    for r in receipts:
        body = json.loads(r.body_text)
        assert r.body_text == canonical_json(body)
        assert r.hash == hashlib.sha256(b"\x00" + r.body_text.encode()).hexdigest()
        assert r.hash == leaf_hash(r.body_text.encode()).hex()
        assert "seq" not in body and "prev_hash" not in body and r.prev_hash == ""
        assert body["action_id"] == r.action_id
        assert (body["v"], body["signed"], body["key_id"], r.signature) == (2, False, None, None)
    result = verify(world.store)
    assert (result.ok, result.chain_length, result.signed) == (True, 3, False)
    assert result.formats == {"unsigned": 3}


# What a field edited in a signed body is reported as, besides a hash that no longer
# matches: the signature no longer matches the body, unless the edit changes what the
# body says about its signing (a key id that is not one names no key).
EDITED_FIELD_WORDS = {
    "signed": "a downgrade (written by someone who holds no key)",
    "key_id": "not signed",
}


def test_canonical_body_covers_every_field(signed: World) -> None:
    """Every field of a receipt is in its hashed, signed body: changing any one breaks its
    hash, and with the hash recomputed (no key needed for that) its signature."""
    receipts = _three_sends(signed)
    first = receipts[0]
    assert set(first.body) == RECEIPT_FIELDS
    assert set(first.checks[0]) == {"name", "expected", "observed", "passed"}
    assert [c["name"] for c in first.checks] == [
        "lookup",
        "world_unchanged",
        "approval_signature",
        "approval",
        "claim",
    ]
    assert _problems(receipts, KEYS) == []

    where = f"receipt {first.seq} ({first.action_id}): "
    for field in sorted(RECEIPT_FIELDS):
        edited = _edit_body(first, field, {"edited": field})
        problems = _problems([edited, *receipts[1:]], KEYS)
        assert f"{where}its body does not match its hash (edited)" in problems, field
        problems = _problems([_rehash(edited), *receipts[1:]], KEYS)
        words = EDITED_FIELD_WORDS.get(field, "its signature does not match its body")
        assert any(p.startswith(where) and words in p for p in problems), (field, problems)
        assert all(p.startswith(where) for p in problems), (field, problems)


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("action_id", "act_someone_else", "action column does not match its body"),
        ("prev_hash", "f" * 64, "its stored previous hash is not its body's (format 2 has none)"),
        ("hash", "e" * 64, "does not match its hash"),
        ("signature", "ab" * 32, "says unsigned but carries a signature"),
    ],
)
def test_each_stored_column_is_checked_against_the_body(
    world: World, column: str, value: object, expected: str
) -> None:
    """A stored column that disagrees with the hashed body is reported. (The id column is
    checked against the action it settles, and by the log: see below and
    test_receipt_log.py.)"""
    receipts = _three_sends(world)
    edited = replace(receipts[1], **{column: value})

    problems = _problems([receipts[0], edited, receipts[2]])

    assert any(p.startswith(f"receipt {edited.seq} ") and expected in p for p in problems), problems


def test_a_signature_column_replaced_is_reported(signed: World) -> None:
    """A signed receipt's stored signature swapped for another receipt's (a valid signature
    by the same key, of another body) does not match its body."""
    a, b, _ = _three_sends(signed)

    problems = _problems([replace(a, signature=b.signature), b], KEYS)

    assert problems == [
        f"receipt {a.seq} ({a.action_id}): its signature does not match its body under key "
        f"{KEY.key_id} (altered, or signed by someone else)"
    ]


def test_a_truncated_tail_is_not_seen_by_the_receipts_alone(signed: World) -> None:
    """The stated limit of receipts on their own: the newest ones dropped leave nothing
    wrong in those that remain. The log's signed heads and the anchors see it
    (test_receipt_log.py, test_a_dropped_tail_is_caught_by_the_heads_and_by_the_anchor)."""
    receipts = _three_sends(signed)

    assert _problems(receipts[:2], KEYS) == []


def test_reordering_rows_on_disk_is_reported(tmp_path: Path) -> None:
    """Swapping two stored receipts' bodies in the SQLite file is caught when reopened: each
    row's action no longer matches its body, and the log's head no longer hashes to its
    root."""
    path = tmp_path / "journal.sqlite3"
    world = _world(SQLiteStore(path), signing_key=KEY, log_every=3)
    receipts = _three_sends(world)
    world.store.close()
    first, second = receipts[0].seq, receipts[1].seq
    conn = sqlite3.connect(path)
    with conn:
        rows = conn.execute(
            "SELECT seq, body, hash, signature FROM receipts WHERE seq IN (?, ?) ORDER BY seq",
            (first, second),
        ).fetchall()
        for (seq, *_), (_, body, digest, signature) in zip(rows, reversed(rows), strict=True):
            conn.execute(
                "UPDATE receipts SET body=?, hash=?, signature=? WHERE seq=?",
                (body, digest, signature, seq),
            )
    conn.close()

    store = SQLiteStore(path)
    result = verify(store, keys=KEYS)
    store.close()

    assert not result.ok
    for r in receipts[:2]:
        assert any(
            p.startswith(f"receipt {r.seq} ({r.action_id})")
            and "action column does not match its body" in p
            for p in result.problems
        ), result.problems
    assert any("no longer hash to its root" in p for p in result.problems), result.problems


# -- the chain of a store written before the log (format 1) --------------------------------


def test_an_old_stores_chain_holds_under_its_secret(tmp_path: Path) -> None:
    """The chained receipts of a real version 4 store: each names its sequence number and
    the previous receipt's SHA-256, HMAC-signed; they hold under the store's secret."""
    receipts = _v4_receipts(tmp_path)

    prev = GENESIS_HASH
    for seq, r in enumerate(receipts, start=1):
        body = json.loads(r.body_text)
        assert r.hash == hashlib.sha256(r.body_text.encode()).hexdigest()
        assert (r.seq, body["seq"]) == (seq, seq)
        assert r.prev_hash == body["prev_hash"] == prev
        assert body["signed"] is True
        prev = r.hash
    assert _problems(receipts, hmac_key=HMAC_KEY) == []
    unsigned = _v4_receipts(tmp_path, "store-v4-unsigned.sql")
    assert [r.body["signed"] for r in unsigned] == [False] * 4
    assert _problems(unsigned) == []


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("seq", 7, "out of order or a gap"),
        ("action_id", "act_someone_else", "action column does not match its body"),
        ("prev_hash", "f" * 64, "does not follow the receipt before it"),
        ("hash", "e" * 64, "does not match its hash"),
        ("signature", "ab" * 32, "bad signature"),
    ],
)
def test_each_stored_column_of_a_chained_receipt_is_checked(
    tmp_path: Path, column: str, value: object, expected: str
) -> None:
    """A stored column of a format 1 receipt that disagrees with its body is reported."""
    receipts = _v4_receipts(tmp_path)
    edited = replace(receipts[1], **{column: value})

    problems = _problems([receipts[0], edited, *receipts[2:]], hmac_key=HMAC_KEY)

    assert any(p.startswith(f"receipt {edited.seq} ") and expected in p for p in problems), problems


def test_an_edited_chained_receipt_rehashed_breaks_the_chain(tmp_path: Path) -> None:
    """A field of a format 1 body edited and its hash recomputed: the next receipt no
    longer follows it."""
    first, second, *rest = _v4_receipts(tmp_path)
    edited = _edit_body(first, "amount", 1)
    assert any("does not match its hash" in p for p in _problems([edited, second, *rest]))
    rehashed = replace(edited, hash=hashlib.sha256(edited.body_text.encode()).hexdigest())

    problems = _problems([rehashed, second, *rest])

    assert f"receipt 2 ({second.action_id}): does not follow the receipt before it " \
           "(reordered or dropped)" in problems, problems  # fmt: skip


@pytest.mark.parametrize("body", ["[1, 2]", "{not json"])
def test_a_chained_receipt_body_that_cannot_be_read_is_a_problem_not_a_crash(
    tmp_path: Path, body: str
) -> None:
    """A format 1 body that is not a JSON object is named as that, and the receipt after
    it no longer follows the chain."""
    first, second, third, fourth = _v4_receipts(tmp_path)

    problems = _problems([first, replace(second, body_text=body), third, fourth], hmac_key=HMAC_KEY)

    assert f"receipt 2 ({second.action_id}): its body is not a JSON object" in problems
    assert any(p.startswith("receipt 3 ") and "does not follow" in p for p in problems)
    assert not any("format 2" in p for p in problems), problems


def test_reordered_chained_receipts_are_reported(tmp_path: Path) -> None:
    """Two format 1 receipts swapped in the chain are reported as out of order."""
    a, b, c, d = _v4_receipts(tmp_path)

    problems = _problems([a, c, b, d], hmac_key=HMAC_KEY)

    assert any("receipt 3" in p and "out of order" in p for p in problems), problems
    assert any("does not follow" in p for p in problems), problems


def test_a_chained_receipt_dropped_from_the_middle_is_a_gap(tmp_path: Path) -> None:
    """A format 1 receipt removed from the middle leaves a gap that is reported."""
    a, _, c, d = _v4_receipts(tmp_path)

    problems = _problems([a, c, d], hmac_key=HMAC_KEY)

    assert problems == [
        f"receipt 3 ({c.action_id}): out of order or a gap: expected receipt 2 here",
        f"receipt 3 ({c.action_id}): does not follow the receipt before it (reordered or dropped)",
        f"receipt 4 ({d.action_id}): out of order or a gap: expected receipt 3 here",
    ]


def test_a_truncated_chained_tail_still_verifies(tmp_path: Path) -> None:
    """The stated limit of the chain: its newest receipts dropped go unseen (the log, which
    an old store's receipts join when it is migrated, is what sees that now)."""
    receipts = _v4_receipts(tmp_path)

    assert _problems(receipts[:3], hmac_key=HMAC_KEY) == []


def test_reordering_chained_rows_on_disk_is_reported(tmp_path: Path) -> None:
    """Swapping two stored format 1 receipts' bodies in a version 4 store's file is caught
    when it is opened."""
    path = _v4_store(tmp_path)
    conn = sqlite3.connect(path)
    with conn:
        rows = conn.execute("SELECT seq, body, hash FROM receipts WHERE seq IN (1, 2)").fetchall()
        for (seq, _, _), (_, body, digest) in zip(rows, reversed(rows), strict=True):
            conn.execute("UPDATE receipts SET body=?, hash=? WHERE seq=?", (body, digest, seq))
    conn.close()

    store = SQLiteStore.open_read_only(path)
    result = verify(store, hmac_key=HMAC_KEY)
    store.close()

    assert not result.ok
    assert any("out of order" in p for p in result.problems), result.problems


def test_chained_receipts_verify_with_their_secret_only(tmp_path: Path) -> None:
    """HMAC-signed format 1 receipts verify with their secret, and are reported with
    another secret or none."""
    receipts = _v4_receipts(tmp_path)

    assert _problems(receipts, hmac_key=HMAC_KEY) == []
    wrong = _problems(receipts, hmac_key=b"another key")
    assert wrong == [f"receipt {r.seq} ({r.action_id}): bad signature" for r in receipts]
    keyless = _problems(receipts)
    assert keyless == [
        f"receipt {r.seq} ({r.action_id}): HMAC-signed (written before signed receipts), but "
        "no INTERLOCK_RECEIPT_KEY was given to check the signature"
        for r in receipts
    ]


def test_rehashing_an_edited_chain_without_the_secret_is_caught(tmp_path: Path) -> None:
    """An edit re-chained with fresh hashes still fails: the HMAC signatures need the
    secret."""
    forged = _rechain(_v4_receipts(tmp_path), 0, HMAC_KEY, {"amount": 999_999})

    problems = _problems(forged, hmac_key=HMAC_KEY)

    assert problems == [f"receipt {r.seq} ({r.action_id}): bad signature" for r in forged]


def test_a_chain_resealed_unsigned_is_a_downgrade_with_the_secret(tmp_path: Path) -> None:
    """A format 1 chain re-sealed without signatures from its second receipt on fails,
    given the secret, as a downgrade."""
    receipts = _v4_receipts(tmp_path)
    resealed = _rechain(receipts, 1, None, {"amount": 999_999})

    problems = _problems(resealed, hmac_key=HMAC_KEY)

    assert problems == [
        f"receipt {r.seq} ({r.action_id}): unsigned, but receipts are signed with "
        "INTERLOCK_RECEIPT_KEY: a downgrade (re-sealed without the key)"
        for r in resealed[1:]
    ]


def test_a_chained_receipt_after_the_log_began_is_named(signed: World, tmp_path: Path) -> None:
    """No gate of this version writes a format 1 receipt: one after a format 2 receipt was
    inserted by a store writer."""
    new = _three_sends(signed)
    old = _v4_receipts(tmp_path)

    problems = _problems([*new, old[0]], KEYS, HMAC_KEY)

    assert problems == [
        f"receipt 1 ({old[0].action_id}): a chained receipt (format 1) after the log began: no "
        "gate of this version writes one (inserted by a store writer)"
    ]


# -- signatures (format 2) -----------------------------------------------------------------


@pytest.mark.usefixtures("no_key_env")
def test_signed_receipts_verify_with_their_key_only(signed: World) -> None:
    """Receipts signed with the gate's key verify under its public key, and are reported
    under a key list that does not name it, or with none."""
    receipts = _three_sends(signed)
    for r in receipts:
        assert r.signed and r.body["key_id"] == KEY.key_id
        assert KEY.public.verify(r.body_text.encode(), RECEIPT_TYPE, str(r.signature))

    good = verify(signed.store, keys=KEYS)
    assert (good.ok, good.signed, good.formats) == (True, True, {"ed25519": 3}), good.problems
    wrong = verify(signed.store, keys=_keys(SigningKey.generate()))
    assert wrong.problems == [
        f"receipt {r.seq} ({r.action_id}): signed by key {KEY.key_id}, which the key list "
        "does not name"
        for r in receipts
    ]
    keyless = verify(signed.store)
    assert keyless.problems == [
        f"receipt {r.seq} ({r.action_id}): signed by key {KEY.key_id}, but no key list was "
        "given to check it (set INTERLOCK_VERIFY_KEYS or pass keys=)"
        for r in receipts
    ]


def test_receipt_keys_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With INTERLOCK_SIGNING_KEY naming the key's file, the gate signs with it; with
    INTERLOCK_VERIFY_KEYS naming a key list, verify() checks with that by default."""
    KEY.save(tmp_path / "signing-key.pem")
    KEYS.save(tmp_path / "keys.json")
    _keys(SigningKey.generate()).save(tmp_path / "other-keys.json")
    monkeypatch.setenv("INTERLOCK_SIGNING_KEY", str(tmp_path / "signing-key.pem"))
    monkeypatch.setenv("INTERLOCK_VERIFY_KEYS", str(tmp_path / "keys.json"))
    world = _world(MemoryStore())
    receipts = _three_sends(world)

    for r in receipts:
        assert r.body["key_id"] == KEY.key_id
        assert KEY.public.verify(r.body_text.encode(), RECEIPT_TYPE, str(r.signature))
    result = verify(world.store)
    assert (result.ok, result.signed) == (True, True), result.problems
    monkeypatch.setenv("INTERLOCK_VERIFY_KEYS", str(tmp_path / "other-keys.json"))
    assert not verify(world.store).ok


def test_a_receipt_secret_alone_is_refused_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """INTERLOCK_RECEIPT_KEY without a signing key no longer signs: the gate refuses to
    start and says what to do. With a signing key as well, the secret is only verify's
    (for receipts signed before)."""
    monkeypatch.delenv("INTERLOCK_SIGNING_KEY", raising=False)
    monkeypatch.setenv("INTERLOCK_RECEIPT_KEY", HMAC_KEY.decode())

    with pytest.raises(ConfigError) as refused:
        _world(MemoryStore())

    words = str(refused.value)
    assert "INTERLOCK_RECEIPT_KEY is set, but receipts are now signed with an Ed25519 key" in words
    assert "python -m interlock keygen DIR" in words and "INTERLOCK_SIGNING_KEY" in words
    world = _world(MemoryStore(), signing_key=KEY)
    receipts = _three_sends(world)
    assert all(r.body["key_id"] == KEY.key_id for r in receipts)
    assert verify(world.store, keys=KEYS).ok


@pytest.mark.parametrize("secret", [b"receipt-key-for-tests", "receipt-key-for-tests"])
def test_a_secret_as_signing_key_is_refused_in_words(secret: object) -> None:
    """A shared secret given as the gate's key (what signed receipts before) is refused:
    it would let every worker rewrite them."""
    with pytest.raises(ConfigError) as refused:
        _world(MemoryStore(), signing_key=secret)  # type: ignore[arg-type]

    words = str(refused.value)
    assert "not a shared secret" in words and "python -m interlock keygen DIR" in words
    with pytest.raises(ConfigError, match=r"must be an interlock\.SigningKey, not PublicKey"):
        _world(MemoryStore(), signing_key=KEY.public)  # type: ignore[arg-type]


def test_rehashing_an_edited_signed_receipt_without_the_key_is_caught(signed: World) -> None:
    """An edit with a fresh hash still fails: the signature needs the private key."""
    receipts = _three_sends(signed)
    forged = [_rehash(_edit_body(receipts[0], "amount", 999_999)), *receipts[1:]]

    problems = _problems(forged, KEYS)

    first = forged[0]
    assert problems == [
        f"receipt {first.seq} ({first.action_id}): its signature does not match its body "
        f"under key {KEY.key_id} (altered, or signed by someone else)"
    ]


def test_receipts_resealed_unsigned_are_a_downgrade_with_the_keys(signed: World) -> None:
    """Receipts re-sealed without a signature (edited by someone without the key) fail
    `verify()` given the key list, as a downgrade."""
    receipts = _three_sends(signed)
    resealed: list[Receipt] = [receipts[0]]
    for r in receipts[1:]:
        fields = {k: v for k, v in r.body.items() if k not in ("v", "signed", "key_id")}
        resealed.append(seal(r.seq, {**fields, "amount": 999_999}, None))

    assert verify(signed.store, keys=KEYS).ok
    signed.store._receipts[:] = resealed  # type: ignore[attr-defined]

    result = verify(signed.store, keys=KEYS)

    assert result.signed is False and not result.ok
    assert [p for p in result.problems if "downgrade" in p] == [
        f"receipt {r.seq} ({r.action_id}): unsigned, but receipts are signed with the gate's "
        "key: a downgrade (written by someone who holds no key)"
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


# Each column verify depends on, on the rows of the second of three signed sends, each
# logged as it settled: (table, column, which rows); and the log's head of size 2, which
# signs that receipt. A `sending` journal record is not required by the store's
# rules (a lost one is not seen), and the journal's `at`, the actions' `kind` and
# `created_at` (copies of the intent's, kept for the indexes) are not checked: left out.
EDITED_COLUMNS = [
    *(("actions", c, "action_id=:action") for c in
      ("intent", "claim", "settlement", "attempts", "receipt_seq", "unknown")),
    *(("journal", c, f"action_id=:action AND record='{r}'") for c in ("action_id", "record",
      "data") for r in ("intent", "claim", "outcome")),
    *(("leases", c, "lease_id=:lease") for c in ("lease", "lease_id")),
    *(("receipts", c, "seq=2") for c in
      ("action_id", "body", "prev_hash", "hash", "signature", "leaf")),
    *(("heads", c, "size=2") for c in ("body", "signature", "frontier")),
]  # fmt: skip
# A head's size is SQLite's row id there (it holds integers alone): moved to another
# integer in test_a_heads_size_edited_is_named below.


Sends = tuple[Path, InProcessPayments, Intent]


@pytest.fixture(scope="module")
def signed_sends(tmp_path_factory: pytest.TempPathFactory) -> Sends:
    """A signed store of three sends on one payment, each logged as it settled (heads of
    sizes 1, 2 and 3), its payments, and the second intent."""
    path = tmp_path_factory.mktemp("signed") / "journal.sqlite3"
    payments, intents = _sends_on_one_payment(path, 3)
    store = SQLiteStore.open_read_only(path)
    result = verify(store, payments, keys=KEYS, account_wide=True)
    store.close()
    assert result.ok, result.problems
    assert (result.log_size, result.heads, result.unlogged) == (3, 3, 0)
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
        result = verify(store, payments, keys=KEYS, account_wide=True)
    finally:
        store.close()

    assert not result.ok
    named = (intent.action_id, intent.lease_id, "receipt 2 ", "tree head")
    assert any(n in p for p in result.problems for n in named), result.problems


@pytest.mark.parametrize("size", [0, 7, -5])
def test_a_heads_size_edited_is_named(signed_sends: Sends, tmp_path: Path, size: int) -> None:
    """The head of size 2 filed under another size, below or above the log's: named (a
    head's body says which size it signs), never skipped as if it were not there."""
    original, payments, _ = signed_sends
    path = tmp_path / "journal.sqlite3"
    shutil.copyfile(original, path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE heads SET size=? WHERE size=2", (size,))
    conn.close()

    store = SQLiteStore.open_read_only(path)
    try:
        result = verify(store, payments, keys=KEYS, account_wide=True)
    finally:
        store.close()

    words = "signs more receipts than the log holds" if size > 3 else "its body says size 2"
    assert any(p.startswith(f"tree head of size {size}") and words in p for p in result.problems), (
        result.problems
    )


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
    """`n` refunds of $20 on one payment through a SQLite store, under a signing key, each
    logged as it settles."""
    world = _world(SQLiteStore(path), signing_key=KEY, log_every=1)
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

    result = verify(store, payments, keys=KEYS)

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
    world.gate = _gate(world.store, payments, KEY, log_every=1)
    second = world.decide(payment_intent=first.target)
    assert world.gate.submit(second).status == "sent"
    world.store.close()
    path.write_bytes(on_disk)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store = SQLiteStore.open_read_only(path)

    result = verify(store, payments, keys=KEYS)

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
        result = verify(store, payments, keys=KEYS)
        store.close()
    assert result.ok == (not doomed), (doomed, result.problems)

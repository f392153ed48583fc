"""The sweep's `store rewritten` row: a writer of the journal who holds the gate's key
rewrites a refund's receipt and builds the log again; only the anchor catches it.

Each test sends one real refund through a gate over a SQLite journal (in-process payments)
whose log is anchored in a file elsewhere, as the demo's is, then rewrites the journal as
`interlock_demo.reports.rewrite` does, and holds `caught` to what verify() says.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from interlock import (
    UNSIGNED_APPROVALS,
    FileAnchor,
    Gate,
    Intent,
    KeyList,
    Lease,
    SigningKey,
    SQLiteStore,
    StripeRefund,
    Timing,
    refunds_fingerprint,
    verify,
)
from interlock.testing import InProcessPayments
from interlock_demo.reports.rewrite import REWRITTEN_TO, caught, rewrite_receipt

KEY = SigningKey.generate()


class Journal:
    """One refund sent through a gate that logs every receipt and anchors it in a file."""

    def __init__(self, tmp_path: Path, anchors: bool = True) -> None:
        self.path = tmp_path / "journal.sqlite3"
        (tmp_path / "anchor").mkdir()
        self.anchor = FileAnchor(tmp_path / "anchor" / "heads.jsonl")
        self.keys = KeyList()
        self.keys.add(KEY.public)
        payments = InProcessPayments()
        store = SQLiteStore(self.path)
        try:
            gate = Gate(
                store,
                StripeRefund(payments),
                timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
                signing_key=KEY,
                approvers=UNSIGNED_APPROVALS,
                anchors=[self.anchor] if anchors else [],
                log_every=1,
            )
            pi = payments.create_payment(5000).id
            now = time.time()
            store.grant_lease(Lease(f"lease_{pi}", "refund", pi, 2000, now + 3600, "t", now))
            seen = refunds_fingerprint(payments.list_refunds(pi))
            outcome = gate.submit(Intent(f"act_{pi}", "refund", pi, 2000, f"lease_{pi}", seen))
            assert outcome.status == "sent"
            self.action_id = outcome.action_id
        finally:
            store.close()

    def caught(self) -> bool:
        store = SQLiteStore(self.path)
        try:
            anchored = verify(store, keys=self.keys, anchors=[self.anchor])
            alone = verify(store, keys=self.keys)
            state = store.action(self.action_id)
        finally:
            store.close()
        assert state is not None and state.receipt is not None
        assert state.receipt.outcome == REWRITTEN_TO
        return caught(anchored, alone, self.action_id)


def test_a_receipt_rewritten_and_re_signed_with_the_key_is_caught_by_the_anchor(
    tmp_path: Path,
) -> None:
    """Re-signed and re-logged with the gate's key: without the anchor every signature and
    head holds; with it, verify() names the rewritten receipt."""
    journal = Journal(tmp_path)
    rewrite_receipt(journal.path, KEY, journal.action_id)
    assert journal.caught()


def test_a_rewrite_without_the_key_is_not_counted_as_caught_by_the_anchor(
    tmp_path: Path,
) -> None:
    """Signed with another key, the rewrite fails its signature without any anchor: the
    anchor is not what caught it, so `caught` says no."""
    journal = Journal(tmp_path)
    rewrite_receipt(journal.path, SigningKey.generate(), journal.action_id)
    assert not journal.caught()


def test_a_rewrite_of_a_log_never_anchored_is_not_caught(tmp_path: Path) -> None:
    """With nothing anchored, a writer holding the key leaves nothing to catch it."""
    journal = Journal(tmp_path, anchors=False)
    rewrite_receipt(journal.path, KEY, journal.action_id)
    assert not journal.caught()


def test_an_action_without_a_receipt_is_refused_in_words(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    with pytest.raises(LookupError, match="act_none has no receipt to rewrite"):
        rewrite_receipt(journal.path, KEY, "act_none")

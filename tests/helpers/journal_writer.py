"""Test helper: write the gate's three commits for one action after another, forever.

    python tests/helpers/journal_writer.py STORE LEASE_ID TARGET

For each new action: `begin` (intent and claim), `mark_sending` (sending, reservation,
renewal) and `settle` (outcome, receipt, lease spend), exactly as the gate does but with
no payments in between, so the process is always in or near a write. After each commit
it prints `begun`, `sending` or `committed` and the action id, and flushes: the test
kills it with SIGKILL right after one of those lines (so in the next write) and checks
that the store kept everything reported, whole.
"""

from __future__ import annotations

import sys
import time

from interlock import Check, Intent, Owner, Settlement, SQLiteStore, new_action_id

AMOUNT = 100
TTL_S = 60.0


def main(store_path: str, lease_id: str, target: str) -> int:
    """Journal actions until killed; every fifth one ends `failed`, the others `sent`."""
    store = SQLiteStore(store_path)
    owner = Owner.current("journal-writer")
    n = 0
    while True:
        n += 1
        intent = Intent(
            action_id=new_action_id(),
            kind="refund",
            target=target,
            amount=AMOUNT,
            lease_id=lease_id,
            fingerprint="sha256:test",
            created_at=time.time(),
        )
        aid = intent.action_id
        epoch = store.begin(intent, owner, TTL_S, 2.0).epoch
        print(f"begun {aid}", flush=True)
        sending = store.mark_sending(aid, epoch, TTL_S)
        if sending.status != "ok":
            print(f"error {aid} {sending.status} {sending.reason}", flush=True)
            return 1
        print(f"sending {aid}", flush=True)
        if n % 5 == 0:
            verdict = Settlement("failed", "amount too large", code="amount_too_large")
        else:
            verdict = Settlement("sent", None, f"re_test_{n}", AMOUNT)
        checks = [Check("claim", "held", "held", True)]
        receipt = store.settle(aid, epoch, owner, verdict, checks, {"n": n}, None)
        if receipt is None:
            print(f"error {aid} settle fenced", flush=True)
            return 1
        print(f"committed {aid}", flush=True)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))

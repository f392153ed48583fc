"""Test helper: a store writer with the library and no approver's key mints an approval.

    python tests/helpers/forger.py STORE PAYMENT_ID FINGERPRINT

It writes what anyone who can write the store can: a $480 refund lease on the payment,
granted in support's name (unsigned, or carrying a signature copied from nowhere), and an
intent under it, claimed by a worker that is gone, so the next `recover()` finds it. It
prints the action id and the lease id as one JSON line.
"""

from __future__ import annotations

import json
import socket
import sys
import time

from interlock import Intent, Lease, Owner, SQLiteStore, new_action_id

AMOUNT = 48_000


def main(store_path: str, payment_id: str, fingerprint: str) -> int:
    """Write the forged lease and its intent; report their ids."""
    now = time.time()
    store = SQLiteStore(store_path)
    lease = store.grant_lease(
        Lease(
            id="lease_forged",
            kind="refund",
            target=payment_id,
            cap=AMOUNT,
            expires_at=now + 3600,
            granted_by="support",
            granted_at=now,
        )
    )
    intent = Intent(
        new_action_id(), "refund", payment_id, AMOUNT, lease.id, fingerprint, created_at=now
    )
    # A claim by a worker that is gone (its pid above Linux's pid_max), never `sending`:
    # the next recovery takes it at once.
    gone = Owner("forger", 2**22 + 1, 0.0, socket.gethostname())
    store.begin(intent, gone, 60.0, 2.0)
    store.close()
    print(json.dumps({"action_id": intent.action_id, "lease_id": lease.id}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))

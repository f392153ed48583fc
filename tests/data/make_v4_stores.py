"""How tests/data/store-v4-*.sql were written: by the code of b001503 (before the receipt
log), so the tests read stores the old code really wrote. Three refunds sent and one
failed, receipts chained and HMAC-signed with the given key (or unsigned):

    git worktree add --detach /tmp/old b001503
    PYTHONPATH=/tmp/old python tests/data/make_v4_stores.py /tmp/h.db \
        tests/data/store-v4-hmac.sql key-of-the-old-stores
    PYTHONPATH=/tmp/old python tests/data/make_v4_stores.py /tmp/u.db \
        tests/data/store-v4-unsigned.sql
"""

import sqlite3
import sys
import time

from interlock import (
    UNSIGNED_APPROVALS,
    Gate,
    Intent,
    Lease,
    SQLiteStore,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
    verify,
)
from interlock._stores.sqlite import SCHEMA_VERSION
from interlock.testing import InProcessPayments

assert SCHEMA_VERSION == 4, "run it with PYTHONPATH at a checkout of b001503"

path, out = sys.argv[1], sys.argv[2]
key = sys.argv[3].encode() if len(sys.argv) > 3 else None
payments = InProcessPayments()
store = SQLiteStore(path)
gate = Gate(
    store,
    StripeRefund(payments),
    timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
    signing_key=key,
    approvers=UNSIGNED_APPROVALS,
)
for amount in (2000, 1500, 900, 9000):
    pi = payments.create_payment(5000).id
    lease_id = "lease_" + new_action_id()[-8:]
    now = time.time()
    store.grant_lease(Lease(lease_id, "refund", pi, amount, now + 3600, "test", now))
    intent = Intent(
        action_id=new_action_id(),
        kind="refund",
        target=pi,
        amount=amount,
        lease_id=lease_id,
        fingerprint=refunds_fingerprint(payments.list_refunds(pi)),
    )
    print(gate.submit(intent).status)
r = verify(store, signing_key=key)
print(r.ok, r.chain_length, r.signed)
store.close()
conn = sqlite3.connect(path)
print(conn.execute("select value from meta where key='schema_version'").fetchone())
with open(out, "w") as f:
    for line in conn.iterdump():
        f.write(line + "\n")

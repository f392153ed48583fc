"""What signed receipts and their log cost: signing, verifying, `verify` of a large log, proofs.

    python bench/receipts.py [--signs N] [--actions N]

1. **One receipt.** A real gate (`Gate` over a `MemoryStore` and the in-memory payments
   model, with an Ed25519 `SigningKey` made for the run) settles one action; its receipt's
   body is the payload. Signing it again must give the receipt's own signature (Ed25519
   is deterministic), so what is timed is what the gate does: `receipt sign` and
   `receipt verify` (`PublicKey.verify`), CPU time per receipt over `--signs` of each on
   this one core, and `receipts signed per second on one core` (target at least 5,000).
   `head signing per integrate`: one tree head's body signed (an integrate signs one,
   whatever its batch).
2. **`verify` of a large log with the public key list alone.** A `SQLiteStore` is filled
   with `--actions` settled actions (default 100,000) through the store's own calls
   (`grant_lease`, `begin`, `mark_sending`, `settle` with the key, and `integrate` after
   every 100 settles, the gate's default `log_every`), with synchronous=OFF to save time
   (no figure here is a commit's). Then `python -m interlock verify PATH --keys
   keys.json` runs in a child process: its wall time, its CPU time and its peak RSS, as
   the child itself reads them. `integrate of 100 receipts` is the median over the fill
   (synchronous=OFF: numbering, frontier and head signature, not the fsync).
3. **Inclusion proofs.** Their size from the tree size alone (RFC 9162: a proof has
   at most ceil(log2 n) hashes of 32 bytes; printed for 1k, 100k and 1M leaves), and
   `python -m interlock proof ACTION --json` on the filled store (`--actions` leaves;
   the receipt at the middle leaf): its time in the child (reading the log and hashing
   its leaves included) and the hashes it printed, which must match the computed count.

One figure a line, each with the load average (1, 5 and 15 minutes): the machine is
shared. Timings are reported, never judged. Exit 1 when a check fails (a re-signed receipt
that differs, verify finding a problem, a proof of another length), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _path in (ROOT, BENCH):  # run as a script from anywhere in a checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from common import load_average as load  # noqa: E402
from common import run_interlock  # noqa: E402
from gate_overhead import decision  # noqa: E402

from interlock import (  # noqa: E402
    UNSIGNED_APPROVALS,
    Check,
    Gate,
    Intent,
    KeyList,
    Lease,
    MemoryStore,
    Owner,
    Settlement,
    SigningKey,
    SQLiteStore,
    StripeRefund,
    Timing,
    new_action_id,
    refunds_fingerprint,
)
from interlock.testing import InProcessPayments  # noqa: E402

# The content types the library signs under (COSE's); the re-signed receipt and head must
# equal the stored ones, so a wrong string here fails the run instead of timing nothing.
RECEIPT_TYPE = "application/interlock-receipt+json"
HEAD_TYPE = "application/interlock-tree-head+json"
AMOUNT = 2000
LOG_EVERY = 100  # Gate's default log_every
HASH_BYTES = 32
PROOF_SIZES = (1_000, 100_000, 1_000_000)
OWNER = Owner("receipts-filler", 1, 0.0, "bench-host")


def _label(n: int) -> str:
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# -- 1. one receipt ------------------------------------------------------------------------


def gate_receipt(key: SigningKey) -> tuple[str, str]:
    """The body text and signature of a receipt a real gate wrote for one refund."""
    payments = InProcessPayments()
    store = MemoryStore()
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(),
        signing_key=key,
        approvers=UNSIGNED_APPROVALS,
    )
    intent = decision(payments, store)
    outcome = gate.submit(intent)
    state = store.action(intent.action_id)
    receipt = None if state is None else state.receipt
    if outcome.status != "sent" or receipt is None or receipt.signature is None:
        raise RuntimeError(f"the gate wrote no signed receipt: {outcome}")
    return receipt.body_text, receipt.signature


def per_call_s(fn: Any, n: int) -> tuple[float, float]:
    """CPU and wall seconds per call of `fn()` over `n` calls."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn()
    return (time.process_time() - cpu0) / n, (time.perf_counter() - wall0) / n


# -- 2. a large log --------------------------------------------------------------------------


def fill(path: Path, key: SigningKey, actions: int) -> list[float]:
    """A SQLite store at `path` with `actions` settled, signed receipts in its log; the
    seconds each integrate took."""
    store = SQLiteStore(path)
    store._conn.execute("PRAGMA synchronous=OFF")  # filling only: no figure is a commit's
    timing = Timing()
    now = time.time()
    checks = [
        Check("lookup", "a refund naming this action", "none", True),
        Check("world_unchanged", {"fingerprint": "fp"}, {"fingerprint": "fp"}, True),
        Check("approval", "approval live", "ok", True),
        Check("claim", ">= 8 s of claim left", 39.9, True),
    ]
    integrations: list[float] = []
    try:
        for i in range(actions):
            payment = f"pi_fill{i:08d}"
            lease = f"lease-{payment}"
            store.grant_lease(Lease(lease, "refund", payment, AMOUNT, now + 3600, "bench", now))
            intent = Intent(
                action_id=new_action_id(),
                kind="refund",
                target=payment,
                amount=AMOUNT,
                lease_id=lease,
                fingerprint=refunds_fingerprint([]),
                metadata={"case": f"case-{i}", "column": "interlock"},
                created_at=now,
            )
            epoch = store.begin(intent, OWNER, timing.claim_ttl_s, timing.grace_s).epoch
            store.mark_sending(intent.action_id, epoch, timing.renewal_s)
            verdict = Settlement("sent", None, f"re_fill{i:08d}", AMOUNT)
            extra = {"idempotency_key": intent.action_id}
            if store.settle(intent.action_id, epoch, OWNER, verdict, checks, extra, key) is None:
                raise RuntimeError(f"filling: action {i} did not settle")
            if (i + 1) % LOG_EVERY == 0 or i + 1 == actions:
                start = time.perf_counter()
                store.integrate(key)
                integrations.append(time.perf_counter() - start)
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    return integrations


# -- 3. proofs -----------------------------------------------------------------------------


def proof_length(index: int, size: int) -> int:
    """Hashes in RFC 9162's inclusion proof of leaf `index` in a tree of `size` leaves."""
    hashes = 0
    while size > 1:
        split = 1 << ((size - 1).bit_length() - 1)  # the largest power of 2 below size
        if index < split:
            size = split
        else:
            index, size = index - split, size - split
        hashes += 1
    return hashes


def main(argv: list[str] | None = None) -> int:
    """Measure and print one figure a line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signs", type=int, default=20_000, help="signatures timed (20,000)")
    parser.add_argument(
        "--actions", type=int, default=100_000, help="actions in the verified log (100,000)"
    )
    args = parser.parse_args(argv)
    if args.signs < 1 or args.actions < 1:
        parser.error("--signs and --actions must be at least 1")
    key = SigningKey.generate()
    body, signature = gate_receipt(key)
    payload = body.encode()
    if key.sign(payload, RECEIPT_TYPE) != signature:
        print("receipts: re-signing the gate's receipt gave another signature", file=sys.stderr)
        return 1
    print(
        f"receipts: a real gate's receipt, {len(payload)} bytes of body, Ed25519 "
        f"(cryptography), {os.cpu_count()} CPUs; {load()}"
    )
    sign_cpu, sign_wall = per_call_s(lambda: key.sign(payload, RECEIPT_TYPE), args.signs)
    print(
        f"receipt sign: {sign_cpu * 1e6:.1f} us CPU per receipt ({sign_wall * 1e6:.1f} us "
        f"wall, over {args.signs}); {load()}"
    )
    public = key.public
    verify_cpu, verify_wall = per_call_s(
        lambda: public.verify(payload, RECEIPT_TYPE, signature), args.signs
    )
    print(
        f"receipt verify: {verify_cpu * 1e6:.1f} us CPU per receipt ({verify_wall * 1e6:.1f} "
        f"us wall, over {args.signs}); {load()}"
    )
    print(
        f"receipts signed per second on one core: {1 / sign_cpu:.0f} (target at least 5000; "
        f"{load()})"
    )

    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as d:
        workdir = Path(d)
        path = workdir / "journal.sqlite3"
        keys = KeyList()
        keys.add(key.public)
        keys_path = workdir / "keys.json"
        keys.save(keys_path)
        start = time.perf_counter()
        integrations = fill(path, key, args.actions)
        print(
            f"filled {_label(args.actions)} actions through the store's own calls in "
            f"{time.perf_counter() - start:.1f} s (SQLite, synchronous=OFF, integrate every "
            f"{LOG_EVERY}); {load()}",
            file=sys.stderr,
        )
        store = SQLiteStore(path, read_only=True)
        try:
            stored_heads = list(store.heads())
            middle = next(e for e in store.logged() if e.leaf == args.actions // 2)
        finally:
            store.close()
        head = stored_heads[-1]
        if head.signature is None or key.sign(head.body_text.encode(), HEAD_TYPE) != (
            head.signature
        ):
            print("receipts: re-signing a stored tree head gave another signature", file=sys.stderr)
            return 1
        body_head = head.body_text.encode()
        head_cpu, head_wall = per_call_s(
            lambda: key.sign(body_head, HEAD_TYPE), min(args.signs, 2000)
        )
        print(
            f"head signing per integrate: {head_cpu * 1e6:.1f} us CPU ({head_wall * 1e6:.1f} "
            f"us wall; one head per integrate, whatever its batch); {load()}"
        )
        print(
            f"integrate of {LOG_EVERY} receipts: median "
            f"{statistics.median(integrations) * 1000:.2f} ms (SQLite, synchronous=OFF, over "
            f"{len(integrations)}); {load()}"
        )
        verified = run_interlock(workdir, "verify", str(path), "--keys", str(keys_path))
        print(
            f"verify of {_label(args.actions)} actions with the public key list: "
            f"{verified.wall_s:.1f} s wall, {verified.cpu_s:.1f} s CPU, peak RSS "
            f"{verified.peak_bytes / 2**20:.0f} MB (the child's own); {load()}"
        )
        for size in PROOF_SIZES:
            hashes = math.ceil(math.log2(size))
            print(
                f"inclusion proof at {_label(size)} leaves: at most {hashes} hashes, "
                f"{hashes * HASH_BYTES} bytes ({hashes * HASH_BYTES * 2} as hex)"
            )
        proved = run_interlock(workdir, "proof", middle.action_id, "--store", str(path), "--json")
        proof = json.loads(proved.stdout)["inclusion_proof"]
        expected = proof_length(args.actions // 2, head.size)
        if len(proof) != expected:
            print(
                f"receipts: the proof has {len(proof)} hashes, {expected} expected",
                file=sys.stderr,
            )
            return 1
        print(
            f"inclusion proof generation at {_label(head.size)} leaves: "
            f"{proved.wall_s * 1000:.0f} ms wall, {proved.cpu_s * 1000:.0f} ms CPU "
            f"(`python -m interlock proof`, {len(proof)} hashes, "
            f"{len(proof) * HASH_BYTES} bytes); {load()}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

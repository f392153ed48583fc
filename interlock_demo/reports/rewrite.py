"""A store writer who holds the gate's key rewrites a receipt after the run; the anchor
catches it.

The sweep's `store rewritten` row (`interlock-demo sweep --offline`): after a run in which
interlock refunded, someone with write access to the journal and the gate's private key
rewrites the refund's receipt to say `refused`, signs it again with the key, and signs
every tree head again over the log as it now is, so the journal agrees with itself and
every signature in it verifies. What they cannot rewrite is the anchor, a file apart from
the journal: `verify()` given it names the receipt altered after it was anchored.

The rewrite is done the way such a writer would, straight in the SQLite file, and the
run it rewrites has a journal of its own (`rewrite_home`), so no other cell's `verify()`
sees it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path

from interlock import FileAnchor, SigningKey, VerifyResult, verify

# The library's own formats, as a writer who read its source would use them: the
# canonical JSON of a receipt body, its leaf hash, the content type it is signed under,
# and a tree head over the log.
from interlock._core.log import make_head
from interlock._core.merkle import Frontier, leaf_hash
from interlock._core.receipts import canonical_json
from interlock._core.signing import RECEIPT_TYPE
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.receipt_key import paths_receipt_key, verify_keys

REWRITTEN_TO = "refused"
"""What the rewritten receipt says instead of the refund it recorded."""

CAUGHT = "after it was anchored"
"""The words of `verify()`'s problem for a receipt altered after it was anchored."""


def rewrite_receipt(store_path: Path, key: SigningKey, action_id: str) -> int:
    """Rewrite `action_id`'s receipt in the SQLite journal at `store_path` to `refused`,
    re-signed with `key`, and sign every tree head again over the log as it now is;
    returns the receipt's place in the log (its leaf index)."""
    db = sqlite3.connect(store_path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(
            "SELECT body, leaf FROM receipts WHERE action_id=? AND leaf IS NOT NULL "
            "ORDER BY seq DESC LIMIT 1",
            (action_id,),
        ).fetchone()
        if row is None:
            raise LookupError(f"action {action_id} has no receipt in the log to rewrite")
        body = {**json.loads(row[0]), "outcome": REWRITTEN_TO, "external_id": None}
        text = canonical_json(body)
        db.execute(
            "UPDATE receipts SET body=?, hash=?, signature=? WHERE leaf=?",
            (text, leaf_hash(text.encode()).hex(), key.sign(text.encode(), RECEIPT_TYPE), row[1]),
        )
        leaves = [
            str(r[0])
            for r in db.execute("SELECT body FROM receipts WHERE leaf IS NOT NULL ORDER BY leaf")
        ]
        sizes = {int(r[0]) for r in db.execute("SELECT size FROM heads")}
        db.execute("DELETE FROM heads")
        frontier = Frontier()
        for size, leaf in enumerate(leaves, start=1):
            frontier.append(leaf_hash(leaf.encode()))
            if size in sizes:
                now = time.time()
                head = make_head(size, frontier.root(), now, key)
                db.execute(
                    "INSERT INTO heads (size, body, signature, frontier, anchored_at)"
                    " VALUES (?,?,?,?,?)",
                    (size, head.body_text, head.signature, frontier.to_text(), now),
                )
        db.execute("COMMIT")
        return int(row[1])
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()


def rewrite_and_verify(config: DemoConfig, action_id: str) -> VerifyResult:
    """Rewrite `action_id`'s receipt in `config`'s journal (a SQLite file under its home)
    with the demo's key, then `verify()` the journal with the public key list and the
    anchor."""
    rewrite_receipt(config.paths.store, paths_receipt_key(config.paths), action_id)
    store = config.open_store()
    try:
        return verify(store, keys=verify_keys(config), anchors=[FileAnchor(config.paths.anchor)])
    finally:
        store.close()


def caught(result: VerifyResult, action_id: str) -> bool:
    """Whether `verify()` named `action_id`'s receipt as altered after it was anchored."""
    return any(f"receipt of action {action_id} " in p and CAUGHT in p for p in result.problems)

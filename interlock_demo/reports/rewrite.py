"""A store writer who holds the gate's key rewrites a receipt after the run; the anchor
catches it.

The sweep's `store rewritten` row (`interlock-demo sweep --offline`): after a run in which
interlock refunded, someone with write access to the journal and the gate's private key
rewrites the refund's receipt to say `refused`, signs it again with the key, and builds
the receipt log again under a head signed with the key, so every signature in the journal
verifies and its log agrees with its heads. What they cannot rewrite is the anchor, a
file apart from the journal: `verify()` given it names the receipt altered after it was
anchored.

The rewrite is done the way such a writer would, straight in the SQLite file (then the
journal's own `integrate` numbers the log again and signs its head). The sweep runs it on
a run with a journal of its own, so no other cell's `verify()` sees it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

from interlock import FileAnchor, SigningKey, SQLiteStore, VerifyResult, verify
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.receipt_key import paths_receipt_key, verify_keys
from workers.protocol.case import anchor_path

REWRITTEN_TO = "refused"
"""What the rewritten receipt says instead of the refund it recorded."""

CAUGHT = "after it was anchored"
"""The words of `verify()`'s problem for a receipt altered after it was anchored."""

# The receipt format as a writer who read it would use it (docs/design.md): a receipt's
# body is canonical JSON, its hash the RFC 9162 leaf hash of the body, its signature the
# gate key's over the body under this content type.
RECEIPT_TYPE = "application/interlock-receipt+json"


def _canonical(body: object) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rewrite_receipt(store_path: Path, key: SigningKey, action_id: str) -> None:
    """Rewrite `action_id`'s receipt in the SQLite journal at `store_path` to `refused`,
    re-signed with `key`, and build the receipt log again: every receipt taken out of it
    and numbered into it anew by the journal itself, under a head signed with `key`."""
    db = sqlite3.connect(store_path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(
            "SELECT seq, body FROM receipts WHERE action_id=? ORDER BY seq DESC LIMIT 1",
            (action_id,),
        ).fetchone()
        if row is None:
            raise LookupError(f"action {action_id} has no receipt to rewrite")
        body = {**json.loads(row[1]), "outcome": REWRITTEN_TO, "external_id": None}
        text = _canonical(body).encode()
        digest = hashlib.sha256(b"\x00" + text).hexdigest()
        db.execute(
            "UPDATE receipts SET body=?, hash=?, signature=? WHERE seq=?",
            (text.decode(), digest, key.sign(text, RECEIPT_TYPE), row[0]),
        )
        db.execute("UPDATE receipts SET leaf=NULL")
        db.execute("DELETE FROM heads")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    finally:
        db.close()
    store = SQLiteStore(store_path)
    try:
        while store.integrate(key) is not None:
            pass
    finally:
        store.close()


def rewrite_and_verify(config: DemoConfig, action_id: str) -> tuple[VerifyResult, VerifyResult]:
    """Rewrite `action_id`'s receipt in `config`'s journal (a SQLite file under its home)
    with the demo's key; then `verify()` the journal with the public key list, with the
    anchor and without it."""
    rewrite_receipt(config.paths.store, paths_receipt_key(config.paths), action_id)
    keys = verify_keys(config)
    store = config.open_store()
    try:
        anchor = FileAnchor(anchor_path(config.paths.demo, config.store_location))
        anchored = verify(store, keys=keys, anchors=[anchor])
        alone = verify(store, keys=keys)
    finally:
        store.close()
    return anchored, alone


# What verify() says of a receipt or head whose signature, hash or tree does not hold.
_FORGERY_WORDS = ("signature", "hash", "tree head", "not signed")


def caught(anchored: VerifyResult, alone: VerifyResult, action_id: str) -> bool:
    """Whether the anchor caught the rewrite: `verify()` with it named `action_id`'s receipt
    as altered after it was anchored, while without it every signature, hash and tree head
    held (the rewrite was one only the anchor can catch)."""
    named = any(f"receipt of action {action_id} " in p and CAUGHT in p for p in anchored.problems)
    forged = any(w in p for p in alone.problems for w in _FORGERY_WORDS)
    return named and not forged

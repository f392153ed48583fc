"""The demo's receipt key, kept as support's approver key is, its key list and its anchor.

The gate's private key is made once under INTERLOCK_HOME (0600, never through a link); a
worker of the column that signs receipts is told its path and nothing of any other key;
the engine's `verify()` reads the public key list. A presenter's old INTERLOCK_RECEIPT_KEY
(which makes a gate built from the environment refuse to start) changes nothing.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from interlock import (
    UNSIGNED_APPROVALS,
    AnchorError,
    ConfigError,
    Gate,
    Intent,
    Lease,
    MemoryStore,
    SigningKey,
    StripeRefund,
    Timing,
    refunds_fingerprint,
    verify,
)
from interlock._core.log import make_head
from interlock.testing import InProcessPayments
from interlock_demo.core.columns import OPTIONAL
from interlock_demo.engine import Engine, RunChoice
from interlock_demo.settings.approver import support_approver
from interlock_demo.settings.config import DemoConfig, resolve
from interlock_demo.settings.receipt_key import (
    MemoryAnchor,
    paths_receipt_key,
    prepare_receipt_signing,
    receipt_anchors,
    receipt_key,
    verify_keys,
)
from interlock_demo.settings.worker import worker_env
from workers.process import receipt_signing
from workers.protocol.case import anchor_path

RUN_DEADLINE_S = 30.0


def _config(tmp_path: Path, mode: str = "offline") -> DemoConfig:
    return resolve(mode=mode, env={"INTERLOCK_HOME": str(tmp_path), "PATH": ""})


def _settle_one(gate: Gate, payments: InProcessPayments, store: MemoryStore) -> str:
    """One $20 refund through `gate`; its action id."""
    pi = payments.create_payment(5000).id
    now = time.time()
    lease = Lease(f"lease_{pi}", "refund", pi, 2000, now + 3600, "test", now)
    store.grant_lease(lease)
    seen = refunds_fingerprint(payments.list_refunds(pi))
    outcome = gate.submit(Intent(f"act_{pi}", "refund", pi, 2000, lease.id, seen))
    assert outcome.status == "sent", outcome
    return outcome.action_id


def test_a_worker_is_told_where_the_receipt_key_is_and_gets_no_private_key(
    tmp_path: Path,
) -> None:
    """Made once, 0600 with its key list 0600 beside it; the interlock worker's environment
    names the key's file, never a private key's text (the receipt key's or the approver's);
    the worker's gate signs with the key that file holds, logs every receipt and anchors
    it, and the engine's verify() checks it with the public key list alone."""
    config = _config(tmp_path)
    support_approver(config)
    prepare_receipt_signing(config.paths)
    key = paths_receipt_key(config.paths)

    env = worker_env(config, None, column="interlock", asks_model=True, parent={})

    assert env["INTERLOCK_SIGNING_KEY"] == str(config.paths.signing_key)
    values = " ".join(env.values())
    for private in (config.paths.signing_key, config.paths.approver_key):
        assert private.read_text().strip() not in values
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.paths.verify_keys.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.paths.anchor.parent.stat().st_mode) == 0o700
    assert paths_receipt_key(config.paths).key_id == key.key_id  # made once, then read back
    assert [e.key_id for e in verify_keys(config).entries] == [key.key_id]

    loaded, anchors = receipt_signing(env)
    assert loaded is not None and loaded.key_id == key.key_id
    payments, store = InProcessPayments(), MemoryStore()
    gate = Gate(
        store,
        StripeRefund(payments),
        timing=Timing(claim_ttl_s=6, stripe_timeout_s=1),
        signing_key=loaded,
        approvers=UNSIGNED_APPROVALS,
        anchors=anchors,
        log_every=1,
    )
    _settle_one(gate, payments, store)
    result = verify(store, payments, keys=verify_keys(config), anchors=anchors)
    assert result.ok, result.problems
    assert (result.formats, result.log_size, result.unlogged, result.anchored) == (
        {"ed25519": 1},
        1,
        0,
        1,
    )
    assert config.paths.anchor.exists()


def test_a_worker_of_a_column_that_signs_no_receipts_gets_no_key_and_no_anchor(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    env = worker_env(config, None, column="standard", asks_model=True, parent={})
    assert "INTERLOCK_SIGNING_KEY" not in env
    assert receipt_signing(env) == (None, ())


@pytest.mark.parametrize("which", ["signing_key", "verify_keys"])
def test_a_link_in_place_of_the_key_or_its_list_is_refused(tmp_path: Path, which: str) -> None:
    """A symbolic link where the demo keeps the key (or its list) is refused in words, and
    the file it points to is neither read as the demo's nor written."""
    config = _config(tmp_path)
    config.paths.prepare()
    elsewhere = tmp_path / "elsewhere.pem"
    planted = SigningKey.generate()
    planted.save(elsewhere)
    before = elsewhere.read_bytes()
    if which == "verify_keys":
        paths_receipt_key(config.paths)
        config.paths.verify_keys.unlink()
    getattr(config.paths, which).symlink_to(elsewhere)

    with pytest.raises(ConfigError, match="is not a plain file"):
        if which == "signing_key":
            paths_receipt_key(config.paths)
        else:
            verify_keys(config)
    assert elsewhere.read_bytes() == before


def test_a_mock_run_keeps_its_key_and_anchor_in_memory(tmp_path: Path) -> None:
    """Mock mode writes no key file: the key is this process's, and each store its own
    anchor in memory."""
    config = _config(tmp_path, "mock")
    key = receipt_key(config)
    assert receipt_key(config) is key
    assert [e.key_id for e in verify_keys(config).entries] == [key.key_id]
    one, two = MemoryStore(), MemoryStore()
    assert receipt_anchors(config, one) == receipt_anchors(config, one)
    assert receipt_anchors(config, one) != receipt_anchors(config, two)
    assert not config.paths.signing_key.exists() and not config.paths.anchor.exists()


def test_the_memory_anchor_keeps_heads_as_a_file_anchor_does() -> None:
    """The same head again changes nothing; a different head of a size it holds, or a head
    smaller than its largest, is refused (the log was rewritten, or cut)."""
    key = SigningKey.generate()
    anchor = MemoryAnchor()
    three = make_head(3, b"\x01" * 32, 1.0, key)
    anchor.publish(three, [])
    anchor.publish(three, [])
    assert [h.head.size for h in anchor.heads()] == [3]
    with pytest.raises(AnchorError, match="rewritten"):
        anchor.publish(make_head(3, b"\x02" * 32, 2.0, key), [])
    with pytest.raises(AnchorError, match="rewritten"):
        anchor.publish(make_head(2, b"\x03" * 32, 3.0, key), [])
    anchor.publish(make_head(4, b"\x04" * 32, 4.0, key), [])
    assert [h.head.size for h in anchor.heads()] == [3, 4]


def test_a_presenters_old_receipt_key_breaks_nothing_in_a_mock_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """INTERLOCK_RECEIPT_KEY (and a signing key path of their own) in the presenter's
    environment, which would stop a gate built from it: a mock run, whose gates are built
    in this process, ignores both, and interlock's card says its receipt is signed, in
    the log and anchored. (Offline, with real workers: tests/e2e/test_hardening_workers.py.)"""
    monkeypatch.setenv("INTERLOCK_RECEIPT_KEY", "the-presenters-old-hmac-secret")
    monkeypatch.setenv("INTERLOCK_SIGNING_KEY", str(tmp_path / "no-such-key.pem"))
    config = resolve(mode="mock", env={"INTERLOCK_HOME": str(tmp_path / "home"), "PATH": ""})
    engine = Engine(config)
    try:
        run = engine.run(RunChoice(config, "after-answer", optional=OPTIONAL), RUN_DEADLINE_S)
    finally:
        engine.close()
    [col] = [c for c in run.columns if c.name == "interlock"]
    assert run.error is None and col.error is None, (run.error, col.error)
    assert col.verify is not None and col.verify["ok"], col.verify
    facts = {k: col.verify[k] for k in ("signed", "log_place", "receipt_anchored", "unlogged")}
    assert facts == {"signed": True, "log_place": 1, "receipt_anchored": True, "unlogged": 0}


def test_each_journal_has_its_own_anchor_file_named_without_its_password(tmp_path: Path) -> None:
    """The default journal keeps `heads.jsonl` (named or not); another journal's file is
    named by a digest of its location without the password: one per database and schema,
    the same after a password change, and never the password itself."""
    home = tmp_path / "home"
    default = anchor_path(home)
    url = "postgresql://alice:s3cret-pw@db.example/interlock?schema=a"

    assert default == home / "anchor" / "heads.jsonl"
    assert anchor_path(home, str(home / "interlock.sqlite3")) == default
    on_pg = anchor_path(home, url)
    assert on_pg.parent == default.parent and on_pg != default
    assert "s3cret" not in on_pg.name
    assert anchor_path(home, url.replace("s3cret-pw", "rotated")) == on_pg
    assert anchor_path(home, url.replace("schema=a", "schema=b")) != on_pg
    assert anchor_path(home, str(tmp_path / "other.db")) not in (default, on_pg)

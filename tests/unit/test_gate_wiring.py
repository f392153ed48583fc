"""A gate is wired one way: its options are one `GateOptions`, and a `Timing` reaches a
worker process whole and exact, through one serialization."""

from __future__ import annotations

import base64
import dataclasses
import inspect
import stat
from dataclasses import fields
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from interlock import (
    UNSIGNED_APPROVALS,
    Approvers,
    ConfigError,
    FileAnchor,
    Gate,
    GateOptions,
    MemoryStore,
    Owner,
    SigningKey,
    StripeRefund,
    Timing,
)
from interlock.testing import InProcessPayments, PaymentsModel
from interlock_demo.settings.approver import support_approver
from interlock_demo.settings.config import resolve
from interlock_demo.settings.modes import MODES
from interlock_demo.settings.worker import worker_env
from tests.helpers.approvals import APPROVERS
from tests.helpers.gate_rig import AMOUNT, TIMING, GateWorld
from workers.interlock import refund_gate
from workers.process import worker_timing
from workers.protocol.switches import Switches

# Every field off its default, and not one `%g` can spell (it keeps six digits).
ODD = Timing(claim_ttl_s=17.123456789, stripe_timeout_s=3.3, grace_s=1.7, slack_s=2.9)


def test_gate_options_are_the_gates_keywords_with_the_same_defaults() -> None:
    """`GateOptions` has exactly `Gate`'s keyword options, each with `Gate`'s default, so a
    new gate option cannot be left out of the helpers that build gates from options."""
    params = {
        p.name: p.default
        for p in inspect.signature(Gate.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert {f.name: f.default for f in fields(GateOptions)} == params


def test_a_gate_rebuilt_from_its_options_has_the_same_options(tmp_path: Path) -> None:
    """`Gate.from_options(store, effect, gate.options)` is the same gate, its settings
    resolved; the options' repr never shows the signing key's private bytes."""
    store, effect = MemoryStore(), StripeRefund(InProcessPayments(PaymentsModel()))
    key = SigningKey.generate()
    anchor = FileAnchor(tmp_path / "heads.jsonl")
    gate = Gate(
        store,
        effect,
        timing=ODD,
        owner=Owner.current("wiring"),
        signing_key=key,
        max_sends=1,
        new_action_id=lambda: "act_fixed",
        approvers=UNSIGNED_APPROVALS,
        anchors=[anchor],
        log_every=7,
        log_interval_s=2.5,
    )

    again = Gate.from_options(store, effect, gate.options)

    assert again.options == gate.options
    assert (again.options.max_sends, again.options.new_action_id()) == (1, "act_fixed")
    assert again.options.timing == ODD and again.options.monotonic is not None
    assert again.options.signing_key is key and again.options.anchors == (anchor,)
    assert (again.options.log_every, again.options.log_interval_s) == (7, 2.5)
    key.save(tmp_path / "signing-key.pem")
    pem = (tmp_path / "signing-key.pem").read_text()
    raw = key._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    private = [pem.splitlines()[1], raw.hex(), base64.urlsafe_b64encode(raw).decode().rstrip("=")]
    assert not any(text in repr(gate.options) for text in private)


def test_timing_names_every_field_and_round_trips_through_the_environment() -> None:
    """`Timing.to_env` writes every field, and `Timing.from_env` reads back the same timing."""
    assert set(Timing.ENV_NAMES) == {f.name for f in fields(Timing)}
    env = ODD.to_env()
    assert set(env) == set(Timing.ENV_NAMES.values())
    assert Timing.from_env(env) == ODD


def test_a_worker_gets_the_engines_timing_exactly() -> None:
    """The timing a demo run resolved is the timing its worker reads: every field, unrounded,
    with nothing of it inherited from the engine's own environment."""
    config = dataclasses.replace(
        resolve(mode="offline", env={"INTERLOCK_HOME": "/nonexistent/interlock-home"}), timing=ODD
    )
    parent = {"PATH": "/usr/bin", "INTERLOCK_CLAIM_GRACE": "9", "INTERLOCK_SEND_SLACK": "9"}

    env = worker_env(config, None, column="interlock", asks_model=True, parent=parent)

    assert worker_timing(env) == ODD


def test_a_worker_gets_the_approvers_public_keys_and_never_the_private_key(
    tmp_path: Path,
) -> None:
    """The engine's support key signs, 0600 under INTERLOCK_HOME; a worker's environment
    names only the public key file, and a gate built from it verifies support's grants."""
    config = resolve(mode="offline", env={"INTERLOCK_HOME": str(tmp_path)})
    support = support_approver(config)

    env = worker_env(config, None, column="interlock", asks_model=True, parent={})

    assert env[Approvers.ENV_NAME] == str(config.paths.approvers)
    key_text = config.paths.approver_key.read_text()
    assert not any(key_text.strip() in value for value in env.values())
    assert stat.S_IMODE(config.paths.approver_key.stat().st_mode) == 0o600
    lease = support.grant(kind="refund", target="pi_1", cap=1, expires_in_s=60)
    assert Approvers.from_env(env).problem(lease) is None  # type: ignore[union-attr]
    assert support_approver(config).key_id == support.key_id  # made once, then read back


def test_a_worker_without_the_whole_timing_refuses_to_start() -> None:
    """A worker missing a timing setting says which, instead of falling back to the library's
    40 s claim that its engine does not plan for."""
    env = ODD.to_env()
    del env["INTERLOCK_CLAIM_GRACE"]
    with pytest.raises(ConfigError, match="INTERLOCK_CLAIM_GRACE not set"):
        worker_timing(env)


# Where each mode's refunds are looked up, as its receipts must say it (docs/design.md §5).
LOOKED_UP = {"live": "at Stripe", "offline": "at the emulator", "mock": "in memory"}


@pytest.mark.parametrize("mode", list(MODES))
def test_the_demos_receipts_name_where_the_lookup_read(mode: str) -> None:
    """The demo's gate records its lookup check as a read of where its mode keeps the
    refunds: Stripe live, the emulator offline, memory in mock; never Stripe for a stand-in."""
    assert set(LOOKED_UP) == set(MODES)
    world = GateWorld()
    lease = world.grant(AMOUNT)
    options = GateOptions(
        timing=TIMING,
        clock=world.clock,
        sleep=world.clock.sleep,
        monotonic=world.clock.monotonic,
        approvers=APPROVERS,
    )
    gate = refund_gate(
        world.store, world.payments, options, answerer=MODES[mode].answerer, switches=Switches()
    )

    outcome = gate.submit(world.decide(AMOUNT, lease.id))

    state = world.store.action(outcome.action_id)
    assert state is not None and state.receipt is not None
    (lookup,) = [c for c in state.receipt.checks if c["name"] == "lookup"]
    assert lookup["expected"] == (
        f"a refund {LOOKED_UP[mode]} naming this action and matching it, if one exists"
    )

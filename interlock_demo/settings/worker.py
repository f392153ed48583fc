"""One worker launch's environment, built for that launch from the allow-list
(`environment`) and the run's settings."""

from __future__ import annotations

import os
from collections.abc import Mapping

from interlock import Approvers
from interlock.testing import CrashPoint
from interlock_demo.core.columns import column_kind
from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.environment import (
    ENV_STORE,
    PASSED_SETTINGS,
    child_env,
)

# The key the engine gives workers for the loopback emulator: not a real key.
EMULATOR_KEY = "sk_test_loopbackEmulator"


def worker_env(
    config: DemoConfig,
    stripe_base: str | None,
    *,
    column: str,
    asks_model: bool,
    crash_point: CrashPoint | None = None,
    parent: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one worker launch, built for that launch.

    The allow-list (`child_env`), the settings the worker reads, and each secret only
    where this launch needs it: the Stripe key (every worker calls Stripe); the
    Anthropic key only when it will ask the model (`asks_model`: no decision saved
    yet), so a live restart that acts on a saved decision never holds it; the path of
    the gate's receipt key (`INTERLOCK_SIGNING_KEY`, `Paths.signing_key`, made by the
    launcher: `prepare_receipt_signing`) only for the interlock column, the only one that
    signs receipts. An `INTERLOCK_RECEIPT_KEY` or `INTERLOCK_SIGNING_KEY` of ours is not
    on the allow-list: it reaches no worker.
    """
    # The worker's word for "no model", and the library's setting naming the key file.
    from workers.protocol.case import AGENT_NONE, ENV_SIGNING_KEY

    parent = os.environ if parent is None else parent
    env = child_env(parent)
    env.update(
        {
            "INTERLOCK_HOME": str(config.paths.demo),
            ENV_STORE: config.store_location,
            # Public keys only: a worker checks approvals, it can never make one.
            Approvers.ENV_NAME: str(config.paths.approvers),
            "PYTHONUNBUFFERED": "1",
            # Every field, exactly: the worker reads nothing of its timing anywhere else.
            **config.timing.to_env(),
        }
    )
    env.update({k: parent[k] for k in PASSED_SETTINGS if parent.get(k)})
    for name in config.switches.names:
        env[name] = "1"
    if crash_point is not None:
        env["INTERLOCK_CRASH"] = crash_point.value
    if column_kind(column).signs_receipts:
        env[ENV_SIGNING_KEY] = str(config.paths.signing_key)
    if config.run_mode.needs_keys:
        assert config.stripe_key is not None and config.anthropic_key is not None
        env["STRIPE_SECRET_KEY"] = config.stripe_key.value
        env["INTERLOCK_AGENT"] = "anthropic" if asks_model else AGENT_NONE
        if asks_model:
            env["ANTHROPIC_API_KEY"] = config.anthropic_key.value
    else:
        env["STRIPE_SECRET_KEY"] = EMULATOR_KEY
        env["INTERLOCK_AGENT"] = "scripted" if asks_model else AGENT_NONE
        if stripe_base is not None:
            env["INTERLOCK_STRIPE_BASE"] = stripe_base
    return env

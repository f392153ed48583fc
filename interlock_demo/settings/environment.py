"""What a child process gets of our environment: one allow-list, and what each child needs.

Every process the demo starts is given an environment built here (a worker's: by
`worker.worker_env`, on top of `child_env`), never the whole of ours, so another
program's token in the presenter's shell reaches none of them.
`tests/unit/test_spawn_env.py` reads every spawn in the tree and fails on one that is not.
Each builder starts from `child_env`'s allow-list; what else any child may take from our
environment is named beside it below, so all of it is read in one place.

- `child_env`: the allow-list alone (a tool, the Temporal dev server, the worker check).
- `worker.worker_env`: one worker launch: the allow-list, `PASSED_SETTINGS`, the settings
  the engine resolved for it, and each secret only when that launch needs it.
- `demo_env`: a child that is the demo itself (e2e-report's headless runs, a browser
  tab's app, `record`'s app): the demo's own settings, and the user's keys when it may
  run live.
- `bench_env`: a benchmark: the demo's settings, no key.
- `stripe_cli_env`: the `stripe` CLI asked for the key `stripe login` saved.

Nothing here logs or prints what it passes on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# -- What may pass from our environment to a child, by who takes it ---------------------
# Every child: what Python, the SDKs, TLS and the Temporal CLI need to run. Everything
# else (other programs' tokens) stays with us.
INHERITED = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "PYTHONPATH",
    "SYSTEMROOT",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    # A venue network that only lets traffic out through a proxy: the SDKs must use it too.
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
)
INHERITED_PREFIXES = ("LC_",)
# A worker, on top: the settings it reads that the engine does not resolve itself, when
# set (the timing is resolved: `DemoConfig.timing`, written whole by `Timing.to_env`),
# and the file a run's traces go to (`interlock-demo --otel-file`: `workers.traces`),
ENV_OTEL_FILE = "INTERLOCK_OTEL_FILE"
PASSED_SETTINGS = ("INTERLOCK_MODEL", ENV_OTEL_FILE)
# (The receipt key is the demo's own, made under INTERLOCK_HOME: `settings.receipt_key`;
# the one column that signs receipts is told its path.)
# The demo itself or a benchmark: all of the demo's own settings (timings, the store, the
# model), which start so,
DEMO_PREFIX = "INTERLOCK_"
# but not the settings of the presenter's own gates' receipt keys: the demo signs with its
# own key and verifies with its public key list, whatever these say, and a child gate
# given an HMAC secret from before signed receipts would refuse to start.
NOT_PASSED = ("INTERLOCK_RECEIPT_KEY", "INTERLOCK_SIGNING_KEY", "INTERLOCK_VERIFY_KEYS")
# The demo itself when it may run live: the user's keys, under the names `keys.py` finds
# them by, and where the `stripe` CLI keeps what `stripe login` saved (the Stripe key's
# fallback), which the `stripe` CLI itself gets too.
KEY_NAMES = ("STRIPE_SECRET_KEY", "ANTHROPIC_API_KEY")
STRIPE_CLI_SETTINGS = ("XDG_CONFIG_HOME",)

# -- Set by the demo for a worker -------------------------------------------------------
# Where the journal lives when not in INTERLOCK_HOME: a PostgreSQL URL or a SQLite path
# (the user may set it for us too: `config.resolve`).
ENV_STORE = "INTERLOCK_STORE"


def child_env(parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of our environment that every child process gets."""
    parent = os.environ if parent is None else parent
    return {k: v for k, v in parent.items() if k in INHERITED or k.startswith(INHERITED_PREFIXES)}


def demo_env(
    *, home: Path | None = None, keys: bool = False, parent: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a child that is the demo itself.

    The allow-list, every `INTERLOCK_*` setting but `NOT_PASSED` (the child resolves its
    timings and store as we would, and gives its workers only what each needs), `INTERLOCK_HOME`
    set to `home` when given, and with `keys` the user's keys and where `stripe login`
    keeps one: only for a child that may run live (a browser tab's app can switch modes).
    """
    parent = os.environ if parent is None else parent
    env = child_env(parent)
    env.update(
        {k: v for k, v in parent.items() if k.startswith(DEMO_PREFIX) and k not in NOT_PASSED}
    )
    if home is not None:
        env["INTERLOCK_HOME"] = str(home)
    if keys:
        env.update({k: parent[k] for k in (*KEY_NAMES, *STRIPE_CLI_SETTINGS) if parent.get(k)})
    return env


def bench_env(parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """A benchmark's environment: the demo's settings (it reads the timings and the store),
    no key, and no receipt key setting (`NOT_PASSED`: no benchmark signs with the user's)."""
    return demo_env(parent=parent)


def stripe_cli_env(parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The `stripe` CLI's environment when asked for its saved key: the allow-list (its
    config is under HOME) and where else its config may be."""
    parent = os.environ if parent is None else parent
    env = child_env(parent)
    env.update({k: parent[k] for k in STRIPE_CLI_SETTINGS if parent.get(k)})
    return env

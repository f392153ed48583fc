"""Mode, keys, timing and paths for a demo run, checked before anything starts.

Default mode: live when a Stripe test key and an Anthropic key are found, else offline
(the loopback emulator and the scripted proposal), saying which key was missing. A Stripe
key that is set but is not a test key is refused in every mode. A live run never inherits
the emulated switches; asking for one with `--live` is a usage error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from interlock import ConfigError, Switches, Timing
from interlock._config import EMULATED_SWITCHES
from interlock_demo.keys import Secret, find_anthropic_key, find_stripe_key

DEMO_CLAIM_TTL_S = 15.0
DEMO_STRIPE_TIMEOUT_S = 10.0
MODES = ("live", "offline", "mock")
ENGINES = ("standalone", "temporal")
# The key the engine gives workers for the loopback emulator: not a real key.
EMULATOR_KEY = "sk_test_loopbackEmulator"


class UsageError(ValueError):
    """Bad usage or configuration (exit 2); the message says what to do."""


@dataclass(frozen=True)
class Paths:
    """Where a demo run keeps its state: everything under `INTERLOCK_HOME/demo/`."""

    home: Path

    @property
    def demo(self) -> Path:
        """The demo's folder."""
        return self.home / "demo"

    @property
    def store(self) -> Path:
        """The journal (cases' approvals and interlock's actions and receipts)."""
        return self.demo / "interlock.sqlite3"

    @property
    def cases(self) -> Path:
        """Case files the workers read."""
        return self.demo / "cases"

    @property
    def logs(self) -> Path:
        """Workers' stderr and other logs."""
        return self.demo / "logs"

    @property
    def screenshots(self) -> Path:
        """Screenshots the app saves."""
        return self.demo / "screenshots"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Paths:
        """`INTERLOCK_HOME`, default `.interlock/`."""
        env = os.environ if env is None else env
        return cls(Path(env.get("INTERLOCK_HOME") or ".interlock").absolute())


@dataclass(frozen=True)
class DemoConfig:
    """Everything a run needs to know before it starts."""

    mode: str
    engine: str
    timing: Timing
    switches: Switches
    paths: Paths
    stripe_key: Secret | None = field(default=None, repr=False)
    anthropic_key: Secret | None = field(default=None, repr=False)
    stripe_base: str | None = None
    fallback_reason: str | None = None
    missing: tuple[str, ...] = ()

    @property
    def stripe_label(self) -> str:
        """`test-mode`, `emulator` or `mock`."""
        return {"live": "test-mode", "offline": "emulator", "mock": "mock"}[self.mode]

    @property
    def model_label(self) -> str:
        """The model the agent uses: the real model id, or the scripted proposal."""
        if self.mode == "live":
            from workers.agent import DEFAULT_MODEL, ENV_MODEL

            return os.environ.get(ENV_MODEL) or DEFAULT_MODEL
        return "scripted proposal"

    def with_mode(self, mode: str) -> DemoConfig:
        """The same configuration in another mode (the app's mock toggle)."""
        if mode == "live" and self.missing:
            raise UsageError(_missing_text(self.missing))
        switches = Switches() if mode == "live" else self.switches
        return DemoConfig(
            mode=mode,
            engine=self.engine,
            timing=self.timing,
            switches=switches,
            paths=self.paths,
            stripe_key=self.stripe_key,
            anthropic_key=self.anthropic_key,
            stripe_base=self.stripe_base if mode == "offline" else None,
            fallback_reason=self.fallback_reason if mode == "offline" else None,
            missing=self.missing,
        )


def demo_timing(env: Mapping[str, str] | None = None) -> Timing:
    """The demo's timing: a 15 s claim and a 10 s Stripe timeout unless the user set them."""
    return Timing.from_env(
        env, claim_ttl_s=DEMO_CLAIM_TTL_S, stripe_timeout_s=DEMO_STRIPE_TIMEOUT_S
    )


def resolve(
    *,
    mode: str | None = None,
    engine: str = "standalone",
    emulate_24h: bool = False,
    no_lookup: bool = False,
    stripe_base: str | None = None,
    env: Mapping[str, str] | None = None,
) -> DemoConfig:
    """Check keys, mode, switches and timing; raise `UsageError` (or `KeyRefusedError`)."""
    env = os.environ if env is None else env
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if mode is not None and mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    stripe_key = find_stripe_key(env)  # refuses a non-test key in every mode
    anthropic_key = find_anthropic_key(env)
    missing = tuple(
        name
        for name, found in (
            ("a Stripe test key (STRIPE_SECRET_KEY or `stripe login`)", stripe_key),
            ("ANTHROPIC_API_KEY", anthropic_key),
        )
        if found is None
    )
    fallback = None
    if mode is None:
        if missing:
            mode = "offline"
            fallback = "live mode needs " + " and ".join(missing) + ", not found"
        else:
            mode = "live"
    if mode == "live" and missing:
        raise UsageError(_missing_text(missing))
    if mode == "live" and (emulate_24h or no_lookup):
        raise UsageError(
            "--emulate-24h and --no-lookup are emulated switches for offline and mock runs; "
            "a live run uses Stripe's real keys and lookup. Drop the switch or use --offline."
        )
    if mode == "mock" and engine == "temporal":
        raise UsageError("--mock runs in-process without Temporal; drop --engine temporal")
    if stripe_base is not None and mode != "offline":
        raise UsageError("--stripe-base points offline runs at an emulator; add --offline")
    try:
        timing = demo_timing(env)
        if mode == "live":
            switches = Switches()
        else:
            from_env = Switches.from_env(env)
            switches = Switches(
                emulate_24h=emulate_24h or from_env.emulate_24h,
                no_lookup=no_lookup or from_env.no_lookup,
            )
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return DemoConfig(
        mode=mode,
        engine=engine,
        timing=timing,
        switches=switches,
        paths=Paths.from_env(env),
        stripe_key=stripe_key,
        anthropic_key=anthropic_key,
        stripe_base=stripe_base,
        fallback_reason=fallback,
        missing=missing,
    )


def worker_env(config: DemoConfig, stripe_base: str | None) -> dict[str, str]:
    """The environment of a worker process: no inherited keys or switches, only what it needs."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("STRIPE_SECRET_KEY", "ANTHROPIC_API_KEY", "INTERLOCK_CRASH")
        and k not in EMULATED_SWITCHES
    }
    env.update(
        {
            "INTERLOCK_HOME": str(config.paths.demo),
            "INTERLOCK_STORE": str(config.paths.store),
            "INTERLOCK_CLAIM_TTL": f"{config.timing.claim_ttl_s:g}",
            "INTERLOCK_STRIPE_TIMEOUT": f"{config.timing.stripe_timeout_s:g}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name in config.switches.names:
        env[name] = "1"
    if config.mode == "live":
        assert config.stripe_key is not None and config.anthropic_key is not None
        env["STRIPE_SECRET_KEY"] = config.stripe_key.value
        env["ANTHROPIC_API_KEY"] = config.anthropic_key.value
        env["INTERLOCK_AGENT"] = "anthropic"
    else:
        env["STRIPE_SECRET_KEY"] = EMULATOR_KEY
        env["INTERLOCK_AGENT"] = "scripted"
        if stripe_base is not None:
            env["INTERLOCK_STRIPE_BASE"] = stripe_base
    return env


def _missing_text(missing: tuple[str, ...]) -> str:
    return (
        "live mode needs " + " and ".join(missing) + ": set them in the environment, or "
        "rehearse with --offline (local Stripe emulator, scripted model) or --mock"
    )

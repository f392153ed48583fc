"""The user's choices for a demo run (mode, engine, keys, switches, store), checked before
anything starts.

Default mode: live when a Stripe test key and an Anthropic key are found, else offline
(the loopback emulator and the scripted proposal), saying which key was missing. A Stripe
key that is set but is not a test key is refused in every mode. A live run never inherits
the emulated switches; asking for one with `--live` is a usage error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from interlock import (
    ConfigError,
    PostgresStore,
    Store,
    Timing,
    is_postgres_url,
    open_store,
)
from interlock_demo.errors import UsageError
from interlock_demo.settings.environment import ENV_STORE
from interlock_demo.settings.keys import Secret, find_anthropic_key, find_stripe_key
from interlock_demo.settings.modes import ENGINES, Mode, check_engine, mode_named
from interlock_demo.settings.paths import Paths
from interlock_demo.settings.private import private_dir
from interlock_demo.settings.timing import demo_timing
from scenarios import SWITCHES
from workers.protocol.switches import Switches


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
    # `--store` / INTERLOCK_STORE: a postgresql:// URL or a SQLite path; None is the SQLite
    # file under INTERLOCK_HOME. May hold a password: shown only through `store_label`.
    store: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_engine(mode_named(self.mode), self.engine)

    @property
    def run_mode(self) -> Mode:
        """Its mode's row: what runs in this mode can do."""
        return mode_named(self.mode)

    @property
    def missing_keys(self) -> tuple[str, ...]:
        """The keys live mode needs and lacks here, a few words each (for the screen)."""
        return tuple(
            name
            for name, key in (
                ("a Stripe test key", self.stripe_key),
                ("ANTHROPIC_API_KEY", self.anthropic_key),
            )
            if key is None
        )

    @property
    def store_location(self) -> str:
        """Where the journal lives, as workers are told (`INTERLOCK_STORE`)."""
        return self.store or str(self.paths.store)

    @property
    def store_backend(self) -> str:
        """`postgresql` or `sqlite` (`memory` is the mock engine's own, per run)."""
        return "postgresql" if is_postgres_url(self.store_location) else "sqlite"

    @property
    def store_label(self) -> str:
        """Where the journal lives, fit for the screen and the run JSON: no password."""
        return PostgresStore.describe(self.store) if self.store else "INTERLOCK_HOME"

    def open_store(self) -> Store:
        """Open the journal: the PostgreSQL store, else the SQLite file (made 0600 first)."""
        if self.store is None:
            return open_store(self.paths.prepare().store)
        if self.store_backend == "sqlite":
            private_dir(self.paths.demo)
        return open_store(self.store)

    @property
    def stripe_label(self) -> str:
        """`test-mode`, `emulator` or `mock`."""
        return self.run_mode.stripe_label

    @property
    def model_label(self) -> str:
        """The model the agent uses: the real model id, or the scripted proposal."""
        if self.run_mode.real_model:
            from workers.protocol.case import DEFAULT_MODEL, ENV_MODEL

            return os.environ.get(ENV_MODEL) or DEFAULT_MODEL
        return "scripted proposal"

    def with_mode(self, mode: str) -> DemoConfig:
        """The same configuration in another mode (the app's mock toggle); `UsageError` when
        the mode cannot run here (live without keys, mock on Temporal)."""
        row = mode_named(mode)
        if row.needs_keys and self.missing:
            raise UsageError(_missing_text(self.missing))
        return DemoConfig(
            mode=mode,
            engine=self.engine,
            timing=self.timing,
            switches=self.switches if row.takes_switches else Switches(),
            paths=self.paths,
            stripe_key=self.stripe_key,
            anthropic_key=self.anthropic_key,
            stripe_base=self.stripe_base if row.emulator else None,
            fallback_reason=self.fallback_reason if row.emulator else None,
            missing=self.missing,
            store=self.store,
        )


def resolve(
    *,
    mode: str | None = None,
    engine: str = "standalone",
    emulate_24h: bool = False,
    no_lookup: bool = False,
    stripe_base: str | None = None,
    store: str | None = None,
    env: Mapping[str, str] | None = None,
) -> DemoConfig:
    """Check keys, mode, switches and timing; raise `UsageError` (or `KeyRefusedError`)."""
    env = os.environ if env is None else env
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if mode is not None:
        mode_named(mode)
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
    row = mode_named(mode)
    if row.needs_keys and missing:
        raise UsageError(_missing_text(missing))
    if not row.takes_switches and (emulate_24h or no_lookup):
        raise UsageError(
            " and ".join(s.flag for s in SWITCHES) + " are emulated switches for offline and "
            "mock runs; a live run uses Stripe's real keys and lookup. Drop the switch or use "
            "--offline."
        )
    check_engine(row, engine)
    if stripe_base is not None and not row.emulator:
        raise UsageError("--stripe-base points offline runs at an emulator; add --offline")
    store = store or env.get(ENV_STORE) or None
    if store is not None and "://" in store and not is_postgres_url(store):
        raise UsageError(
            f"--store {PostgresStore.describe(store)!r} is neither a postgresql:// URL nor a path; "
            "give postgresql://user@host/db (add ?schema=NAME for a schema of its own) or a "
            "SQLite file's path"
        )
    try:
        timing = demo_timing(env)
        if not row.takes_switches:
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
        store=store,
    )


def _missing_text(missing: tuple[str, ...]) -> str:
    return (
        "live mode needs " + " and ".join(missing) + ": set them in the environment, or "
        "rehearse with --offline (local Stripe emulator, scripted model) or --mock"
    )

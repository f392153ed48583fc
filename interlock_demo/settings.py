"""Mode, keys, timing and paths for a demo run, checked before anything starts.

Default mode: live when a Stripe test key and an Anthropic key are found, else offline
(the loopback emulator and the scripted proposal), saying which key was missing. A Stripe
key that is set but is not a test key is refused in every mode. A live run never inherits
the emulated switches; asking for one with `--live` is a usage error.

Two rules for what a run leaves behind and hands on, each written once here:
- Files under `INTERLOCK_HOME` are the user's alone: folders are made 0700 and files
  0600 when they are created (`private_dir`, `open_private`, `Paths.prepare`), and the
  processes the demo starts run with `PRIVATE_UMASK`. The demo never changes its own
  umask, so what it saves elsewhere (`screenshots --out`) keeps the user's.
- A child process gets an allow-listed environment (`environment.child_env`, and what
  that child needs on top: `environment` says which), never the whole of ours, and a
  worker gets each secret only when that launch needs it (`worker_env`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from interlock import (
    Approver,
    Approvers,
    ConfigError,
    PostgresStore,
    Store,
    Timing,
    is_postgres_url,
    open_store,
)
from interlock.testing import CrashPoint
from interlock_demo.core.columns import column_kind
from interlock_demo.environment import ENV_RECEIPT_KEY, child_env
from interlock_demo.errors import UsageError
from interlock_demo.keys import Secret, find_anthropic_key, find_stripe_key
from scenarios import SWITCHES, Switches
from workers.texts import EMULATOR, MOCK, STRIPE

DEMO_CLAIM_TTL_S = 15.0
DEMO_STRIPE_TIMEOUT_S = 10.0
DEMO_MAX_CLAIM_TTL_S = 300.0
ENGINES = ("standalone", "temporal")
TEMPORAL = "temporal"


@dataclass(frozen=True)
class Mode:
    """A way to run the demo, with what it can and cannot do: one row of `MODES`.

    Code asks the row (`config.run_mode.in_process`) instead of comparing mode names, so a
    new mode is a new row here and the code that uses what it changes.
    """

    name: str
    # The word the screen labels its runs with (the banner, a mock run's every line).
    banner: str
    # Payments at Stripe test mode (so no emulated switch applies), and decisions by the
    # real model (else the scripted proposal decides).
    real_stripe: bool
    real_model: bool
    # Payments at the loopback Stripe emulator, with the same SDK code path.
    emulator: bool
    # Simulated in the demo's own process: in-memory payments, no worker process, no
    # Temporal (whose workers are processes), waits shown and not waited.
    in_process: bool
    # Who answers the refund calls, in the workers' words (`workers.texts`).
    answerer: str
    # The run JSON's `settings.stripe`.
    stripe_label: str

    @property
    def needs_keys(self) -> bool:
        """Whether it runs on the user's keys (Stripe's, Anthropic's): it calls either."""
        return self.real_stripe or self.real_model

    @property
    def takes_switches(self) -> bool:
        """Whether the emulated switches (`--emulate-24h`, `--no-lookup`) apply to it."""
        return not self.real_stripe

    def refusal(self, engine: str) -> str | None:
        """Why this mode cannot run on `engine`, in words, or None when it can."""
        if engine == TEMPORAL and self.in_process:
            return f"{self.name} runs are simulated in-process, without Temporal"
        return None


def line_mark(mode: Mode) -> str:
    """What begins every line a view prints of a run in this mode: `MOCK. ` for a simulated
    one, so that no line of it can pass for a real run; nothing otherwise."""
    return f"{mode.banner}. " if mode.in_process else ""


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode(
            "live",
            banner="LIVE",
            real_stripe=True,
            real_model=True,
            emulator=False,
            in_process=False,
            answerer=STRIPE,
            stripe_label="test-mode",
        ),
        Mode(
            "offline",
            banner="OFFLINE",
            real_stripe=False,
            real_model=False,
            emulator=True,
            in_process=False,
            answerer=EMULATOR,
            stripe_label="emulator",
        ),
        Mode(
            "mock",
            banner="MOCK",
            real_stripe=False,
            real_model=False,
            emulator=False,
            in_process=True,
            answerer=MOCK,
            stripe_label="mock",
        ),
    )
}
"""Every mode, by name, in the order the command line and the HTTP API list them."""


def mode_named(name: str) -> Mode:
    """The mode called `name`; `UsageError` naming the modes there are."""
    found = MODES.get(name)
    if found is None:
        raise UsageError(f"unknown mode {name!r}; use one of {', '.join(MODES)}")
    return found


def check_engine(mode: Mode, engine: str) -> None:
    """`UsageError` when `mode` cannot run on `engine` (mock on Temporal), saying what to do."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    why = mode.refusal(engine)
    if why is not None:
        raise UsageError(f"{why}; drop --engine {engine} (in the app, t switches engines)")


# The key the engine gives workers for the loopback emulator: not a real key.
EMULATOR_KEY = "sk_test_loopbackEmulator"
# What the demo's child processes create is theirs alone: files 0600, folders 0700.
PRIVATE_UMASK = 0o077
# Settings a worker reads that the engine does not resolve itself, passed on when set.
# (The timing is resolved: `DemoConfig.timing`, written whole by `Timing.to_env`.)
PASSED_SETTINGS = ("INTERLOCK_MODEL",)
# Where the journal lives when not in INTERLOCK_HOME: a PostgreSQL URL or a SQLite path.
ENV_STORE = "INTERLOCK_STORE"


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
    def approver_key(self) -> Path:
        """Support's private approval key: the engine grants with it; no worker reads it."""
        return self.demo / "support-approver.key"

    @property
    def approvers(self) -> Path:
        """The approvers' public keys (support's): what workers check approvals with."""
        return self.demo / "approvers.pem"

    @property
    def logs(self) -> Path:
        """Workers' stderr and other logs."""
        return self.demo / "logs"

    @property
    def screenshots(self) -> Path:
        """Screenshots the app saves."""
        return self.demo / "screenshots"

    def prepare(self) -> Paths:
        """Make the demo's folders (0700) and its journal file (0600) before a run uses them.

        The journal is created here, empty, so that SQLite, which gives its `-wal` and
        `-shm` files the database file's mode, makes them 0600 too. A `demo` folder left
        open by an older version is closed to other users here, once, in this one place.
        """
        private_dir(self.demo)
        if self.demo.stat().st_mode & 0o077:
            self.demo.chmod(0o700)
        for folder in (self.cases, self.logs):
            private_dir(folder)
        if not self.store.exists():
            create_private_journal(self.store)
        return self

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
            from workers.agent import DEFAULT_MODEL, ENV_MODEL

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


def demo_timing(env: Mapping[str, str] | None = None) -> Timing:
    """The demo's timing: a 15 s claim and a 10 s Stripe timeout unless the user set them.

    A room waits out the claim live, so the demo refuses one longer than
    `DEMO_MAX_CLAIM_TTL_S` (the library itself accepts up to a day).
    """
    timing = Timing.from_env(
        env, claim_ttl_s=DEMO_CLAIM_TTL_S, stripe_timeout_s=DEMO_STRIPE_TIMEOUT_S
    )
    if timing.claim_ttl_s > DEMO_MAX_CLAIM_TTL_S:
        raise ConfigError(
            f"INTERLOCK_CLAIM_TTL={timing.claim_ttl_s:g} s is refused for the demo: a room "
            f"would wait that long for the claim; use at most {DEMO_MAX_CLAIM_TTL_S:g} s "
            f"(the demo's default is {DEMO_CLAIM_TTL_S:g})"
        )
    return timing


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


SUPPORT = "support"
"""The demo's approver: the name its signed approvals are granted in."""


def support_approver(config: DemoConfig) -> Approver:
    """Support's approver, whose key signs every approval the demo grants.

    Made once under `INTERLOCK_HOME` (the private key 0600, its public key beside it for
    the workers, `worker_env`) and read back after; never shown, never given to a worker.
    A mock run, which writes no files, signs with a key of this process instead.
    """
    if config.run_mode.in_process:
        return _mock_support()
    return paths_support_approver(config.paths)


def paths_support_approver(paths: Paths) -> Approver:
    """Support's approver under `paths` (see `support_approver`), made there once."""
    if not paths.approver_key.exists():
        fresh = Approver.generate(SUPPORT)
        _place(paths.approver_key, fresh.save)
    approver = Approver.load(SUPPORT, paths.approver_key)
    if not paths.approvers.exists():
        _place(paths.approvers, lambda path: _write_private(path, approver.public_pem()))
    return approver


@functools.cache
def _mock_support() -> Approver:
    return Approver.generate(SUPPORT)


def _write_private(path: Path, data: bytes) -> None:
    with open_private(path, "wb") as f:
        f.write(data)


def _place(path: Path, write: Callable[[Path], object]) -> None:
    """Write a new private file whole under another name, then link it into place unless
    another engine placed one first (so no reader ever sees half a key)."""
    private_dir(path.parent)
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    write(fresh)
    try:
        os.link(fresh, path)
    except FileExistsError:
        pass
    finally:
        fresh.unlink()


def create_private_journal(path: Path) -> None:
    """Create an empty 0600 journal at `path` unless one appeared meanwhile.

    SQLite gives its `-wal` and `-shm` files the database file's mode, so they are 0600
    too. The folder must exist (`private_dir`).

    Made under another name and linked into place, so that no descriptor on the journal
    itself is ever opened and closed here: closing one would drop every SQLite lock this
    process holds on it (POSIX locks belong to the process), and another engine in this
    process may be writing to it.
    """
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        os.link(fresh, path)
    except FileExistsError:
        pass
    finally:
        fresh.unlink()


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents as 0700 folders; existing ones are left alone.

    (`Path.mkdir(parents=True)` would give the parents the default mode.)
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    return path


def open_private(path: Path, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """Open a file under `INTERLOCK_HOME` for writing; created 0600 in a 0700 folder.

    `mode` is `open()`'s ("a", "ab", "w", "wb"); an existing file keeps its mode.
    """
    private_dir(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), mode, **kwargs)


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
    yet), so a live restart that acts on a saved decision never holds it; the receipt
    key only for the interlock column, the only one that signs receipts.
    """
    from workers.process import AGENT_NONE  # the worker's word for "no model"

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
    if column_kind(column).signs_receipts and parent.get(ENV_RECEIPT_KEY):
        env[ENV_RECEIPT_KEY] = parent[ENV_RECEIPT_KEY]
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


def _missing_text(missing: tuple[str, ...]) -> str:
    return (
        "live mode needs " + " and ".join(missing) + ": set them in the environment, or "
        "rehearse with --offline (local Stripe emulator, scripted model) or --mock"
    )

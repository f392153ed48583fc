"""The demo's modes (live, offline, mock), one row each, and the engines they run on."""

from __future__ import annotations

from dataclasses import dataclass

from interlock_demo.errors import UsageError
from workers.protocol.words import EMULATOR, MOCK, STRIPE

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
    # Who answers the refund calls, in the workers' words (`workers.protocol.words`).
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

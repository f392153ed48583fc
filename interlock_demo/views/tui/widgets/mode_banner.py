"""The mode label at the top: a striped MOCK banner, the offline label, or live settings.

One line at every width: the banner is made of parts, each said in a long and a short
way, some of which may go (live mode's model, a fallback's reason); it shows the fullest
wording that fits its width whole, never a line cut short. What must stay (the mode, and
any emulated switch, which changes what a run means) stays at 80 columns.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

from interlock_demo.settings.config import DemoConfig
from interlock_demo.settings.modes import MODES
from scenarios import SWITCHES

_STRIPES = "▞▚"
_SEP = " · "
# A part of the banner: its wordings, fullest first; an empty one means it may go.
Part = Sequence[str]


def banner_parts(config: DemoConfig) -> list[Part]:
    """What the banner says for this configuration, part by part."""
    mode = config.run_mode
    on = [s for s in SWITCHES if getattr(config.switches, s.field)]
    emulated: list[Part] = []
    if on:
        words = ", ".join(s.words for s in on)
        short = ", ".join(s.short for s in on)
        emulated = [(f"EMULATED: {words}", f"EMULATED: {short}")]
    if mode.in_process:
        head = f"{_STRIPES} {mode.banner} {_STRIPES}"
        return [
            (
                f"{head} simulated in memory, scripted model, nothing sent to Stripe",
                f"{head} simulated in memory, nothing sent to Stripe",
                head,
            ),
            *emulated,
        ]
    if mode.emulator:
        parts: list[Part] = [
            (
                f"{mode.banner} REHEARSAL: local Stripe emulator, scripted model, real workers",
                f"{mode.banner} REHEARSAL: Stripe emulator, scripted model",
                f"{mode.banner} REHEARSAL",
            ),
            *emulated,
        ]
        if config.fallback_reason:
            keys = " and ".join(config.missing_keys)
            parts.append((f"live needs {keys}", "no keys for live", ""))
        return parts
    key = config.stripe_key.source if config.stripe_key else "missing"
    return [
        (f"{mode.banner} · Stripe test mode", mode.banner),
        (
            f"claim {config.timing.claim_ttl_s:g} s · timeout {config.timing.stripe_timeout_s:g} s",
            f"claim {config.timing.claim_ttl_s:g} s",
        ),
        (f"model {config.model_label}", ""),
        (f"key from {key}", ""),
    ]


def wordings(parts: Sequence[Part]) -> Iterator[str]:
    """Every way to say the parts, one wording of each (an empty one leaves it out)."""
    for choice in itertools.product(*parts):
        yield _SEP.join(words for words in choice if words)


def fitting(parts: Sequence[Part], width: int) -> str:
    """The fullest wording of `parts` that fits in `width` cells, else the shortest."""
    said = list(wordings(parts))
    fits = [w for w in said if cell_len(w) <= width]
    return max(fits, key=cell_len) if fits else min(said, key=cell_len)


class ModeBanner(Widget):
    """Says, before anything else, what kind of run the screen shows, on one line."""

    DEFAULT_CSS = """
    ModeBanner {
        height: 1;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: list[Part] = []

    def show(self, config: DemoConfig) -> None:
        """Label the screen for this configuration."""
        for name in MODES:
            self.set_class(name == config.mode, f"-{name}")
        self._parts = banner_parts(config)
        self.refresh()

    @property
    def text(self) -> str:
        """What the banner says at its width now."""
        return fitting(self._parts, self.size.width) if self._parts else ""

    def render(self) -> Text:
        return Text(self.text, style="bold", no_wrap=True)

"""The mode label at the top: a striped MOCK banner, the offline label, or live settings."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from interlock_demo.settings import MODES, DemoConfig

_STRIPES = "▞▚"


class ModeBanner(Static):
    """Says, before anything else, what kind of run the screen shows, on one line."""

    def show(self, config: DemoConfig) -> None:
        """Render the label for this configuration: one text per mode, whatever the width
        (it fits 80 columns; only the emulated switches and a fallback's reason may be cut)."""
        mode = config.run_mode
        for name in MODES:
            self.set_class(name == mode.name, f"-{name}")
        switches = ", ".join(config.switches.names)
        emulated = f"   EMULATED: {switches}" if switches else ""
        if mode.in_process:
            text = (
                f"{_STRIPES} {mode.banner} {_STRIPES} simulated in memory, scripted model, "
                f"nothing sent to Stripe{emulated}"
            )
        elif mode.emulator:
            why = f"  ({config.fallback_reason})" if config.fallback_reason else ""
            text = f"{mode.banner} REHEARSAL: local Stripe emulator, scripted model, real workers"
            text += f"{emulated}{why}"
        else:
            key = config.stripe_key.source if config.stripe_key else "missing"
            text = (
                f"{mode.banner} · Stripe test mode · claim {config.timing.claim_ttl_s:g} s · "
                f"timeout {config.timing.stripe_timeout_s:g} s · model {config.model_label} · key "
                f"from {key}"
            )
        self.update(Text(text, style="bold", no_wrap=True, overflow="ellipsis"))

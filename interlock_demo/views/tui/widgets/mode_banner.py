"""The mode label at the top: a striped MOCK banner, the offline label, or live settings."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from interlock_demo.settings import DemoConfig

_STRIPES = "▞▚" * 6


class ModeBanner(Static):
    """Says, before anything else, what kind of run the screen shows, on one line."""

    def show(self, config: DemoConfig, *, width: int = 160) -> None:
        """Render the label for this configuration, short enough for `width` cells."""
        self.set_class(config.mode == "mock", "-mock")
        self.set_class(config.mode == "offline", "-offline")
        self.set_class(config.mode == "live", "-live")
        switches = ", ".join(config.switches.names)
        emulated = f"   EMULATED: {switches}" if switches else ""
        if config.mode == "mock":
            long = (
                f"{_STRIPES} MOCK {_STRIPES}  simulated: in-memory payments, scripted model, "
                f"no processes, nothing sent to Stripe{emulated}  {_STRIPES} MOCK {_STRIPES}"
            )
            short = f"▞▚ MOCK ▞▚ simulated in-process, nothing sent to Stripe{emulated}"
        elif config.mode == "offline":
            why = f"  ({config.fallback_reason})" if config.fallback_reason else ""
            long = (
                "OFFLINE REHEARSAL: local Stripe emulator on 127.0.0.1, scripted model, "
                f"real worker processes{emulated}{why}"
            )
            short = f"OFFLINE REHEARSAL: local emulator, real processes{emulated}"
        else:
            key = config.stripe_key.source if config.stripe_key else "missing"
            long = (
                f"LIVE · Stripe test mode (key from {key}) · model {config.model_label} · "
                f"claim {config.timing.claim_ttl_s:g} s · Stripe timeout "
                f"{config.timing.stripe_timeout_s:g} s"
            )
            short = (
                f"LIVE · Stripe test mode · claim {config.timing.claim_ttl_s:g} s · "
                f"timeout {config.timing.stripe_timeout_s:g} s"
            )
        text = long if len(long) <= width - 2 else short
        self.update(Text(text, style="bold", no_wrap=True, overflow="ellipsis"))

"""The run's header: scenario, engine, mode, status and elapsed time."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from scenarios import SCENARIOS


class RunHeader(Static):
    """One line about the chosen scenario, and the run once it started."""

    def show(
        self, *, scenario: str, mode: str, engine: str, checked: bool, run: dict[str, Any] | None
    ) -> None:
        """Render the header from the selection and the run's snapshot (or None when idle)."""
        sc = SCENARIOS[scenario]
        mock = mode == "mock"
        text = Text()
        if mock:
            text.append("MOCK ", style="bold reverse")
        text.append(f"[{sc.key}] {sc.title}", style="bold")
        text.append(f"   engine {engine} · mode {mode}")
        text.append(" · checked column" if checked else "")
        if run is None:
            text.append("   ready: press enter to run", style="italic")
        else:
            status = run["status"] if not run["error"] else "failed"
            label = f"{status}{' (MOCK)' if mock else ''}"
            text.append(f"   {label} · {run['elapsed_s']:.1f} s", style="bold")
        text.append(f"\n{sc.story}  Wanted in Stripe: {sc.wanted_text}.")
        self.update(text)

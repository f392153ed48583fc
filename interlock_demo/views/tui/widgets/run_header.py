"""The run's header, one line: scenario, mode, engine, status, time, presenter's next step."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from interlock_demo.core.run import RunSnapshot
from scenarios import SCENARIOS


class RunHeader(Static):
    """One line about the chosen scenario, and the run once it started."""

    def show(
        self,
        *,
        scenario: str,
        mode: str,
        engine: str,
        checked: bool,
        run: RunSnapshot | None,
        presenter: str | None = None,
    ) -> None:
        """Render the header from the selection and the run's snapshot (or None when idle).

        `presenter` is what the presenter's next key press does, when presenter mode is on.
        """
        sc = SCENARIOS[scenario]
        mock = mode == "mock"
        text = Text(no_wrap=True, overflow="ellipsis")
        if mock:
            text.append("MOCK ", style="bold reverse")
        text.append(f"[{sc.key}] {sc.title}", style="bold")
        if presenter:
            # Before the run's status: on a narrow screen the presenter's next step stays.
            text.append(f"  PRESENTER {presenter}", style="bold reverse")
        if run is None:
            text.append("  ready: press enter to run", style="italic")
        else:
            status = "failed" if run.error else run.status
            label = f"{status}{' (MOCK)' if mock else ''}"
            text.append(f"  {label} · {run.elapsed_s:.1f} s", style="bold")
            if run.error:
                text.append(f": {run.error}", style="bold red")
        text.append(f"  · {mode} · {engine}" + (" · checked column" if checked else ""))
        self.update(text)

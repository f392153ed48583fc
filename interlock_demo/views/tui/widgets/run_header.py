"""The run's header, one line: scenario, mode, engine, status, time, presenter's next step."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from interlock_demo.core.columns import COLUMN_KINDS, ColumnKind
from interlock_demo.core.run import RunSnapshot
from interlock_demo.settings.modes import mode_named
from scenarios import SCENARIOS


class RunHeader(Static):
    """One line about the chosen scenario, and the run once it started.

    `narrow` (below 160 columns): the scenario's short label, no mode (the banner says it),
    and the presenter's next step on a line of its own, so the claim's end is never cut.
    """

    narrow = False

    def show(
        self,
        *,
        scenario: str,
        mode: str,
        engine: str,
        optional: frozenset[ColumnKind],
        run: RunSnapshot | None,
        presenter: str | None = None,
    ) -> None:
        """Render the header from the selection and the run's snapshot (or None when idle).

        `presenter` is what the presenter's next key press does, when presenter mode is on.
        """
        sc = SCENARIOS[scenario]
        row = mode_named(mode)
        mock = row.in_process
        text = Text(no_wrap=True, overflow="ellipsis")
        if mock:
            text.append(f"{row.banner} ", style="bold reverse")
        text.append(f"[{sc.key}] {sc.label if self.narrow else sc.title}", style="bold")
        if presenter and not self.narrow:
            # Before the run's status: the presenter's next step stays if the line is cut.
            text.append(f"  PRESENTER {presenter}", style="bold reverse")
        if run is None:
            text.append("  ready: press enter to run", style="italic")
        else:
            status = "failed" if run.error else run.status
            label = f"{status}{f' ({row.banner})' if mock else ''}"
            text.append(f"  {label} · {run.elapsed_s:.1f} s", style="bold")
            if run.error:
                text.append(f": {run.error}", style="bold red")
        if self.narrow:
            text.append(f"  · {engine}")
            if presenter:
                text.append("\n")
                text.append(f"PRESENTER {presenter}", style="bold reverse")
        else:
            chosen = "".join(f" · {k.name} column" for k in COLUMN_KINDS.values() if k in optional)
            text.append(f"  · {mode} · {engine}{chosen}")
        self.update(text)

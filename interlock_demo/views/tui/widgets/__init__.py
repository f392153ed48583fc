"""The app's widgets, one per file."""

from interlock_demo.views.tui.widgets.column_pane import ColumnPane
from interlock_demo.views.tui.widgets.countdown import ClaimCountdown
from interlock_demo.views.tui.widgets.message_line import MessageLine
from interlock_demo.views.tui.widgets.mode_banner import ModeBanner
from interlock_demo.views.tui.widgets.run_header import RunHeader
from interlock_demo.views.tui.widgets.story import PhaseLines
from interlock_demo.views.tui.widgets.verdict_strip import VerdictStrip

__all__ = [
    "ClaimCountdown",
    "ColumnPane",
    "MessageLine",
    "ModeBanner",
    "PhaseLines",
    "RunHeader",
    "VerdictStrip",
]

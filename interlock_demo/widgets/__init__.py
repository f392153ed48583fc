"""The app's widgets, one per file."""

from interlock_demo.widgets.column_pane import ColumnPane
from interlock_demo.widgets.countdown import ClaimCountdown
from interlock_demo.widgets.message_line import MessageLine
from interlock_demo.widgets.mode_banner import ModeBanner
from interlock_demo.widgets.run_header import RunHeader
from interlock_demo.widgets.story import PhaseLines
from interlock_demo.widgets.verdict_strip import VerdictStrip

__all__ = [
    "ClaimCountdown",
    "ColumnPane",
    "MessageLine",
    "ModeBanner",
    "PhaseLines",
    "RunHeader",
    "VerdictStrip",
]

"""The app's widgets, one per file."""

from interlock_demo.widgets.column_pane import ColumnPane
from interlock_demo.widgets.mode_banner import ModeBanner
from interlock_demo.widgets.run_header import RunHeader

__all__ = ["ColumnPane", "ModeBanner", "RunHeader"]

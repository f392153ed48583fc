"""The demo engine: runs a scenario's columns at once and keeps the runs of this process.

`engine.engine`: `Engine` (one run at a time, the re-approval) and `RunChoice` (what to run); the
column's script is `engine.column`, over a launcher: `engine.process` (real worker
processes), `engine.mock` (in-process) or `engine.temporal` (`RefundCase` workflows). The
engine imports no Textual; views subscribe to the `Run`.
"""

from interlock_demo.engine.engine import Engine, RunChoice

__all__ = ["Engine", "RunChoice"]

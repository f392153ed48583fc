"""The Temporal engine: each column as a `RefundCase` workflow on Temporal's dev server.

One concern per module:

- `probe`: whether Temporal can run here (temporalio and the `temporal` CLI) and the
  refund activity's timeouts; imports no temporalio, so it answers without the extra.
- `devserver`: `temporal server start-dev` as a process on loopback, its database claimed.
- `runtime`: `TemporalRuntime`, the dev server, a client and an asyncio loop on a thread.
- `launcher`: `TemporalLauncher`, one column's workflow, its workers spawned through the
  standalone engine's `ProcessLauncher`.
- `history`: Temporal's history events and describe() results as the column's event lines.

temporalio is an optional extra: no module here imports it until a Temporal run starts.
The engine imports the runtime and the launchers from here; everything else is imported from
its module.
"""

from interlock_demo.engine.temporal.launcher import TemporalLauncher, temporal_launchers
from interlock_demo.engine.temporal.runtime import TemporalRuntime

__all__ = ["TemporalLauncher", "TemporalRuntime", "temporal_launchers"]

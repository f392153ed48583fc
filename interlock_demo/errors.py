"""The demo's errors: one root, and each message says what happened and what to do.

    DemoError
    ├── UsageError         bad command line, configuration or request (exit 2)
    ├── KeyRefusedError    a Stripe key that is not a test key; never contains the key
    ├── BusyError          a run is going (one at a time), or the engine is shutting down
    ├── ColumnFailed       one column could not finish; its card shows why
    ├── DevServerError     Temporal's dev server did not start or answer
    ├── ScreenshotError    a run for a screenshot did not finish
    └── PortInUseError     the HTTP endpoint's port is taken (also an OSError)

The Stripe emulator's protocol errors (`interlock.testing.StripeEmulator`) are Stripe's error
shapes, answered over HTTP, not raised to a user, so they stand apart; the library's own
errors are `interlock.InterlockError` (the MCP desk's is `interlock.mcp.DeskError`).
"""

from __future__ import annotations

import errno


class DemoError(Exception):
    """Something the demo cannot do as asked; the message is for the person at the keys."""


class UsageError(DemoError, ValueError):
    """Bad usage or configuration (exit 2); the message says what to do."""


class KeyRefusedError(DemoError, ValueError):
    """A Stripe key is set but is not a test key; the message never contains the key."""

    def __init__(self, source: str, kind: str) -> None:
        self.source = source
        self.kind = kind
        super().__init__(
            f"refused the Stripe key from {source}: it is {kind}. The demo moves money only "
            "with Stripe test keys (sk_test_... or rk_test_...): set STRIPE_SECRET_KEY to a "
            "test key from the Stripe dashboard (Developers > API keys, test mode), or unset "
            "it to rehearse offline."
        )


class BusyError(DemoError, RuntimeError):
    """A run is already going; one run at a time."""


class ColumnFailed(DemoError):
    """A column could not finish; the message says why."""


class DevServerError(DemoError, RuntimeError):
    """Temporal's dev server did not start or answer; the message says where its log is."""


class ScreenshotError(DemoError, RuntimeError):
    """A run for a screenshot did not finish; the message says which and why."""


class PortInUseError(DemoError, OSError):
    """The endpoint's port is taken by another program; the message says what to do."""

    def __init__(self, host: str, port: int) -> None:
        self.port = port
        super().__init__(
            errno.EADDRINUSE,
            f"cannot serve the HTTP endpoint on {host}:{port}: the port is in use; "
            "pick another with --http PORT",
        )

    def __str__(self) -> str:
        return str(self.strerror)

"""The stripe SDK for a worker, loaded without the HTTP libraries it would not use.

When it is imported, `stripe._http_client` tries requests, httpx (with anyio) and aiohttp
to choose the client a `StripeClient` gets when it is given none: about half of a
restarted worker's imports before its first Stripe call. A worker always passes its own
client (`interlock.make_stripe_client`'s deadline client), so that default is never used.
`load()` holds those libraries back while the SDK loads (Python's import system refuses a
name whose `sys.modules` entry is None) and lets them be imported again afterwards, by
anything else in the process. It is for the worker's process only: a library user's own
`StripeClient(key)` without a client of its own needs the default.
"""

from __future__ import annotations

import sys

HELD_BACK = ("requests", "httpx", "aiohttp")


def load() -> None:
    """Import the stripe SDK, unless it is already loaded, without `HELD_BACK`."""
    if "stripe" in sys.modules:
        return
    held = [name for name in HELD_BACK if name not in sys.modules]
    for name in held:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import stripe  # noqa: F401
    finally:
        for name in held:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def hold_back_for_good() -> None:
    """Make `HELD_BACK` absent for the rest of this process (a worker's, or its fork
    server's and so its forked workers'), before anything imports the SDK."""
    for name in HELD_BACK:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]

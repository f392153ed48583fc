"""The demo's timing: the library's, with the demo's defaults and its ceiling on the claim."""

from __future__ import annotations

from collections.abc import Mapping

from interlock import ConfigError, Timing

DEMO_CLAIM_TTL_S = 15.0
DEMO_STRIPE_TIMEOUT_S = 10.0
DEMO_MAX_CLAIM_TTL_S = 300.0


def demo_timing(env: Mapping[str, str] | None = None) -> Timing:
    """The demo's timing: a 15 s claim and a 10 s Stripe timeout unless the user set them.

    A room waits out the claim live, so the demo refuses one longer than
    `DEMO_MAX_CLAIM_TTL_S` (the library itself accepts up to a day).
    """
    timing = Timing.from_env(
        env, claim_ttl_s=DEMO_CLAIM_TTL_S, stripe_timeout_s=DEMO_STRIPE_TIMEOUT_S
    )
    if timing.claim_ttl_s > DEMO_MAX_CLAIM_TTL_S:
        raise ConfigError(
            f"INTERLOCK_CLAIM_TTL={timing.claim_ttl_s:g} s is refused for the demo: a room "
            f"would wait that long for the claim; use at most {DEMO_MAX_CLAIM_TTL_S:g} s "
            f"(the demo's default is {DEMO_CLAIM_TTL_S:g})"
        )
    return timing

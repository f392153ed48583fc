"""Timing, read from the environment and checked.

The gate must never take over a send that may still be in flight, so the Stripe timeout
has to end at least `SAFETY_MARGIN_S` inside the claim: a claim outlives every request
its owner may have started, plus the time Stripe may take past the client's deadline.

Two more margins cover what a clock cannot see: the *slack* is asked for beyond the
send window right before every create call (a worker delayed by less than it between its
check and its write is still covered), and the *grace* is added to a `sending` claim's
expiry before anyone may take it (a clock step between workers, or a request that overran
its deadline by that much).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from interlock._core.errors import ConfigError

SAFETY_MARGIN_S = 5.0
# Renewing the claim right before a send adds this much for the local steps between the
# renewal and the call, so the claim still has the full send window when the call starts.
SEND_PREP_S = 1.0
DEFAULT_CLAIM_TTL_S = 40.0
DEFAULT_STRIPE_TIMEOUT_S = 30.0
DEFAULT_GRACE_S = 2.0
DEFAULT_SLACK_S = 2.0
MIN_GRACE_S = MIN_SLACK_S = 1.0
# Past these a typo is likelier than intent, and a demo would wait for hours.
MAX_CLAIM_TTL_S = 24 * 3600.0
# A grace or slack of minutes covers no clock step or pause a claim should wait out; a
# larger one is a unit mistake (2000 meant as milliseconds) that would hold a claim for
# hours, or decades.
MAX_GRACE_S = MAX_SLACK_S = 60.0

ENV_CLAIM_TTL = "INTERLOCK_CLAIM_TTL"
ENV_STRIPE_TIMEOUT = "INTERLOCK_STRIPE_TIMEOUT"
ENV_CLAIM_GRACE = "INTERLOCK_CLAIM_GRACE"
ENV_SEND_SLACK = "INTERLOCK_SEND_SLACK"


@dataclass(frozen=True)
class Timing:
    """How long a claim lasts and how long one Stripe request may take, in seconds.

    `grace_s` is added to a `sending` claim's expiry before another worker may take it;
    `slack_s` is asked for beyond the send window right before a create call. Neither may
    be below one second or above a minute, and the claim's renewal before a send never
    passes the one-day cap.

    `ENV_NAMES` is the one spelling of each field's setting, by field: `from_env` reads
    them and `to_env` writes every one of them, so a timing handed to another process
    (the demo's workers) arrives whole and exact.
    """

    ENV_NAMES: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "claim_ttl_s": ENV_CLAIM_TTL,
            "stripe_timeout_s": ENV_STRIPE_TIMEOUT,
            "grace_s": ENV_CLAIM_GRACE,
            "slack_s": ENV_SEND_SLACK,
        }
    )

    claim_ttl_s: float = DEFAULT_CLAIM_TTL_S
    stripe_timeout_s: float = DEFAULT_STRIPE_TIMEOUT_S
    grace_s: float = DEFAULT_GRACE_S
    slack_s: float = DEFAULT_SLACK_S

    def __post_init__(self) -> None:
        for name, value in (
            ("claim TTL", self.claim_ttl_s),
            ("Stripe timeout", self.stripe_timeout_s),
            ("claim grace", self.grace_s),
            ("send slack", self.slack_s),
        ):
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"the {name} must be a positive number of seconds, got {value}")
        if self.claim_ttl_s > MAX_CLAIM_TTL_S:
            raise ConfigError(
                f"claim TTL {self.claim_ttl_s:g} s is refused: at most {MAX_CLAIM_TTL_S:g} s "
                f"(a day); set {ENV_CLAIM_TTL} to a number of seconds such as 40"
            )
        for name, value, floor, ceiling, env, default in (
            (
                "claim grace",
                self.grace_s,
                MIN_GRACE_S,
                MAX_GRACE_S,
                ENV_CLAIM_GRACE,
                DEFAULT_GRACE_S,
            ),
            ("send slack", self.slack_s, MIN_SLACK_S, MAX_SLACK_S, ENV_SEND_SLACK, DEFAULT_SLACK_S),
        ):
            if value < floor:
                raise ConfigError(
                    f"the {name} of {value:g} s is refused: it may not be below {floor:g} s, "
                    f"which covers a one-second clock step or pause; raise {env}"
                )
            if value > ceiling:
                raise ConfigError(
                    f"the {name} of {value:g} s is refused: at most {ceiling:g} s. It is in "
                    f"seconds, not milliseconds; set {env} to a number of seconds such as "
                    f"{default:g}"
                )
        if self.claim_ttl_s - self.stripe_timeout_s < SAFETY_MARGIN_S:
            raise ConfigError(
                f"claim TTL {self.claim_ttl_s:g} s with Stripe timeout "
                f"{self.stripe_timeout_s:g} s is refused: the timeout must end at least "
                f"{SAFETY_MARGIN_S:g} s inside the claim (TTL - timeout >= {SAFETY_MARGIN_S:g}), "
                "so that no worker takes over a send that may still be in flight. Raise "
                f"{ENV_CLAIM_TTL} or lower {ENV_STRIPE_TIMEOUT}."
            )
        # The renewal before a send must cover the whole send window; cutting it to the
        # cap would not, so a setting that needs more than the cap is refused instead.
        if self.renewal_s > MAX_CLAIM_TTL_S:
            raise ConfigError(
                f"claim TTL {self.claim_ttl_s:g} s with Stripe timeout "
                f"{self.stripe_timeout_s:g} s and send slack {self.slack_s:g} s is refused: "
                f"the renewal before a send would hold the claim {self.renewal_s:g} s, past "
                f"the cap of {MAX_CLAIM_TTL_S:g} s (a day); lower {ENV_STRIPE_TIMEOUT} or "
                f"{ENV_SEND_SLACK}"
            )

    @property
    def in_flight_s(self) -> float:
        """How long after a create call starts it may still land: timeout + 5 s."""
        return self.stripe_timeout_s + SAFETY_MARGIN_S

    @property
    def send_window_s(self) -> float:
        """The claim time a worker must have left before it may start a send."""
        return self.in_flight_s + self.slack_s

    @property
    def renewal_s(self) -> float:
        """How far ahead the renewal before a send moves the claim's expiry."""
        return max(self.claim_ttl_s, self.send_window_s + SEND_PREP_S)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        claim_ttl_s: float = DEFAULT_CLAIM_TTL_S,
        stripe_timeout_s: float = DEFAULT_STRIPE_TIMEOUT_S,
    ) -> Timing:
        """Timing from the `INTERLOCK_*` settings, else the given defaults.

        `INTERLOCK_CLAIM_TTL`, `INTERLOCK_STRIPE_TIMEOUT`, `INTERLOCK_CLAIM_GRACE` and
        `INTERLOCK_SEND_SLACK`, in seconds.
        """
        env = os.environ if env is None else env
        defaults = {
            "claim_ttl_s": claim_ttl_s,
            "stripe_timeout_s": stripe_timeout_s,
            "grace_s": DEFAULT_GRACE_S,
            "slack_s": DEFAULT_SLACK_S,
        }
        return cls(
            **{field: _seconds(env, name, defaults[field]) for field, name in cls.ENV_NAMES.items()}
        )

    def to_env(self) -> dict[str, str]:
        """Every field as its `INTERLOCK_*` setting, exactly: `from_env` reads back this timing.

        Each value is the shortest decimal that parses back to the same float (`repr`), so
        nothing is rounded on the way (`%g` would make 17.123456789 s 17.1235 s).
        """
        return {name: repr(float(getattr(self, field))) for field, name in self.ENV_NAMES.items()}


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not a number of seconds; set it to a number such as {default:g}"
        ) from None

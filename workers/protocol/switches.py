"""The emulated switches a run may ask of its workers (docs/design.md §3), as the engine
hands them over: environment variables it sets and a worker reads. The library's gate reads
none of them; the interlock worker wraps its effect in `interlock.testing`'s `Emulate24h` and
`NoLookup` when its run asks. The scenarios name them for the truth table's rows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from interlock import ConfigError


@dataclass(frozen=True)
class Switches:
    """The emulated conditions a demo run asks for (docs/design.md §3), to show what the
    gate guards against. The library's gate reads none of them: a worker wraps its effect
    in `interlock.testing`'s `Emulate24h` and `NoLookup` when its run asks.

    `emulate_24h`: a retry behaves as if Stripe had pruned the idempotency key (the retry
    uses a key Stripe has not seen). `no_lookup`: the gate skips the lookup of its own
    earlier send. Every run that uses one must say so.

    `ENV_NAMES` is the one spelling of each switch's name, by field: the environment
    variable that turns it on (the engine sets it for its workers), and how receipts and
    runs name it (`names`).
    """

    ENV_NAMES: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"emulate_24h": "INTERLOCK_EMULATE_24H", "no_lookup": "INTERLOCK_NO_LOOKUP"}
    )

    emulate_24h: bool = False
    no_lookup: bool = False

    @property
    def names(self) -> list[str]:
        """The switches that are on, as their environment names."""
        return [name for field, name in self.ENV_NAMES.items() if getattr(self, field)]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Switches:
        """Switches from `INTERLOCK_EMULATE_24H` and `INTERLOCK_NO_LOOKUP` (1/true/yes)."""
        env = os.environ if env is None else env
        return cls(**{field: _flag(env, name) for field, name in cls.ENV_NAMES.items()})


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name}={raw!r} is not a switch value; use 1 or 0")

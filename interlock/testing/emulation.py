"""What the gate guards against, emulated around a real `Effect`, in the open.

A gate reads no switch: it behaves the same in every environment. To show what its
lookup and the idempotency key each prevent, a test or a demo wraps its effect, as
httpx's `MockTransport` stands in for the network: the wrapper is in the code that
builds the gate, never in the process's environment.

- `NoLookup(effect)`: the gate goes without the lookup of its own earlier send. A
  recovery after the send landed then sees that refund as a change of the world and
  refuses, and `verify()` reports a refund the receipts do not show.
- `Emulate24h(effect)`: every send but an action's first goes out under a key the provider
  has not seen, as after it pruned the key (Stripe keeps one for at least 24 hours).

Each names itself in every receipt (`emulated`), so no receipt of an emulated run passes
for a real one. They stack: `NoLookup(Emulate24h(effect))` emulates both.
"""

from __future__ import annotations

from typing import Any

from interlock._core.effects import Effect, Found, Observation
from interlock._core.journal import Intent


class _Emulating:
    """An effect that is `effect` in everything but what it emulates: its reads and sends,
    and its optional parts (`where`, `currency`, `accepts`, `deadline_s`, `sent_on`, ...),
    which it has exactly when `effect` has them."""

    def __init__(self, effect: Effect, name: str) -> None:
        self.effect = effect
        self.kind = effect.kind
        self.emulated: tuple[str, ...] = (*getattr(effect, "emulated", ()), name)

    def observe(self, intent: Intent) -> Observation:
        """The wrapped effect's read."""
        return self.effect.observe(intent)

    def send(self, intent: Intent, idempotency_key: str) -> Found:
        """The wrapped effect's send, under the key the gate gives."""
        return self.effect.send(intent, idempotency_key)

    def __getattr__(self, name: str) -> Any:
        # Only what the class and the instance lack reaches here; `effect` itself is
        # looked up in the instance's dict so that a half-built wrapper cannot recurse.
        effect = self.__dict__.get("effect")
        if effect is None:
            raise AttributeError(name)
        return getattr(effect, name)


class NoLookup(_Emulating):
    """`effect` under a gate without its lookup of its own earlier send.

    The gate neither adopts nor takes a claim early on a send it finds; its lookup check
    records `skipped: <name> is set`. A re-approval still finds the refund (evidence wins
    there: it is not the send path's lookup). `name` is how receipts name the emulation.
    """

    def __init__(self, effect: Effect, *, name: str = "NoLookup") -> None:
        super().__init__(effect, name)
        self.lookup_skipped = f"{name} is set"


class Emulate24h(_Emulating):
    """`effect` behind a provider that pruned the idempotency key of an action's first send.

    Any send after the first (a later take of the claim, or a resend within one) goes out
    under a key the provider has not seen, so only the lookup keeps a retry from sending
    twice. `name` is how receipts name the emulation.
    """

    def __init__(self, effect: Effect, *, name: str = "Emulate24h") -> None:
        super().__init__(effect, name)

    def idempotency_key(self, intent: Intent, *, attempt: int, sends: int) -> str:
        """The action id for its first send (attempt 1, no sends yet), else a fresh key."""
        if attempt > 1 or sends > 0:
            return f"{intent.action_id}:after-24h:{attempt}.{sends}"
        return intent.action_id

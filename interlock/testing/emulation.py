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

from interlock._core.effects import Effect, EmulatedEffect
from interlock._core.journal import Intent


class NoLookup(EmulatedEffect):
    """`effect` under a gate without its lookup of its own earlier send.

    The gate neither adopts nor takes a claim early on a send it finds; its lookup check
    records `skipped: <name> is set`. A re-approval still finds the refund (evidence wins
    there: it is not the send path's lookup). `name` is how receipts name the emulation.
    """

    def __init__(self, effect: Effect, *, name: str = "NoLookup") -> None:
        super().__init__(effect, name)
        self._name = name

    def lookup_skipped(self) -> str | None:
        """Always: this emulation is the gate without its lookup."""
        return f"{self._name} is set"


class Emulate24h(EmulatedEffect):
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

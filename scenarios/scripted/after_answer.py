"""Scenario 3 (the control): the worker dies right after Stripe answered, and nobody acts.

Its truth has a row for each emulated switch: Stripe having pruned the key, and a gate
without its lookup.
"""

from __future__ import annotations

from interlock.testing import CrashPoint
from scenarios import SWITCH_EMULATE_24H, SWITCH_NO_LOOKUP, Expectation, Outage, Scenario

SCENARIO = Scenario(
    id="after-answer",
    key="3",
    title="Crash after Stripe answered (control)",
    crash_point=CrashPoint.AFTER_ANSWER,
    outage=Outage.NONE,
    story="The worker dies right after Stripe's answer, before anything recorded it.",
    wanted_text="one $20 refund",
    wanted_agent_refunds=1,
    wanted_hand_refunds=0,
    label="After answer",
    hint="Scenario 3 (control): crash right after Stripe answered",
    truth={
        "": {
            "standard": Expectation(1, 0, "sent", None, "one refund (Stripe replays the key)"),
            "interlock": Expectation(1, 0, "adopted", None, "one refund; adopted its own refund"),
            "checked": Expectation(
                1, 0, "stopped", None, "one refund; stopped on its own refund (false alarm)"
            ),
        },
        SWITCH_EMULATE_24H: {
            "standard": Expectation(2, 0, "sent", None, "two refunds: wrong (the key expired)"),
            "interlock": Expectation(1, 0, "adopted", None, "one refund; adopted"),
            "checked": Expectation(1, 0, "stopped", None, "one refund; stopped (false alarm)"),
        },
        SWITCH_NO_LOOKUP: {
            "standard": Expectation(1, 0, "sent", None, "one refund"),
            "interlock": Expectation(
                1,
                0,
                "refused",
                "refunds changed",
                "one refund; refused: cannot tell it was its own",
            ),
            "checked": Expectation(1, 0, "stopped", None, "one refund; stopped (false alarm)"),
        },
    },
)

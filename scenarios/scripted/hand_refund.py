"""Scenario 1: the worker dies before the send, and support refunds $20 by hand."""

from __future__ import annotations

from interlock.testing import CrashPoint
from scenarios import Expectation, Outage, Scenario

SCENARIO = Scenario(
    id="hand-refund",
    key="1",
    title="Hand refund during the outage",
    crash_point=CrashPoint.BEFORE_SEND,
    outage=Outage.HAND_REFUND,
    story="The worker dies right before the refund call; support refunds $20 by hand.",
    wanted_text="one $20 refund, the hand one",
    wanted_agent_refunds=0,
    wanted_hand_refunds=1,
    label="Hand refund",
    hint="Scenario 1: crash before the send; support refunds $20 by hand",
    truth={
        "": {
            "standard": Expectation(1, 1, "sent", None, "two refunds, $40: wrong"),
            "interlock": Expectation(
                0, 1, "refused", "refunds changed", "hand refund only; refused"
            ),
            "checked": Expectation(0, 1, "stopped", None, "hand refund only; stopped"),
        },
    },
)

"""Scenario 2: the worker dies before the send, and support revokes the approval."""

from __future__ import annotations

from interlock.testing import CrashPoint
from scenarios import Expectation, Outage, Scenario

SCENARIO = Scenario(
    id="revoked",
    key="2",
    title="Approval revoked during the outage",
    crash_point=CrashPoint.BEFORE_SEND,
    outage=Outage.REVOKE,
    story="The worker dies right before the refund call; support revokes the approval.",
    wanted_text="no refund",
    wanted_agent_refunds=0,
    wanted_hand_refunds=0,
    label="Revoked",
    hint="Scenario 2: crash before the send; support revokes the approval",
    truth={
        "": {
            "standard": Expectation(1, 0, "sent", None, "one $20 refund: wrong"),
            "interlock": Expectation(0, 0, "refused", "revoked", "none; refused: approval revoked"),
            "checked": Expectation(0, 0, "stopped", None, "none; stopped"),
        },
    },
)

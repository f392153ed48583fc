"""The MCP tools `get_payment` and `issue_refund` over a `RefundDesk`, on the `mcp` SDK.

Tool functions are plain functions: the SDK runs them in a worker thread, so the gate's
blocking Stripe calls and store commits never stall the session's message loop.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from interlock_demo.mcp.desk import REQUEST_ID_RULE, Answer, RefundDesk

SERVER_NAME = "interlock-refunds"

GET_PAYMENT = (
    "Read a Stripe payment (PaymentIntent) with all its refunds and its refund approval. "
    "Amounts are in cents. Read the payment before every refund decision: issue_refund is "
    "checked against the refunds this read showed (its refunds_fingerprint)."
)

ISSUE_REFUND = (
    "Refund part of a payment, in cents, under the approval a person gave for it. Right "
    "before sending, the server checks again that the approval still covers the amount "
    "and that the payment's refunds are still the ones you read with get_payment; if "
    "either changed it refuses and says why. "
    "request_id: make up a new id for each refund decision (a UUID). If a call fails "
    "without a clear answer (a timeout, a lost connection, a restart), call again with "
    "the SAME request_id and amount: the server refunds at most once per payment and "
    "request_id, and a repeated call returns the first call's outcome. "
    "An answer with status 'pending' means unknown, being recovered: not failed; do not "
    "refund again with a new request_id."
)


def tool_result(answer: Answer) -> CallToolResult:
    """The desk's answer as an MCP tool result: words, data, and the error flag."""
    return CallToolResult(
        content=[TextContent(type="text", text=answer.text)],
        structured_content=answer.data,
        is_error=answer.is_error,
    )


def build_server(desk: RefundDesk, *, instructions: str) -> MCPServer:
    """An MCP server with the two tools over `desk`."""
    # WARNING: at INFO the SDK's log setup would also print every Stripe request line.
    server: MCPServer = MCPServer(name=SERVER_NAME, instructions=instructions, log_level="WARNING")

    @server.tool(
        name="get_payment",
        description=GET_PAYMENT,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    def get_payment(
        payment_intent: Annotated[str, Field(description="The PaymentIntent id, pi_...")],
    ) -> CallToolResult:
        return tool_result(desk.get_payment(payment_intent))

    @server.tool(
        name="issue_refund",
        description=ISSUE_REFUND,
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,  # per request_id: a repeated call refunds once
            open_world_hint=True,
        ),
    )
    def issue_refund(
        payment_intent: Annotated[str, Field(description="The PaymentIntent id, pi_...")],
        amount: Annotated[int, Field(gt=0, description="The refund in cents")],
        request_id: Annotated[
            str,
            Field(
                min_length=8,
                max_length=100,
                description=(
                    f"Your id for this refund decision: {REQUEST_ID_RULE}. Reuse it only "
                    "to retry the same refund after a call without a clear answer."
                ),
            ),
        ],
        refunds_fingerprint: Annotated[
            str | None,
            Field(
                description=(
                    "The refunds_fingerprint of the get_payment read you decided on. "
                    "Optional: without it, the server uses its last get_payment of this "
                    "payment in this session."
                )
            ),
        ] = None,
        reason: Annotated[str | None, Field(description="Why, in a few words")] = None,
    ) -> CallToolResult:
        return tool_result(
            desk.issue_refund(payment_intent, amount, request_id, refunds_fingerprint, reason)
        )

    return server

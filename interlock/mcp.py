"""A guarded refund tool on your MCP server (needs the `mcp` extra).

`add_refund_tools(server, desk)` puts two tools on an `mcp.server.mcpserver.MCPServer`
(the official SDK's server, FastMCP before mcp 2): `get_payment` and `issue_refund`. Every
refund goes through `interlock.Gate` under an approval a person granted, so any MCP client
(Claude Desktop, an IDE, an agent) gets the re-check of the approval and of the refunds the
model read, the lookup of its own earlier refund instead of a second one, and a receipt.

- **The desk** (`RefundDesk`) holds the gate, the store and what each MCP session showed
  its model; its answers say in words what happened and what to do next, and carry the
  same facts as structured data. `pending` always reads "unknown, being recovered", never
  failed.
- **Sessions**: a refund is checked against the read of its own session (the SDK's
  connection: the one of a stdio server, one per streamable HTTP `Mcp-Session-Id`), or
  against the `refunds_fingerprint` the call passes back; never against another
  conversation's read. A stateless HTTP server, or a client of the sessionless 2026-07-28
  protocol, gets a connection per request, so its calls must pass the fingerprint. A
  session's reads are forgotten when it ends.
- **`request_id`**: the action id (also Stripe's Idempotency-Key) comes from the payment
  and an id the model makes up per decision (`action_id_for`), so a call retried after a
  lost answer, through a restarted server or a new session, names the same action and
  refunds once.
- **Approvals** are interlock leases (`grant_approval`, `revoke_approval`,
  `current_approval`), one live at a time per payment; your admin path grants them, and
  every refund re-checks them right before the send.
- **Restarts**: `desk.recover()` (call it before serving) and every tool call finish this
  server's journaled refunds that have no outcome yet, looking them up at Stripe; a server
  killed mid-refund is followed by one that finds the refund instead of sending it again.

The guide's example (`docs/guides/mcp.md`, "On your own MCP server") is a
complete stdio server; `interlock-demo mcp` is the demo's, over the same desk.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field, WithJsonSchema
except ImportError as e:  # pragma: no cover - exercised in a subprocess without mcp
    raise ImportError(
        "interlock.mcp needs the MCP SDK: pip install './packaging/interlock[mcp]' "
        "(the core of interlock works without it)"
    ) from e

from interlock._core.leases import lease_currency
from interlock._integrations.mcp_desk import (
    AMOUNT_RULE,
    MAX_AMOUNT,
    MAX_REASON,
    REASON_RULE,
    REQUEST_ID_RULE,
    Answer,
    DeskError,
    RefundDesk,
    action_id_for,
    approval_state,
    check_payment_id,
    current_approval,
    grant_approval,
    revoke_approval,
)
from interlock._integrations.words import WORLD_CHANGED_WORDS

__all__ = [
    "SERVER_NAME",
    "WORLD_CHANGED_WORDS",
    "Answer",
    "DeskError",
    "RefundDesk",
    "action_id_for",
    "add_refund_tools",
    "approval_state",
    "check_payment_id",
    "current_approval",
    "grant_approval",
    "lease_currency",
    "revoke_approval",
]

# The name a server built for these tools alone goes by (the demo's, and the guide's).
SERVER_NAME = "interlock-refunds"

GET_PAYMENT = (
    "Read a Stripe payment (PaymentIntent) with all its refunds and its refund approval. "
    "Amounts are integers in the smallest unit of the payment's currency (cents for usd "
    "and eur; whole yen for jpy: 2000 is ¥2,000). Read the payment before every refund "
    "decision: issue_refund is "
    "checked against the refunds this read showed (its refunds_fingerprint)."
)

ISSUE_REFUND = (
    "Refund part of a payment, in the smallest unit of its currency (as get_payment shows "
    "it), under the approval a person gave for it. Right "
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


# Each argument is taken as sent and checked by the desk, which refuses in words the model
# can act on: pydantic would coerce "500" to 500 and end each refusal in a documentation
# link. The schema the model reads still says what each one must be.
_STRING = WithJsonSchema({"type": "string"})


def _tool_result(answer: Answer) -> CallToolResult:
    """The desk's answer as an MCP tool result: words, data, and the error flag."""
    return CallToolResult(
        content=[TextContent(type="text", text=answer.text)],
        structured_content=answer.data,
        is_error=answer.is_error,
    )


# Where a connection keeps the session name the desk files its reads under.
_SESSION_STATE_KEY = "interlock.mcp.session"


def _session(ctx: Context, desk: RefundDesk) -> str | None:
    """The MCP session of a tool call, named for the desk; None if the SDK shows none.

    The SDK keeps one connection per client session: a stdio server's one, one per
    streamable HTTP `Mcp-Session-Id`, one per in-memory client; a stateless HTTP server
    and a 2026-07-28 (sessionless) request get one per request, so nothing read carries
    over to the next call. The name is kept in the connection's own state, and the desk
    forgets the session's reads when the connection closes. The SDK shows the connection
    only through its per-request session object (the installed mcp 2.x's); without it,
    every call must pass the fingerprint, a refusal never a refund on another's read.
    """
    connection = getattr(ctx.request_context.session, "_connection", None)
    if connection is None:
        return None
    fresh = f"mcp-session-{uuid.uuid4().hex}"
    # setdefault is atomic: two first calls of one session at once get one name.
    name = connection.state.setdefault(_SESSION_STATE_KEY, fresh)
    if name is fresh:
        connection.exit_stack.callback(desk.end_session, name)
    return str(name)


def add_refund_tools(server: MCPServer, desk: RefundDesk) -> None:
    """Put `get_payment` and `issue_refund` on `server`, both answered by `desk`.

    The tools are plain functions: the SDK runs them in a worker thread, so the gate's
    blocking Stripe calls and store commits never stall the session's message loop. Each
    call tells the desk its MCP session (`_session`), so a refund is checked against what
    its own conversation read.
    """

    @server.tool(
        name="get_payment",
        description=GET_PAYMENT,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    def get_payment(
        payment_intent: Annotated[
            Any, _STRING, Field(description="The PaymentIntent id, pi_...")
        ] = None,
        *,
        ctx: Context,
    ) -> CallToolResult:
        session = _session(ctx, desk)
        return _tool_result(desk.get_payment(payment_intent, session=session))

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
        payment_intent: Annotated[
            Any, _STRING, Field(description="The PaymentIntent id, pi_...")
        ] = None,
        amount: Annotated[
            Any,
            WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_AMOUNT}),
            Field(description=f"The refund: {AMOUNT_RULE}"),
        ] = None,
        request_id: Annotated[
            Any,
            WithJsonSchema({"type": "string", "minLength": 8, "maxLength": 100}),
            Field(
                description=(
                    f"Your id for this refund decision: {REQUEST_ID_RULE}. Reuse it only "
                    "to retry the same refund after a call without a clear answer."
                ),
            ),
        ] = None,
        refunds_fingerprint: Annotated[
            Any,
            WithJsonSchema({"type": ["string", "null"]}),
            Field(
                description=(
                    "The refunds_fingerprint of the get_payment read you decided on. "
                    "Optional where the server keeps sessions: without it, the server uses "
                    "this session's last get_payment of this payment (never another "
                    "session's); a call in a session that did not read it is refused."
                )
            ),
        ] = None,
        reason: Annotated[
            Any,
            WithJsonSchema({"type": ["string", "null"], "maxLength": MAX_REASON}),
            Field(description=f"Why, in a few words: {REASON_RULE}"),
        ] = None,
        *,
        ctx: Context,
    ) -> CallToolResult:
        session = _session(ctx, desk)
        return _tool_result(
            desk.issue_refund(
                payment_intent, amount, request_id, refunds_fingerprint, reason, session=session
            )
        )

    # Every argument has a default so that a missing one reaches the desk, which says what
    # to send, instead of pydantic's "Field required" and its link; the schema the model
    # reads still lists them as required. The SDK has no public way to edit a registered
    # tool's schema, so this reaches its tool manager (the installed mcp 2.x's).
    for name, required in _REQUIRED.items():
        tool = server._tool_manager.get_tool(name)
        assert tool is not None
        tool.parameters["required"] = list(required)


_REQUIRED = {
    "get_payment": ("payment_intent",),
    "issue_refund": ("payment_intent", "amount", "request_id"),
}

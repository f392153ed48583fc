"""`interlock-demo mcp`: the guarded refund tool as an MCP server over stdio.

Any MCP client (Claude Desktop, an IDE, an agent framework) gets two tools, `get_payment`
and `issue_refund`, where every refund goes through `interlock.Gate`: the approval and the
refunds the model saw are checked again right before the send, a retried call finds its
own earlier refund instead of refunding twice, and every outcome has a receipt.

- `desk`: the refund desk, the part that knows interlock (approvals, what each session
  showed the model, the gate, outcomes in words a model can act on). No MCP import.
- `server`: the MCP tools over the desk, on the official `mcp` SDK (the `mcp` extra).
- `cli`: the `interlock-demo mcp` command line: serve, `approve`, `revoke`.
"""

"""`interlock-demo mcp`: the library's guarded refund tools as an MCP server over stdio.

Any MCP client (Claude Desktop, an IDE, an agent framework) gets two tools, `get_payment`
and `issue_refund`, where every refund goes through `interlock.Gate`: the approval and the
refunds the model saw are checked again right before the send, a retried call finds its
own earlier refund instead of refunding twice, and every outcome has a receipt.

The desk and the tools are the library's (`interlock.mcp`, the `mcp` extra); `cli` is the
demo's command line over them: serve, `approve`, `revoke`, with the demo's home, timing,
keys and offline emulator.
"""

"""What the framework guards and the MCP tools share: tool calls as intents, the refund desk."""

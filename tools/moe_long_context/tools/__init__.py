"""One module per MCP tool, named after the tool, with the helpers only it uses beside it."""

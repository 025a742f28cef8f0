"""The faces over the tools: CLI, MCP server with its resources and prompts, the registry, docs, HTML report."""

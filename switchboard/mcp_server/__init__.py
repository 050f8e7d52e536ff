"""The agent surface: the tool catalogue, the MCP server (HTTP) and the channel adapter (stdio)."""

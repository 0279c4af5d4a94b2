"""MCP server scripts run as real child processes by the tool tests."""

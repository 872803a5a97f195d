"""Programs and views built on the facade: the command line, the operator views, tail, metrics,
the MCP server and the demo."""

"""Agent-facing session tools: argument schemas, the history sanitiser and (in the
core) the dispatcher behind ``Gateway.call_tool``."""

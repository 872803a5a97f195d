"""Agent-facing session tools: argument schemas, the history sanitiser and the dispatcher
behind ``Gateway.call_tool``.

The tools sit between the services and the facade: they call only what ``host.ToolHost``
names, which the gateway hands them with each call, and import neither the gateway nor a
service (tests/test_architecture.py holds both).
"""

from .dispatch import call_tool
from .host import ToolHost

__all__ = ["ToolHost", "call_tool"]

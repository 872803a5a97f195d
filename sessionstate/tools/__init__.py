"""Agent-facing session tools: argument schemas, the history sanitiser and the dispatcher
behind ``Gateway.call_tool``.

The tool layer sits above the runtime: it uses the gateway's services through their public
methods and installs its ``call_tool`` into the gateway when imported (``sessionstate``
imports it), so the runtime never imports the tools.
"""

from ..gateway import install_tool_layer
from .dispatch import call_tool

install_tool_layer(call_tool)

__all__ = ["call_tool"]

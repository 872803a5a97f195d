"""``call_tool`` results and the published schemas in the SDK's types.

The schemas go out as they are (``TOOL_SCHEMAS``, the same objects ``sessionstate schemas``
prints): the low-level server passes an explicit ``inputSchema`` through, where the SDK's
high-level server would derive one from type hints.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

import mcp_types as types

from ..tools.schemas import TOOL_SCHEMAS


def tool_listing(names: Iterable[str]) -> list[types.Tool]:
    """One ``Tool`` per name, with the published schema as its ``inputSchema``."""
    tools = []
    for name in names:
        schema = TOOL_SCHEMAS[name]
        tools.append(
            types.Tool(
                name=name,
                title=schema.get("title"),
                description=schema.get("description"),
                # A copy: the SDK's models must never alias the module-level schemas.
                input_schema=copy.deepcopy(schema),
            )
        )
    return tools


def tool_result(result: dict[str, Any]) -> types.CallToolResult:
    """``call_tool``'s dict as structured content, its JSON as the text; errors flagged."""
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
        is_error=result.get("status") == "error",
    )

"""``call_tool`` results and the published schemas in the SDK's types.

The schemas go out as they are (``TOOL_SCHEMAS``, the same objects ``sessionstate schemas``
prints): the low-level server passes an explicit ``inputSchema`` through, where the SDK's
high-level server would derive one from type hints.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types

from ...tools.schemas import TOOL_SCHEMAS


@dataclass(frozen=True)
class ToolHints:
    """What a client may show and assume about a tool (MCP tool annotations)."""

    title: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = False


# Read-only means no call changes anything: session_status is not (``model`` sets an override).
# Destructive: subagents' kill ends a run. Idempotent: a repeated call changes nothing more.
# Every tool reaches only this gateway's sessions: no open world.
TOOL_HINTS: Final[dict[str, ToolHints]] = {
    "sessions_list": ToolHints("List sessions", read_only=True, idempotent=True),
    "sessions_history": ToolHints("Read a session's history", read_only=True, idempotent=True),
    "sessions_send": ToolHints("Send a message to a session", read_only=False),
    "sessions_spawn": ToolHints("Spawn a sub-agent", read_only=False),
    "sessions_yield": ToolHints("End the turn and wait for sub-agents", read_only=False),
    "subagents": ToolHints("List, steer or kill sub-agents", read_only=False, destructive=True),
    "session_status": ToolHints("Session status", read_only=False, idempotent=True),
}


def tool_listing(names: Iterable[str]) -> list[types.Tool]:
    """One ``Tool`` per name, with the published schema as its ``inputSchema``, a title for
    people and the annotations clients use to decide what needs confirming."""
    tools = []
    for name in names:
        schema = TOOL_SCHEMAS[name]
        hints = TOOL_HINTS[name]
        tools.append(
            types.Tool(
                name=name,
                title=hints.title,
                description=schema.get("description"),
                # A copy: the SDK's models must never alias the module-level schemas.
                input_schema=copy.deepcopy(schema),
                annotations=types.ToolAnnotations(
                    title=hints.title,
                    read_only_hint=hints.read_only,
                    destructive_hint=hints.destructive,
                    idempotent_hint=hints.idempotent,
                    open_world_hint=False,
                ),
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

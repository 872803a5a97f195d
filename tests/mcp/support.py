"""Helpers for the MCP server tests: the SDK's own in-memory client around a gateway."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from mcp import Client
from mcp_types import CallToolResult

from sessionstate import Gateway
from sessionstate.clients.mcp import SessionToolServer
from sessionstate.runner import ScriptedRunner
from sessionstate.shared.policy import ToolPolicy

T = TypeVar("T")

FIXED_TIME = 1_800_000_000.0


def deterministic_gateway(url: str, policy: ToolPolicy | None = None) -> Gateway:
    """A gateway whose clock and ids repeat exactly: twins of it give equal results."""
    gw = Gateway.open(url, clock=lambda: FIXED_TIME)
    counter = itertools.count(1)
    gw.configure_tools(policy or ToolPolicy(), runner=ScriptedRunner(), id_factory=lambda: f"id{next(counter):04d}")
    return gw


def with_client(server: SessionToolServer, body: Callable[[Client], Awaitable[T]], *, mode: str = "auto") -> T:
    """Run ``body`` with the SDK's client connected in memory to ``server``."""

    async def main() -> T:
        async with Client(server.server, mode=mode) as client:
            return await body(client)

    return anyio.run(main)


def structured(result: CallToolResult) -> dict[str, Any]:
    """The result's structured content, after checking that its text is the same JSON."""
    assert isinstance(result.structured_content, dict), result
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == result.structured_content
    assert result.is_error == (result.structured_content.get("status") == "error")
    return result.structured_content

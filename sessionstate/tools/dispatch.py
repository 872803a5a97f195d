"""``call_tool``: the one door agents use; every failure becomes an error result.

Order: the arguments against the tool's published schema (``schemas.py``), the caller, the
caller's tool policy (profile, deny list, spawn depth), then the tool. Every refusal happens
before the tool writes anything.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import InvalidArgument, SessionStateError
from . import (
    session_status,
    sessions_history,
    sessions_list,
    sessions_send,
    sessions_spawn,
    sessions_yield,
    subagents,
)
from .context import ToolContext
from .tool_errors import ToolNotAllowed
from .host import ToolHost
from .schemas import validate_tool_args

log = logging.getLogger("sessionstate")

ToolFunction = Callable[[ToolContext, dict[str, Any]], dict[str, Any]]

TOOLS: dict[str, ToolFunction] = {
    "sessions_list": sessions_list.run,
    "sessions_history": sessions_history.run,
    "sessions_send": sessions_send.run,
    "sessions_spawn": sessions_spawn.run,
    "sessions_yield": sessions_yield.run,
    "subagents": subagents.run,
    "session_status": session_status.run,
}


def error_result(code: str, message: str) -> dict[str, Any]:
    return {"status": "error", "error": {"code": code, "message": message}}


def allowed_tools(gw: ToolHost, caller_key: str) -> list[str]:
    """The tools the caller may call now (in the schemas' order)."""
    ctx = ToolContext.open(gw, caller_key)
    allowed = ctx.policy.allowed_tools(ctx.caller[1], ctx.meta.spawn_depth)
    return [name for name in TOOLS if name in allowed]


def call_tool(gw: ToolHost, caller_key: str, name: str, args: dict[str, Any] | None) -> dict[str, Any]:
    try:
        clean = validate_tool_args(name, args)
        if not isinstance(caller_key, str):
            raise InvalidArgument("caller key must be a string")
        with gw.locked():
            ctx = ToolContext.open(gw, caller_key)
        if name not in ctx.policy.allowed_tools(ctx.caller[1], ctx.meta.spawn_depth):
            raise ToolNotAllowed(
                f"{name} is not allowed for {caller_key!r} (profile {ctx.policy.profile!r},"
                f" spawn depth {ctx.meta.spawn_depth} of max {ctx.policy.max_spawn_depth})"
            )
        return TOOLS[name](ctx, clean)
    except SessionStateError as exc:
        return error_result(exc.code, exc.message)
    except Exception as exc:  # never let a tool call escape as an exception
        log.exception("tool %r failed", name)
        return error_result("internal_error", f"{type(exc).__name__}: {exc}")

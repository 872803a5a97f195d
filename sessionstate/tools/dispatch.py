"""``call_tool``: the one door agents use; every failure becomes an error result."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from ..errors import InvalidArgument, SessionStateError, UnknownTool

if TYPE_CHECKING:
    from ..gateway import Gateway

log = logging.getLogger("sessionstate")

ToolFunction = Callable[["Gateway", str, dict[str, Any]], dict[str, Any]]


def _current(caller_key: str, args: dict[str, Any]) -> str:
    key = args.get("sessionKey")
    return caller_key if key in (None, "current") else key


def session_status_tool(gw: "Gateway", caller_key: str, args: dict[str, Any]) -> dict[str, Any]:
    unknown = set(args) - {"sessionKey", "changesSince"}
    if unknown:
        raise InvalidArgument(f"session_status: unknown argument(s) {sorted(unknown)}")
    return gw.session_status(_current(caller_key, args), changes_since=args.get("changesSince"))


TOOLS: dict[str, ToolFunction] = {
    "session_status": session_status_tool,
}


def error_result(code: str, message: str) -> dict[str, Any]:
    return {"status": "error", "error": {"code": code, "message": message}}


def call_tool(gw: "Gateway", caller_key: str, name: str, args: dict[str, Any] | None) -> dict[str, Any]:
    try:
        tool = TOOLS.get(name) if isinstance(name, str) else None
        if tool is None:
            raise UnknownTool(f"unknown tool {name!r}; known tools: {sorted(TOOLS)}")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise InvalidArgument(f"{name}: arguments must be a JSON object")
        if not isinstance(caller_key, str):
            raise InvalidArgument("caller key must be a string")
        gw._resolve_any_agent(caller_key)
        return tool(gw, caller_key, args)
    except SessionStateError as exc:
        return error_result(exc.code, exc.message)
    except Exception as exc:  # never let a tool call escape as an exception
        log.exception("tool %r failed", name)
        return error_result("internal_error", f"{type(exc).__name__}: {exc}")

"""Errors of the session tools, all under the package's ``SessionStateError``.

``call_tool`` turns every ``SessionStateError`` into ``{"status": "error", "error": {"code",
"message"}}``, so each class here carries a stable ``code``.
"""

from __future__ import annotations

from ..errors import SessionStateError


class ToolArgumentError(SessionStateError):
    """A tool call's arguments do not match the tool's schema; refused before anything ran.

    ``message`` names the offending field(s). ``field`` is the first offending field's path
    (such as ``"kinds[1]"``), or ``None`` when the error concerns the call as a whole. (A tool
    name that does not exist is ``sessionstate.UnknownTool``.)
    """

    code = "invalid_argument"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def __repr__(self) -> str:
        return f"ToolArgumentError({self.message!r}, field={self.field!r})"


class ToolNotAllowed(SessionStateError):
    """The caller's tool profile, deny list or spawn depth does not include the tool."""

    code = "tool_not_allowed"


class Forbidden(SessionStateError):
    """The named session exists but the caller's visibility does not reach it."""

    code = "forbidden"


class RunNotActive(SessionStateError):
    """``subagents steer``/``kill`` named a run that has already ended."""

    code = "not_running"

"""Errors raised by the pure tool helpers (schemas, sanitiser).

Kept deliberately tiny and standalone: the core will later re-parent
``ToolArgumentError`` under ``sessionstate.errors.SessionStateError`` so that the
dispatcher turns it into ``{"status": "error", "error": {"code", "message"}}``.
"""

from __future__ import annotations


class ToolArgumentError(Exception):
    """A tool call was refused before anything ran.

    ``code`` is ``"invalid_argument"`` (the arguments do not match the tool's
    schema) or ``"unknown_tool"`` (no tool of that name). ``message`` names the
    offending field(s). ``field`` is the first offending field's path (such as
    ``"kinds[1]"``), or ``None`` when the error concerns the call as a whole.
    """

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"ToolArgumentError({self.code!r}, {self.message!r})"

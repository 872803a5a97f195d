"""One exception hierarchy for everything sessionstate refuses.

Every class carries a stable machine-readable ``code``: the tools layer turns any
``SessionStateError`` into ``{"status": "error", "error": {"code", "message"}}``.
"""

from __future__ import annotations


class SessionStateError(Exception):
    """Base class: a call was refused and nothing was changed."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(SessionStateError):
    """An argument has the wrong type, shape or value."""

    code = "invalid_argument"


class UnknownSession(SessionStateError):
    """The named session does not exist (or is ambiguous without an agent id)."""

    code = "unknown_session"


class SessionExists(SessionStateError):
    """A session with that key and agent id is already registered."""

    code = "session_exists"


class UnknownTool(SessionStateError):
    """``call_tool`` was asked for a tool that does not exist."""

    code = "unknown_tool"


class ProtocolError(SessionStateError):
    """A trigger is illegal in the pair's current state (see spec/notice-protocol.md)."""

    code = "protocol_error"



# -- storage ---------------------------------------------------------------------------------
# The store translates every failure of the database driver or the file system into one of
# these at its boundary, so nothing above the store names sqlite3, SQLAlchemy or OSError.


class StorageError(SessionStateError):
    """The database could not serve the call; the call changed nothing."""

    code = "storage_error"


class UnsupportedBackend(SessionStateError):
    """The database URL names a backend this version cannot open."""

    code = "unsupported_backend"

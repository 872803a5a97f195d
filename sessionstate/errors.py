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


class UnsupportedBackend(SessionStateError):
    """The database URL names a backend this version cannot open."""

    code = "unsupported_backend"


class StorageError(SessionStateError):
    """The database refused or failed a statement; the transaction was rolled back.

    ``retry_safe`` is true when the whole transaction is known to have rolled back (so running
    it again cannot apply anything twice); ``__cause__`` holds the driver's error.
    """

    code = "storage_error"

    def __init__(self, message: str, *, retry_safe: bool = False) -> None:
        super().__init__(message)
        self.retry_safe = retry_safe


class StorageUnavailable(StorageError):
    """The database cannot be reached: refused connection, failed authentication, a server
    that went away (restart, shutdown) mid-transaction."""

    code = "storage_unavailable"


class StorageConflict(StorageError):
    """A concurrent transaction won (deadlock or serialization failure): nothing was applied
    and the transaction can run again."""

    code = "storage_conflict"

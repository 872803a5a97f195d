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
# Each message names the database (its path, or "in-memory database") and the cause.


class StorageError(SessionStateError):
    """The database could not serve the call; the call changed nothing.

    ``retry_safe`` is true when the whole transaction is known to have rolled back, so running
    it again cannot apply anything twice (false when that is unknown, e.g. a connection lost
    during the commit); ``__cause__`` holds the driver's error.
    """

    code = "storage_error"

    def __init__(self, message: str, *, retry_safe: bool = False) -> None:
        super().__init__(message)
        self.retry_safe = retry_safe


class StorageUnavailable(StorageError):
    """The database cannot be opened, read or written: a missing, unreadable, read-only or
    corrupt file, a path that is a directory, a parent that is not a directory, a closed
    store."""

    code = "storage_unavailable"


class CommitOutcomeUnknown(StorageUnavailable):
    """The connection was lost while COMMIT was in flight and asking the server afterwards
    (spec R29) could not tell whether the transaction committed: its changes may or may not
    be in the database. ``retry_safe`` is false; only an idempotent retry is safe (R10's
    dedupe key, an attach)."""

    code = "storage_unavailable"


class StorageBusy(StorageUnavailable):
    """Another connection held the write lock longer than the busy timeout (10 s)."""

    code = "storage_busy"


class StorageFull(StorageError):
    """The disk (or the database's configured size limit) is full; nothing was written."""

    code = "storage_full"


class InvalidDatabaseUrl(StorageError):
    """The database URL is empty or cannot be parsed."""

    code = "invalid_database_url"


class UnsupportedBackend(StorageError):
    """The database URL names a backend this version cannot open."""

    code = "unsupported_backend"


class SchemaVersionError(StorageError):
    """The file was written by a newer release (its schema version is above this one's).

    ``file_version`` and ``supported_version`` say which; the file is left untouched.
    """

    code = "unsupported_schema_version"

    def __init__(self, message: str, *, file_version: int, supported_version: int) -> None:
        super().__init__(message)
        self.file_version = file_version
        self.supported_version = supported_version


class SchemaMismatch(StorageError):
    """The file holds tables with our names but other columns: it is not a sessionstate
    database (or a damaged one); the file is left untouched."""

    code = "schema_mismatch"


class StorageConflict(StorageError):
    """A concurrent transaction won (a deadlock or a serialization failure on a database
    server): nothing was applied and the transaction can run again."""

    code = "storage_conflict"

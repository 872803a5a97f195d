"""Durable storage: the only package that speaks SQL.

``SqliteStore`` is the embedded default; a PostgreSQL store would offer the same methods
(the gateway and the protocol never see SQL).
"""

from .sqlite import (
    DEFAULT_SYNCHRONOUS,
    CursorRecord,
    EventRecord,
    Head,
    SessionRecord,
    SqliteStore,
    sqlite_path,
)

__all__ = [
    "DEFAULT_SYNCHRONOUS",
    "CursorRecord",
    "EventRecord",
    "Head",
    "SessionRecord",
    "SqliteStore",
    "sqlite_path",
]

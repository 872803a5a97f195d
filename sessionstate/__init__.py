"""sessionstate: session state awareness for multi-agent gateways.

A durable signal log of material changes per session, watcher cursors, one coalesced stale
notice per (watcher, target) pair, and exact ``changesSince`` reconciliation.
"""

from .errors import (
    InvalidArgument,
    InvalidDatabaseUrl,
    ProtocolError,
    SchemaMismatch,
    SchemaVersionError,
    SessionExists,
    SessionStateError,
    StorageBusy,
    StorageError,
    StorageFull,
    StorageUnavailable,
    UnknownSession,
    UnknownTool,
    UnsupportedBackend,
)
from .fencing import fence_untrusted, fenced_text, quote_untrusted
from .gateway import Gateway
from .keys import SessionRef
from .formats import notice_text
from .provenance import PROVENANCES, CursorPositions
from .statemachine import Positions
from . import tools  # noqa: F401  (the tool layer installs Gateway.call_tool; imported last)
from .aio import AsyncGateway  # after the tool layer: it mirrors Gateway's methods

__all__ = [
    "AsyncGateway",
    "CursorPositions",
    "Gateway",
    "InvalidArgument",
    "InvalidDatabaseUrl",
    "PROVENANCES",
    "Positions",
    "ProtocolError",
    "SchemaMismatch",
    "SchemaVersionError",
    "SessionExists",
    "SessionRef",
    "SessionStateError",
    "StorageBusy",
    "StorageError",
    "StorageFull",
    "StorageUnavailable",
    "UnknownSession",
    "UnknownTool",
    "UnsupportedBackend",
    "fence_untrusted",
    "fenced_text",
    "notice_text",
    "quote_untrusted",
]

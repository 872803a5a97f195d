"""sessionstate: session state awareness for multi-agent gateways.

A durable signal log of material changes per session, watcher cursors, one coalesced stale
notice per (watcher, target) pair, and exact ``changesSince`` reconciliation.
"""

from importlib.metadata import version as _version

from .errors import (
    InvalidArgument,
    InvalidDatabaseUrl,
    ProtocolError,
    SchemaMismatch,
    SchemaVersionError,
    SessionExists,
    SessionStateError,
    CommitOutcomeUnknown,
    StorageBusy,
    StorageConflict,
    StorageError,
    StorageFull,
    StorageUnavailable,
    UnknownSession,
    UnknownTool,
    UnsupportedBackend,
)
from .shared.fencing import fence_untrusted, fenced_text, quote_untrusted
from .facade.gateway import Diagnostics, Gateway, GatewayObserver
from .shared.keys import SessionRef
from .shared.formats import notice_text
from .shared.provenance import PROVENANCES, CursorPositions
from .statemachine import Positions
from .facade.aio import AsyncGateway


__version__ = _version("sessionstate")

__all__ = [
    "AsyncGateway",
    "CommitOutcomeUnknown",
    "CursorPositions",
    "Diagnostics",
    "Gateway",
    "GatewayObserver",
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
    "StorageConflict",
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

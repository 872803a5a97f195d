"""sessionstate: session state awareness for multi-agent gateways.

A durable signal log of material changes per session, watcher cursors, one coalesced stale
notice per (watcher, target) pair, and exact ``changesSince`` reconciliation.

Everything a public signature takes or returns is importable from here (``__all__``):
``tests/test_public_api.py`` walks the signatures of ``Gateway``, ``AsyncGateway``, their parts
and every class named here, and fails on a type that is not.
"""

from importlib.metadata import version as _version

from .errors import (
    CommitOutcomeUnknown,
    InvalidArgument,
    InvalidDatabaseUrl,
    ProtocolError,
    SchemaMismatch,
    SchemaVersionError,
    SessionExists,
    SessionStateError,
    StorageBusy,
    StorageConflict,
    StorageError,
    StorageFull,
    StorageUnavailable,
    UnknownSession,
    UnknownTool,
    UnsupportedBackend,
)
from .facade.aio import AsyncGateway, AsyncWakeHook
from .facade.gateway import Diagnostics, Gateway, GatewayObserver, OpenOptions
from .facade.parts import (
    Clock,
    Cluster,
    EventArgs,
    NoticeProtocol,
    PreparedEvent,
    Producers,
    ProtocolOptions,
    QueuedEvent,
    Registry,
    Runs,
    Transcripts,
    Waiter,
    WakeHook,
)
from .runner import (
    AgentRunner,
    Rule,
    RunCancelled,
    RunContext,
    RunExecutor,
    ScriptedRunner,
    TurnRequest,
    TurnResult,
)
from .shared.fencing import fence_untrusted, fenced_text, quote_untrusted
from .shared.formats import notice_text
from .shared.keys import SessionRef
from .shared.policy import ToolPolicy
from .shared.provenance import PROVENANCES, CursorPositions
from .statemachine import Positions
from .store import (
    ChangeFeed,
    ChangeSet,
    ChangesPage,
    CursorRecord,
    EventRecord,
    Head,
    MessageRecord,
    MetadataTable,
    MetaRecord,
    RunRecord,
    RunTable,
    SessionRecord,
    Store,
    TranscriptTable,
    UpstreamLink,
    UpstreamLinkTable,
    VacuumReport,
)
from .store.contract import ServingTable, TransactionObserver
from .store.records import PendingCursor, RecordedAlone

__version__ = _version("sessionstate")

__all__ = [
    "AgentRunner",
    "AsyncGateway",
    "AsyncWakeHook",
    "ChangeFeed",
    "ChangeSet",
    "ChangesPage",
    "Clock",
    "Cluster",
    "CommitOutcomeUnknown",
    "CursorPositions",
    "CursorRecord",
    "Diagnostics",
    "EventArgs",
    "EventRecord",
    "Gateway",
    "GatewayObserver",
    "Head",
    "InvalidArgument",
    "InvalidDatabaseUrl",
    "MessageRecord",
    "MetaRecord",
    "MetadataTable",
    "NoticeProtocol",
    "OpenOptions",
    "PROVENANCES",
    "PendingCursor",
    "Positions",
    "PreparedEvent",
    "Producers",
    "ProtocolError",
    "ProtocolOptions",
    "QueuedEvent",
    "RecordedAlone",
    "Registry",
    "Rule",
    "RunCancelled",
    "RunContext",
    "RunExecutor",
    "RunRecord",
    "RunTable",
    "Runs",
    "SchemaMismatch",
    "SchemaVersionError",
    "ScriptedRunner",
    "ServingTable",
    "SessionExists",
    "SessionRecord",
    "SessionRef",
    "SessionStateError",
    "StorageBusy",
    "StorageConflict",
    "StorageError",
    "StorageFull",
    "StorageUnavailable",
    "Store",
    "ToolPolicy",
    "TransactionObserver",
    "TranscriptTable",
    "Transcripts",
    "TurnRequest",
    "TurnResult",
    "UnknownSession",
    "UnknownTool",
    "UnsupportedBackend",
    "UpstreamLink",
    "UpstreamLinkTable",
    "VacuumReport",
    "Waiter",
    "WakeHook",
    "fence_untrusted",
    "fenced_text",
    "notice_text",
    "quote_untrusted",
]

"""Durable storage: the only package that speaks SQL.

``contract`` states what any backend provides (``typing.Protocol``s and the rules its queries
carry); ``records`` the rows that cross the boundary; ``factory.open_store`` picks the backend
from the URL's scheme. Both backends stand on one SQL layer: ``statements`` writes every core
statement once, ``dialect`` holds the little that differs, ``sql_store`` the shared methods
and the one unit of work. ``SqliteStore`` is the embedded default, ``PostgresStore``
(``postgres``, the optional extra) the server backend.
"""

from .contract import (
    ChangeFeed,
    CursorTable,
    MetadataTable,
    RunTable,
    SessionTable,
    SignalLog,
    Store,
    TranscriptTable,
    Transactions,
    UpstreamLinkTable,
)
from .decision_sql import Decisions
from .factory import BACKENDS, open_store
from .records import (
    COMPLETED,
    FAILED,
    RUNNING,
    ChangeSet,
    ChangesPage,
    CursorRecord,
    EventRecord,
    Head,
    MessageRecord,
    MetaRecord,
    RecordedAlone,
    RunRecord,
    SessionRecord,
    UpstreamLink,
    VacuumReport,
)
from .sqlite import DEFAULT_SYNCHRONOUS, SqliteStore, sqlite_path

__all__ = [
    "BACKENDS",
    "COMPLETED",
    "ChangeFeed",
    "ChangeSet",
    "ChangesPage",
    "Decisions",
    "FAILED",
    "RUNNING",
    "DEFAULT_SYNCHRONOUS",
    "CursorRecord",
    "CursorTable",
    "EventRecord",
    "Head",
    "MessageRecord",
    "MetaRecord",
    "MetadataTable",
    "RecordedAlone",
    "RunRecord",
    "RunTable",
    "SessionRecord",
    "SessionTable",
    "SignalLog",
    "SqliteStore",
    "Store",
    "TranscriptTable",
    "Transactions",
    "UpstreamLink",
    "UpstreamLinkTable",
    "VacuumReport",
    "open_store",
    "sqlite_path",
]

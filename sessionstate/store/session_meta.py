"""Per-session runtime metadata the session tools need beside the core registry.

The core ``sessions`` table stays minimal (key, agent, kind, parent, label, times); what an
agent runtime knows about a session (channel, model and its override, token counts, sandbox,
spawn depth, the stored reply route) lives here, one optional row per session. A session
without a row reads as the defaults (``MetaRecord.defaults``). A session delete drops the row
through a trigger, inside the delete's own transaction, as ``upstream_links`` does.

All SQL for this table lives in this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from sqlalchemy import DDL, event
from sqlmodel import Field, SQLModel

from ..errors import StorageError
from .dialect import Dialect
from .failures import translated
from .records import MetaRecord
from .schema import WideInt


class SessionMetaRow(SQLModel, table=True):
    __tablename__ = "session_meta"

    session_key: str = Field(primary_key=True)
    agent_id: str = Field(primary_key=True)
    session_id: str = Field(unique=True)
    channel: Optional[str] = None
    model: Optional[str] = None
    model_override: Optional[str] = None
    thinking: Optional[str] = None
    runtime: Optional[str] = None
    sandboxed: bool = False
    spawn_depth: int = 0  # one per level of nesting: 2**31 would take as many sessions
    input_tokens: int = Field(default=0, sa_type=WideInt)  # the sums of the messages' counts
    output_tokens: int = Field(default=0, sa_type=WideInt)
    last_channel: Optional[str] = None
    last_to: Optional[str] = None
    yielded_at: Optional[float] = None
    last_activity_at: float


event.listen(
    SessionMetaRow.__table__,  # type: ignore[attr-defined]  # set by SQLModel at class creation, not in its hints
    "after_create",
    DDL(
        "CREATE TRIGGER IF NOT EXISTS trg_session_meta_session_deleted"
        " AFTER DELETE ON sessions FOR EACH ROW BEGIN"
        " DELETE FROM session_meta WHERE session_key = OLD.session_key AND agent_id = OLD.agent_id;"
        " END"
    ).execute_if(dialect="sqlite"),  # postgres_schema.py: SESSION_CHILD_TABLES
)




_COLUMNS = (
    "session_key, agent_id, session_id, channel, model, model_override, thinking, runtime,"
    " sandboxed, spawn_depth, input_tokens, output_tokens, last_channel, last_to, yielded_at,"
    " last_activity_at"
)
GET_SQL = f"SELECT {_COLUMNS} FROM session_meta WHERE session_key = ? AND agent_id = ?"
BY_ID_SQL = f"SELECT {_COLUMNS} FROM session_meta WHERE session_id = ?"
ALL_SQL = f"SELECT {_COLUMNS} FROM session_meta"
INSERT_SQL = f"INSERT INTO session_meta ({_COLUMNS}) VALUES ({', '.join('?' * 16)})"
# Only these columns are ever updated after the insert; the names are never user input.
UPDATABLE = frozenset({
    "model_override", "input_tokens", "output_tokens", "last_channel", "last_to",
    "yielded_at", "last_activity_at", "channel", "model",
})
ADD_USAGE_SQL = (
    "UPDATE session_meta SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?"
    " WHERE session_key = ? AND agent_id = ?"
)


def _record(row: tuple[Any, ...]) -> MetaRecord:
    values = list(row)
    values[8] = bool(values[8])
    return MetaRecord(*values)


@translated
class SqlMetadataTable:
    """Meta rows on the store's connection (either backend); callers hold the store's lock."""

    def __init__(self, db: Any, dialect: Dialect, storage_error: Callable[[BaseException], StorageError]) -> None:
        self._db = db
        self._dialect = dialect
        self._q = dialect.texts(get=GET_SQL, by_id=BY_ID_SQL, all=ALL_SQL, insert=INSERT_SQL, add_usage=ADD_USAGE_SQL)
        self.storage_error = storage_error  # the store's translation, naming its database

    def get(self, key: str, agent_id: str) -> MetaRecord | None:
        row = self._db.execute(self._q.get, (key, agent_id)).fetchone()
        return _record(row) if row else None

    def by_session_id(self, session_id: str) -> MetaRecord | None:
        row = self._db.execute(self._q.by_id, (session_id,)).fetchone()
        return _record(row) if row else None

    def all(self) -> dict[tuple[str, str], MetaRecord]:
        return {(r[0], r[1]): _record(r) for r in self._db.execute(self._q.all).fetchall()}

    def insert(self, record: MetaRecord) -> None:
        values = list(record)
        values[8] = bool(record.sandboxed)  # a bool binds as 1/0 on SQLite, as BOOLEAN on PostgreSQL
        self._db.execute(self._q.insert, values)

    def update(self, key: str, agent_id: str, **fields: Any) -> None:
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in sorted(fields))
        self._db.execute(
            self._dialect.sql(f"UPDATE session_meta SET {assignments} WHERE session_key = ? AND agent_id = ?"),
            [fields[name] for name in sorted(fields)] + [key, agent_id],
        )

    def add_usage(self, key: str, agent_id: str, input_tokens: int, output_tokens: int) -> None:
        self._db.execute(self._q.add_usage, (input_tokens, output_tokens, key, agent_id))

    def dump(self) -> list[tuple[Any, ...]]:
        return self._db.execute("SELECT * FROM session_meta ORDER BY session_key, agent_id").fetchall()

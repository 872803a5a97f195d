"""Session transcripts: messages with role, text, provenance and tool calls/results.

One row per message, in one AUTOINCREMENT order across sessions (a session's ``id`` values
are increasing, which is all the tools need). JSON columns hold the structured parts. A
session delete drops its messages through a trigger, inside the delete's transaction.

All SQL for transcripts lives in this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional

from sqlalchemy import DDL, Column, Index, event
from sqlmodel import Field, SQLModel

from ..errors import StorageError
from .dialect import Dialect
from .failures import translated
from .records import MessageRecord
from .schema import WideInt


class MessageRow(SQLModel, table=True):
    __tablename__ = "session_messages"
    __table_args__ = (
        Index("ix_messages_session", "session_key", "agent_id", "id"),
        {"sqlite_autoincrement": True},
    )

    id: Optional[int] = Field(default=None, sa_column=Column(WideInt, primary_key=True))
    session_key: str
    agent_id: str
    role: str  # user, assistant, tool, system
    text: str
    actor_type: str  # human, agent, system
    actor_id: Optional[str] = None
    provenance: Optional[str] = None  # JSON object
    tool_calls: Optional[str] = None  # JSON array
    tool_result: Optional[str] = None  # JSON value
    input_tokens: int = Field(default=0, sa_type=WideInt)
    output_tokens: int = Field(default=0, sa_type=WideInt)
    created_at: float


event.listen(
    MessageRow.__table__,  # type: ignore[attr-defined]  # set by SQLModel at class creation, not in its hints
    "after_create",
    DDL(
        "CREATE TRIGGER IF NOT EXISTS trg_session_messages_session_deleted"
        " AFTER DELETE ON sessions FOR EACH ROW BEGIN"
        " DELETE FROM session_messages WHERE session_key = OLD.session_key AND agent_id = OLD.agent_id;"
        " END"
    ).execute_if(dialect="sqlite"),  # postgres_schema.py: SESSION_CHILD_TABLES
)




_COLUMNS = (
    "id, session_key, agent_id, role, text, actor_type, actor_id, provenance, tool_calls,"
    " tool_result, input_tokens, output_tokens, created_at"
)
INSERT_SQL = (
    "INSERT INTO session_messages (session_key, agent_id, role, text, actor_type, actor_id,"
    " provenance, tool_calls, tool_result, input_tokens, output_tokens, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)
# The newest `limit` rows, returned oldest first.
RECENT_SQL = (
    f"SELECT {_COLUMNS} FROM (SELECT {_COLUMNS} FROM session_messages"
    " WHERE session_key = ? AND agent_id = ? ORDER BY id DESC LIMIT ? OFFSET ?) AS recent ORDER BY id"
)
RECENT_ROLE_SQL = (
    "SELECT text FROM (SELECT id, text FROM session_messages"
    " WHERE session_key = ? AND agent_id = ? AND role = ? ORDER BY id DESC LIMIT ?) AS recent ORDER BY id"
)
FIRST_ROLE_SQL = (
    "SELECT text FROM session_messages WHERE session_key = ? AND agent_id = ? AND role = ?"
    " ORDER BY id LIMIT 1"
)
STATS_SQL = (
    "SELECT count(*), max(created_at) FROM session_messages WHERE session_key = ? AND agent_id = ?"
)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def _record(row: tuple[Any, ...]) -> MessageRecord:
    return MessageRecord(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], _load(row[7]), _load(row[8]),
        _load(row[9]), int(row[10]), int(row[11]), float(row[12]),
    )


@translated
class SqlTranscriptTable:
    """Message rows on the store's connection (either backend); callers hold the store's lock."""

    def __init__(self, db: Any, dialect: Dialect, storage_error: Callable[[BaseException], StorageError]) -> None:
        self._db = db
        self._q = dialect.texts(
            insert=INSERT_SQL, recent=RECENT_SQL, recent_role=RECENT_ROLE_SQL, first_role=FIRST_ROLE_SQL, stats=STATS_SQL
        )
        self.storage_error = storage_error  # the store's translation, naming its database

    def append(
        self,
        key: str,
        agent_id: str,
        role: str,
        text: str,
        *,
        actor_type: str,
        actor_id: str | None,
        provenance: dict[str, Any] | None,
        tool_calls: list[Any] | None,
        tool_result: Any,
        input_tokens: int,
        output_tokens: int,
        created_at: float,
    ) -> int:
        row = self._db.execute(
            self._q.insert,
            (key, agent_id, role, text, actor_type, actor_id, _dump(provenance), _dump(tool_calls),
             _dump(tool_result), input_tokens, output_tokens, created_at),
        ).fetchone()
        return int(row[0])

    def recent(self, key: str, agent_id: str, limit: int, offset: int = 0) -> list[MessageRecord]:
        rows = self._db.execute(self._q.recent, (key, agent_id, limit, offset)).fetchall()
        return [_record(r) for r in rows]

    def recent_texts(self, key: str, agent_id: str, role: str, limit: int) -> list[str]:
        rows = self._db.execute(self._q.recent_role, (key, agent_id, role, limit)).fetchall()
        return [r[0] for r in rows]

    def first_text(self, key: str, agent_id: str, role: str) -> str | None:
        row = self._db.execute(self._q.first_role, (key, agent_id, role)).fetchone()
        return row[0] if row else None

    def stats(self, key: str, agent_id: str) -> tuple[int, float | None]:
        count, last = self._db.execute(self._q.stats, (key, agent_id)).fetchone()
        return int(count), last

    def dump(self) -> list[tuple[Any, ...]]:
        return self._db.execute("SELECT * FROM session_messages ORDER BY id").fetchall()

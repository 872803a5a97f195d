"""Child runs started by ``sessions_spawn``: one row per run, its status and its end.

``status`` is ``running`` until the one terminal write, a compare-and-set on
``status = 'running'`` (``finish``): whichever of completion, timeout or kill comes first
wins, and the others change nothing. A delete of the child session drops its runs through a
trigger, inside the delete's transaction.

All SQL for runs lives in this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from sqlalchemy import DDL, Index, event
from sqlmodel import Field, SQLModel

from ..errors import StorageError
from .dialect import Dialect
from .failures import translated
from .records import COMPLETED, FAILED, RUNNING, RunRecord
from .schema import WideInt

__all__ = ["COMPLETED", "FAILED", "RUNNING", "RunRecord", "RunRow", "SqlRunTable"]


class RunRow(SQLModel, table=True):
    __tablename__ = "agent_runs"
    __table_args__ = (
        Index("ix_runs_requester", "requester_key", "requester_agent_id", "created_at"),
        Index("ix_runs_child", "child_key", "child_agent_id"),
    )

    run_id: str = Field(primary_key=True)
    requester_key: str
    requester_agent_id: str
    child_key: str
    child_agent_id: str
    runtime: str
    task: str
    label: Optional[str] = None
    model: Optional[str] = None
    thinking: Optional[str] = None
    thread: bool = False
    context: str = "isolated"
    timeout_seconds: Optional[float] = None
    status: str = RUNNING
    outcome: Optional[str] = None  # error, timeout, cancelled (failed runs)
    result_text: Optional[str] = None
    announce_channel: Optional[str] = None
    announce_to: Optional[str] = None
    steer_count: int = Field(default=0, sa_type=WideInt)
    created_at: float
    ended_at: Optional[float] = None


event.listen(
    RunRow.__table__,  # type: ignore[attr-defined]  # set by SQLModel at class creation, not in its hints
    "after_create",
    DDL(
        "CREATE TRIGGER IF NOT EXISTS trg_agent_runs_child_deleted"
        " AFTER DELETE ON sessions FOR EACH ROW BEGIN"
        " DELETE FROM agent_runs WHERE child_key = OLD.session_key AND child_agent_id = OLD.agent_id;"
        " END"
    ).execute_if(dialect="sqlite"),  # postgres_schema.py: SESSION_CHILD_TABLES
)




_COLUMNS = (
    "run_id, requester_key, requester_agent_id, child_key, child_agent_id, runtime, task, label,"
    " model, thinking, thread, context, timeout_seconds, status, outcome, result_text,"
    " announce_channel, announce_to, steer_count, created_at, ended_at"
)
INSERT_SQL = f"INSERT INTO agent_runs ({_COLUMNS}) VALUES ({', '.join('?' * 21)})"
GET_SQL = f"SELECT {_COLUMNS} FROM agent_runs WHERE run_id = ?"
BY_CHILD_SQL = f"SELECT {_COLUMNS} FROM agent_runs WHERE child_key = ? AND child_agent_id = ? ORDER BY created_at DESC, run_id"
BY_REQUESTER_SQL = (
    f"SELECT {_COLUMNS} FROM agent_runs WHERE requester_key = ? AND requester_agent_id = ?"
    " ORDER BY created_at DESC, run_id LIMIT ?"
)
ACTIVE_BY_REQUESTER_SQL = (
    f"SELECT {_COLUMNS} FROM agent_runs WHERE requester_key = ? AND requester_agent_id = ?"
    " AND status = 'running' ORDER BY created_at, run_id"
)
ACTIVE_SQL = f"SELECT {_COLUMNS} FROM agent_runs WHERE status = 'running' ORDER BY created_at, run_id"
FINISH_SQL = (
    "UPDATE agent_runs SET status = ?, outcome = ?, result_text = ?, ended_at = ?"
    " WHERE run_id = ? AND status = 'running'"
)
STEERED_SQL = "UPDATE agent_runs SET steer_count = steer_count + 1 WHERE run_id = ? AND status = 'running'"


def _record(row: tuple[Any, ...]) -> RunRecord:
    values = list(row)
    values[10] = bool(values[10])
    return RunRecord(*values)


@translated
class SqlRunTable:
    """Run rows on the store's connection (either backend); callers hold the store's lock."""

    def __init__(self, db: Any, dialect: Dialect, storage_error: Callable[[BaseException], StorageError]) -> None:
        self._db = db
        self._q = dialect.texts(
            insert=INSERT_SQL, get=GET_SQL, by_child=BY_CHILD_SQL, by_requester=BY_REQUESTER_SQL,
            active_by_requester=ACTIVE_BY_REQUESTER_SQL, active=ACTIVE_SQL, finish=FINISH_SQL,
            steered=STEERED_SQL,
        )
        self.storage_error = storage_error  # the store's translation, naming its database

    def insert(self, record: RunRecord) -> None:
        values = list(record)
        values[10] = bool(record.thread)  # a bool binds as 1/0 on SQLite, as BOOLEAN on PostgreSQL
        self._db.execute(self._q.insert, values)

    def get(self, run_id: str) -> RunRecord | None:
        row = self._db.execute(self._q.get, (run_id,)).fetchone()
        return _record(row) if row else None

    def by_child(self, key: str, agent_id: str) -> list[RunRecord]:
        return [_record(r) for r in self._db.execute(self._q.by_child, (key, agent_id)).fetchall()]

    def by_requester(self, key: str, agent_id: str, limit: int) -> list[RunRecord]:
        rows = self._db.execute(self._q.by_requester, (key, agent_id, limit)).fetchall()
        return [_record(r) for r in rows]

    def active_by_requester(self, key: str, agent_id: str) -> list[RunRecord]:
        rows = self._db.execute(self._q.active_by_requester, (key, agent_id)).fetchall()
        return [_record(r) for r in rows]

    def active(self) -> list[RunRecord]:
        return [_record(r) for r in self._db.execute(self._q.active).fetchall()]

    def finish(self, run_id: str, status: str, outcome: str | None, result_text: str | None, now: float) -> bool:
        """The one terminal write; ``False`` when the run already ended (or is gone)."""
        cur = self._db.execute(self._q.finish, (status, outcome, result_text, now, run_id))
        return cur.rowcount == 1

    def note_steered(self, run_id: str) -> bool:
        return self._db.execute(self._q.steered, (run_id,)).rowcount == 1

    def dump(self) -> list[tuple[Any, ...]]:
        return self._db.execute("SELECT * FROM agent_runs ORDER BY run_id").fetchall()

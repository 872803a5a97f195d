"""The durable schema, declared with SQLModel.

SQLModel owns the declaration (and ``create_all``); the hot path does not use ORM sessions,
it runs the statements of ``statements.py`` (one text per dialect, ``dialect.py``) through
``sql_store.py``.
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import BigInteger, Column, Index, Integer, text
from sqlmodel import Field, SQLModel

from .statements import CAUGHT_UP_CURSOR

SCHEMA_VERSION = 6

# Cursor provenance (spec R25), by rank: a registration raises ambient, never lowers.
PROVENANCE_SPAWN = "spawn"
PROVENANCE_EXPLICIT = "explicit"
PROVENANCE_AMBIENT = "ambient"
PROVENANCES = (PROVENANCE_SPAWN, PROVENANCE_EXPLICIT, PROVENANCE_AMBIENT)

# Every integer the code lets grow past 2**31 - 1 (sequence positions, AUTOINCREMENT ids, token
# counts, per-row counters): 64-bit on PostgreSQL, whose INTEGER is 32-bit. SQLite keeps
# INTEGER, which is 64-bit there and is what makes an id primary key the rowid. Plain ``int``
# fields (INTEGER on both) are left to values the code bounds far lower. Version 5 widens the
# columns older releases declared plain (migrations.py).
WideInt = Integer().with_variant(BigInteger(), "postgresql")


class SessionRow(SQLModel, table=True):
    """The minimal session registry the gateway needs."""

    __tablename__ = "sessions"

    session_key: str = Field(primary_key=True)
    agent_id: str = Field(primary_key=True)
    kind: str
    parent_key: Optional[str] = None
    parent_agent_id: Optional[str] = None
    label: Optional[str] = None
    created_at: float
    updated_at: float


class EventRow(SQLModel, table=True):
    """The signal log: one typed row per material change, never message content."""

    __tablename__ = "session_state_events"
    __table_args__ = (
        Index("ix_events_session_sequence", "session_key", "agent_id", "sequence"),
        Index("ix_events_recorded_at", "recorded_at"),
        {"sqlite_autoincrement": True},
    )

    # One global AUTOINCREMENT: sequences are never reused, even after pruning.
    sequence: Optional[int] = Field(default=None, sa_column=Column(WideInt, primary_key=True))
    session_key: str
    agent_id: str
    kind: str
    actor_type: str
    actor_id: Optional[str] = None
    run_id: Optional[str] = None
    summary: str
    payload: Optional[str] = None  # JSON text
    occurred_at: float
    recorded_at: float
    dedupe_key: Optional[str] = Field(default=None, unique=True)


class HeadRow(SQLModel, table=True):
    """Per-session state version and pruned watermark; pruning never deletes heads."""

    __tablename__ = "session_state_heads"

    session_key: str = Field(primary_key=True)
    agent_id: str = Field(primary_key=True)
    last_sequence: int = Field(sa_type=WideInt)
    pruned_max_sequence: int = Field(sa_type=WideInt)
    updated_at: float


class CursorRow(SQLModel, table=True):
    """A watcher's cursor on a target; its protocol state is derived from the positions."""

    __tablename__ = "session_watch_cursors"
    __table_args__ = (
        Index("ix_cursors_target", "target_session_key", "target_agent_id"),
        # Only caught-up cursors change on an event (R7): this index finds them without
        # reading the pending ones, so an event's cost does not grow with them.
        Index(
            "ix_cursors_target_caught_up",
            "target_session_key",
            "target_agent_id",
            sqlite_where=text(CAUGHT_UP_CURSOR),
            postgresql_where=text(CAUGHT_UP_CURSOR),
        ),
    )

    watcher_session_key: str = Field(primary_key=True)
    target_session_key: str = Field(primary_key=True)
    target_agent_id: str = Field(primary_key=True)
    last_seen_sequence: int = Field(sa_type=WideInt)
    notified_sequence: int = Field(sa_type=WideInt)
    material_sequence: int = Field(sa_type=WideInt)
    updated_at: float
    # spawn / explicit / ambient (spec R25); ambient cursors never wake (R26). Version 4.
    provenance: str = Field(default=PROVENANCE_EXPLICIT, sa_column_kwargs={"server_default": PROVENANCE_EXPLICIT})

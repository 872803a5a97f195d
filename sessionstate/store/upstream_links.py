"""Upstream links: which gateway session follows which external thread, and where it stands.

One live row per adopted session (session key + agent id). ``generation`` is an AUTOINCREMENT
id, so a link dropped and created again (a Continue) never reuses it; ``version`` grows on every
write. Every monitor write is a compare-and-set on (generation, version): a write computed
from a link that a Continue, a drop or a session delete replaced in the meantime changes
nothing and the caller rolls its events back.

A session delete drops its link through an SQLite trigger created with the table, so the core
``Gateway.delete_session`` needs no knowledge of this table, the drop is inside the delete's own
transaction, and it holds for every process and every ``Gateway`` instance on the file.

All SQL for links lives in this module.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Optional

from sqlalchemy import DDL, Column, UniqueConstraint, event
from sqlmodel import Field, SQLModel

from ..errors import StorageError
from .dialect import Dialect
from .failures import translated
from .records import UpstreamLink
from .schema import WideInt


class UpstreamLinkRow(SQLModel, table=True):
    """A live upstream link of one adopted session."""

    __tablename__ = "upstream_links"
    __table_args__ = (
        UniqueConstraint("session_key", "agent_id", name="uq_upstream_links_session"),
        # The activity dedupe key names provider + thread, so one thread feeds one session.
        UniqueConstraint("provider", "thread_id", name="uq_upstream_links_thread"),
        {"sqlite_autoincrement": True},
    )

    generation: Optional[int] = Field(default=None, sa_column=Column(WideInt, primary_key=True))
    session_key: str
    agent_id: str
    provider: str
    host: str
    thread_id: str
    marker: Optional[str] = None
    # False until a check has moved the marker to the thread's end (pre-adoption history).
    primed: bool = False
    consecutive_misses: int = 0  # the link is dropped at MISSES_BEFORE_DROP (3)
    version: int = Field(default=0, sa_type=WideInt)  # one more on every write
    last_checked_at: Optional[float] = None
    last_status: Optional[str] = None
    created_at: float


_DROP_ON_SESSION_DELETE = DDL(
    "CREATE TRIGGER IF NOT EXISTS trg_upstream_links_session_deleted"
    " AFTER DELETE ON sessions FOR EACH ROW BEGIN"
    " DELETE FROM upstream_links WHERE session_key = OLD.session_key AND agent_id = OLD.agent_id;"
    " END"
).execute_if(dialect="sqlite")  # postgres_schema.py creates the same trigger (SESSION_CHILD_TABLES)
# SQLModel sets __table__ when it creates a table class; its type hints do not declare it.
event.listen(UpstreamLinkRow.__table__, "after_create", _DROP_ON_SESSION_DELETE)  # type: ignore[attr-defined]




_COLUMNS = (
    "l.generation, l.session_key, l.agent_id, l.provider, l.host, l.thread_id, l.marker,"
    " l.primed, l.consecutive_misses, l.version, l.last_checked_at, l.last_status, l.created_at"
)
GET_SQL = f"SELECT {_COLUMNS} FROM upstream_links l WHERE l.session_key = ? AND l.agent_id = ?"
BY_THREAD_SQL = f"SELECT {_COLUMNS} FROM upstream_links l WHERE l.provider = ? AND l.thread_id = ?"
ALL_SQL = f"SELECT {_COLUMNS} FROM upstream_links l ORDER BY l.generation"
# Only watched sessions are monitored: some cursor must target the linked session.
WATCHED_SQL = (
    f"SELECT {_COLUMNS} FROM upstream_links l WHERE EXISTS (SELECT 1 FROM session_watch_cursors c"
    " WHERE c.target_session_key = l.session_key AND c.target_agent_id = l.agent_id)"
    " ORDER BY l.generation"
)
INSERT_SQL = (
    "INSERT INTO upstream_links (session_key, agent_id, provider, host, thread_id, marker, primed,"
    " consecutive_misses, version, last_checked_at, last_status, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?) RETURNING generation"
)
DELETE_SESSION_LINK_SQL = "DELETE FROM upstream_links WHERE session_key = ? AND agent_id = ?"
# Compare-and-set writes: each matches only the exact (generation, version) that was read.
ADVANCE_SQL = (
    "UPDATE upstream_links SET marker = ?, primed = ?, consecutive_misses = 0,"
    " version = version + 1, last_checked_at = ?, last_status = 'found'"
    " WHERE generation = ? AND version = ?"
)
MISS_SQL = (
    "UPDATE upstream_links SET consecutive_misses = consecutive_misses + 1,"
    " version = version + 1, last_checked_at = ?, last_status = 'missing'"
    " WHERE generation = ? AND version = ?"
)
# An error leaves the marker and the miss count alone (an error is never a miss).
ERROR_SQL = (
    "UPDATE upstream_links SET version = version + 1, last_checked_at = ?, last_status = 'error'"
    " WHERE generation = ? AND version = ?"
)
DROP_SQL = "DELETE FROM upstream_links WHERE generation = ? AND version = ?"


def _link(row: tuple[Any, ...]) -> UpstreamLink:
    (generation, key, agent, provider, host, thread, marker, primed, misses, version,
     checked, status, created) = row
    return UpstreamLink(
        int(generation), str(key), str(agent), str(provider), str(host), str(thread),
        None if marker is None else str(marker), bool(primed), int(misses), int(version),
        None if checked is None else float(checked), None if status is None else str(status),
        float(created),
    )


@translated
class SqlUpstreamLinkTable:
    """Link rows on the store's own connection and transactions.

    Reads and writes must run under the store's lock (the connection is shared); the
    callers in ``sessionstate.upstream`` take it. CAS methods return ``True`` when they wrote.
    """

    def __init__(
        self,
        db: Any,
        dialect: Dialect,
        transaction: Callable[[], AbstractContextManager[None]],
        storage_error: Callable[[BaseException], StorageError],
    ) -> None:
        self._db = db
        self._q = dialect.texts(
            get=GET_SQL, by_thread=BY_THREAD_SQL, all=ALL_SQL, watched=WATCHED_SQL, insert=INSERT_SQL,
            delete_session_link=DELETE_SESSION_LINK_SQL, advance=ADVANCE_SQL, miss=MISS_SQL, error=ERROR_SQL,
            drop=DROP_SQL,
        )
        self.storage_error = storage_error  # the store's translation, naming its database
        self._transaction = transaction

    def get(self, session_key: str, agent_id: str) -> UpstreamLink | None:
        row = self._db.execute(self._q.get, (session_key, agent_id)).fetchone()
        return _link(row) if row else None

    def by_thread(self, provider: str, thread_id: str) -> UpstreamLink | None:
        row = self._db.execute(self._q.by_thread, (provider, thread_id)).fetchone()
        return _link(row) if row else None

    def all(self) -> list[UpstreamLink]:
        return [_link(r) for r in self._db.execute(self._q.all).fetchall()]

    def watched(self) -> list[UpstreamLink]:
        return [_link(r) for r in self._db.execute(self._q.watched).fetchall()]

    def replace(
        self,
        session_key: str,
        agent_id: str,
        *,
        provider: str,
        host: str,
        thread_id: str,
        marker: str | None,
        primed: bool,
        now: float,
    ) -> int:
        """Drop the session's link (if any) and insert a new one; returns its generation."""
        with self._transaction():
            self._db.execute(self._q.delete_session_link, (session_key, agent_id))
            row = self._db.execute(
                self._q.insert,
                (session_key, agent_id, provider, host, thread_id, marker, bool(primed),
                 now if primed else None, "found" if primed else None, now),
            ).fetchone()
        return int(row[0])

    def advance(self, link: UpstreamLink, marker: str | None, now: float, *, primed: bool = True) -> bool:
        """A found check: new marker, misses reset (``primed=False`` while priming goes on)."""
        cur = self._db.execute(self._q.advance, (marker, bool(primed), now, link.generation, link.version))
        return cur.rowcount == 1

    def miss(self, link: UpstreamLink, now: float) -> bool:
        cur = self._db.execute(self._q.miss, (now, link.generation, link.version))
        return cur.rowcount == 1

    def note_error(self, link: UpstreamLink, now: float) -> bool:
        cur = self._db.execute(self._q.error, (now, link.generation, link.version))
        return cur.rowcount == 1

    def drop(self, link: UpstreamLink) -> bool:
        cur = self._db.execute(self._q.drop, (link.generation, link.version))
        return cur.rowcount == 1

"""Tables and SQL for several gateway processes on one database (spec section 6a).

- ``session_servers``: one row per open gateway that runs the change pump (its heartbeat);
- ``session_claims``: which server holds a session by explicit attach (R20, last attach wins);
- ``session_cursor_changes``: one row per watcher whose cursors or claim changed outside the
  event hot path, so a pump finds them through the primary key (R22);
- ``session_wake_slots``: the time of each watcher's last wake, shared by all processes (R23);
- the sweep's reads: the cursors ``freeze`` turned pending since a sweep are found through the
  log's new notifying events and the target index, so the event hot path writes nothing extra.

All SQL for these lives in this module (it runs on both backends; on PostgreSQL the change
log is replaced by notifications, see postgres_feed.py). Callers hold the gateway lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Iterable, Optional

from sqlalchemy import Column, Integer
from sqlmodel import Field, SQLModel

from ..errors import StorageError
from .failures import translated
from .records import PendingCursor, SweepSnapshot

# Keep this many change rows; a pump further behind resynchronises (R22).
CHANGE_LOG_KEEP = 10_000
CHANGE_LOG_TRIM_EVERY = 1_000


class ServerRow(SQLModel, table=True):
    __tablename__ = "session_servers"

    server_id: str = Field(primary_key=True)
    pid: int
    host: str
    started_at: float
    heartbeat_at: float


class ClaimRow(SQLModel, table=True):
    __tablename__ = "session_claims"

    session_key: str = Field(primary_key=True)
    server_id: str = Field(index=True)
    generation: int
    claimed_at: float


class CursorChangeRow(SQLModel, table=True):
    __tablename__ = "session_cursor_changes"
    __table_args__ = ({"sqlite_autoincrement": True},)

    stamp: Optional[int] = Field(default=None, sa_column=Column(Integer, primary_key=True))
    watcher_session_key: str
    recorded_at: float


class WakeSlotRow(SQLModel, table=True):
    __tablename__ = "session_wake_slots"

    watcher_session_key: str = Field(primary_key=True)
    woken_at: float




# A freeze sets N to the sequence of an event on the cursor's target, so the cursors frozen
# since a sweep are among those of the targets of the notifying events since it: a range of the
# log's primary key, then the target index per target. The hot path writes nothing for this.
NEW_TARGETS_SQL = (
    "SELECT DISTINCT session_key, agent_id FROM session_state_events"
    " WHERE sequence > ? AND sequence <= ? AND kind IN ({marks})"
)
FROZEN_ON_TARGET_SQL = (
    "SELECT watcher_session_key, target_session_key, target_agent_id, last_seen_sequence"
    " FROM session_watch_cursors WHERE target_session_key = ? AND target_agent_id = ?"
    " AND notified_sequence > last_seen_sequence AND notified_sequence > ?"
    " ORDER BY watcher_session_key"
)
PENDING_HELD_BY_SQL = (
    "SELECT watcher_session_key, target_session_key, target_agent_id, last_seen_sequence"
    " FROM session_watch_cursors WHERE watcher_session_key = ?"
    " AND notified_sequence > last_seen_sequence ORDER BY target_session_key, target_agent_id"
)
ALL_PENDING_SQL = (
    "SELECT watcher_session_key, target_session_key, target_agent_id, last_seen_sequence"
    " FROM session_watch_cursors WHERE notified_sequence > last_seen_sequence"
)
LOG_SEQUENCE_SQL = "SELECT seq FROM sqlite_sequence WHERE name = 'session_state_events'"


def note_cursor_changes(db: sqlite3.Connection, watchers: Iterable[str], now: float) -> None:
    """One change row per watcher (inside the caller's transaction); trims the log now and then."""
    rows = [(w, now) for w in dict.fromkeys(watchers)]
    if not rows:
        return
    if len(rows) == 1:  # a drain's one watcher: the cursor knows the new stamp, no second statement
        last = int(db.execute(
            "INSERT INTO session_cursor_changes (watcher_session_key, recorded_at) VALUES (?, ?)", rows[0]
        ).lastrowid or 0)
    else:
        db.executemany(
            "INSERT INTO session_cursor_changes (watcher_session_key, recorded_at) VALUES (?, ?)", rows
        )
        last = db.execute("SELECT last_insert_rowid()").fetchone()[0]
    if last // CHANGE_LOG_TRIM_EVERY != (last - len(rows)) // CHANGE_LOG_TRIM_EVERY:
        db.execute("DELETE FROM session_cursor_changes WHERE stamp <= ?", (last - CHANGE_LOG_KEEP,))


def pending_held_by(db: sqlite3.Connection, watcher: str) -> list[PendingCursor]:
    """W's pending cursors (the primary key's watcher prefix serves this)."""
    return [PendingCursor(*r) for r in db.execute(PENDING_HELD_BY_SQL, (watcher,)).fetchall()]




def read_sweep(
    db: sqlite3.Connection, after_sequence: int, after_stamp: int, kinds: tuple[str, ...]
) -> SweepSnapshot:
    """One read snapshot of what changed since (after_sequence, after_stamp) (R22).

    ``db`` must not be inside a transaction; the read transaction is opened and closed here.
    """
    db.execute("BEGIN")
    try:
        sequence = _int(db.execute(LOG_SEQUENCE_SQL).fetchone())
        first, last = db.execute("SELECT min(stamp), max(stamp) FROM session_cursor_changes").fetchone()
        targets = db.execute(
            NEW_TARGETS_SQL.format(marks=", ".join("?" * len(kinds))), (after_sequence, sequence, *kinds)
        ).fetchall()
        frozen = [p for key, agent_id in targets for p in frozen_on_target(db, key, agent_id, after_sequence)]
        changed = [
            r[0]
            for r in db.execute(
                "SELECT DISTINCT watcher_session_key FROM session_cursor_changes WHERE stamp > ?",
                (after_stamp,),
            ).fetchall()
        ]
    finally:
        db.execute("COMMIT")
    gap = first is not None and first > after_stamp + 1
    return SweepSnapshot(sequence, int(last or after_stamp), frozen, changed, gap)


def watermarks(db: sqlite3.Connection) -> tuple[int, int]:
    """The (log sequence, change stamp) a pump starting now begins after."""
    sequence = _int(db.execute(LOG_SEQUENCE_SQL).fetchone())
    stamp = _int(db.execute("SELECT max(stamp) FROM session_cursor_changes").fetchone())
    return sequence, stamp


def frozen_on_target(db: sqlite3.Connection, key: str, agent_id: str, after: int) -> list[PendingCursor]:
    """The target's pending cursors whose N is above ``after`` (the target index)."""
    return [PendingCursor(*r) for r in db.execute(FROZEN_ON_TARGET_SQL, (key, agent_id, after)).fetchall()]


def all_pending(db: sqlite3.Connection) -> list[PendingCursor]:
    return [PendingCursor(*r) for r in db.execute(ALL_PENDING_SQL).fetchall()]


# -- servers and claims (R19, R20) -----------------------------------------------------------


def register_server(db: sqlite3.Connection, server_id: str, pid: int, host: str, now: float) -> None:
    db.execute(
        "INSERT INTO session_servers (server_id, pid, host, started_at, heartbeat_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (server_id, pid, host, now, now),
    )


def heartbeat(db: sqlite3.Connection, server_id: str, now: float) -> bool:
    """Refresh the server's heartbeat; ``False`` when its row is gone (declared dead)."""
    return db.execute(
        "UPDATE session_servers SET heartbeat_at = ? WHERE server_id = ?", (now, server_id)
    ).rowcount == 1


def dead_servers(db: sqlite3.Connection, older_than: float) -> list[str]:
    return [r[0] for r in db.execute(
        "SELECT server_id FROM session_servers WHERE heartbeat_at < ?", (older_than,)
    ).fetchall()]


def remove_server(db: sqlite3.Connection, server_id: str, now: float) -> list[str]:
    """Drop a server's row and claims (inside the caller's transaction); the sessions it held."""
    keys = [r[0] for r in db.execute(
        "SELECT session_key FROM session_claims WHERE server_id = ?", (server_id,)
    ).fetchall()]
    db.execute("DELETE FROM session_claims WHERE server_id = ?", (server_id,))
    db.execute("DELETE FROM session_servers WHERE server_id = ?", (server_id,))
    return keys


def claim(db: sqlite3.Connection, key: str, server_id: str, now: float) -> int:
    """R20: make ``server_id`` the claimant of ``key``; returns the new generation."""
    generation = db.execute(
        "INSERT INTO session_claims (session_key, server_id, generation, claimed_at)"
        " VALUES (?, ?, 1, ?) ON CONFLICT (session_key) DO UPDATE SET"
        " server_id = excluded.server_id, generation = session_claims.generation + 1,"
        " claimed_at = excluded.claimed_at RETURNING generation",
        (key, server_id, now),
    ).fetchone()[0]
    return int(generation)


def unclaim(db: sqlite3.Connection, key: str, server_id: str, now: float) -> bool:
    dropped = db.execute(
        "DELETE FROM session_claims WHERE session_key = ? AND server_id = ?", (key, server_id)
    ).rowcount == 1
    return dropped


def claimant(db: sqlite3.Connection, key: str) -> tuple[str, int] | None:
    row = db.execute(
        "SELECT server_id, generation FROM session_claims WHERE session_key = ?", (key,)
    ).fetchone()
    return (row[0], int(row[1])) if row else None


def all_claims(db: sqlite3.Connection) -> dict[str, str]:
    return dict(db.execute("SELECT session_key, server_id FROM session_claims").fetchall())


# -- wake slots (R23) ------------------------------------------------------------------------


def take_wake_slot(db: sqlite3.Connection, watcher: str, now: float, window: float) -> tuple[bool, float]:
    """Move the watcher's wake time to ``now`` if its last wake is at least ``window`` old;
    ``(won, the slot's time)``. One statement, so two processes cannot both win one window.
    """
    row = db.execute(
        "INSERT INTO session_wake_slots (watcher_session_key, woken_at) VALUES (?, ?)"
        " ON CONFLICT (watcher_session_key) DO UPDATE SET woken_at = excluded.woken_at"
        " WHERE excluded.woken_at - session_wake_slots.woken_at >= ?"
        " RETURNING woken_at",
        (watcher, now, window),
    ).fetchall()  # all rows: the statement completes and an implicit transaction commits
    if row:
        return True, float(row[0][0])
    held = db.execute(
        "SELECT woken_at FROM session_wake_slots WHERE watcher_session_key = ?", (watcher,)
    ).fetchone()
    return False, float(held[0])


def wake_slots(db: sqlite3.Connection) -> dict[str, float]:
    """Every watcher's last wake (R23), read only: for operators (``sessionstate watchers``/``tail``)."""
    return {str(k): float(t) for k, t in db.execute(
        "SELECT watcher_session_key, woken_at FROM session_wake_slots").fetchall()}


def notifying_events_after(
    db: sqlite3.Connection, after: int, upto: int, kinds: tuple[str, ...]
) -> list[tuple[str, str, str | None]]:
    """(session key, agent id, actor id) of the notifying events in (after, upto] (a range of
    the primary key)."""
    marks = ", ".join("?" * len(kinds))
    return db.execute(
        "SELECT session_key, agent_id, actor_id FROM session_state_events"
        f" WHERE sequence > ? AND sequence <= ? AND kind IN ({marks}) ORDER BY sequence",
        (after, upto, *kinds),
    ).fetchall()


def _int(row: tuple[object, ...] | None) -> int:
    return int(row[0]) if row and row[0] is not None else 0  # type: ignore[call-overload]


@translated
class SqliteServingTable:
    """The functions above on the store's connection; callers hold the store's lock."""

    def __init__(self, db: sqlite3.Connection, storage_error: Callable[[BaseException], StorageError]) -> None:
        self._db = db
        self.storage_error = storage_error  # the store's translation, naming its database

    def note_cursor_changes(self, watchers: Iterable[str], now: float) -> None:
        note_cursor_changes(self._db, watchers, now)

    def pending_held_by(self, watcher: str) -> list[PendingCursor]:
        return pending_held_by(self._db, watcher)

    def read_sweep(self, after_sequence: int, after_stamp: int, kinds: tuple[str, ...]) -> SweepSnapshot:
        return read_sweep(self._db, after_sequence, after_stamp, kinds)

    def watermarks(self) -> tuple[int, int]:
        return watermarks(self._db)

    def frozen_on_target(self, target_key: str, target_agent_id: str, after: int) -> list[PendingCursor]:
        return frozen_on_target(self._db, target_key, target_agent_id, after)

    def all_pending(self) -> list[PendingCursor]:
        return all_pending(self._db)

    def register_server(self, server_id: str, pid: int, host: str, now: float) -> None:
        register_server(self._db, server_id, pid, host, now)

    def heartbeat(self, server_id: str, now: float) -> bool:
        return heartbeat(self._db, server_id, now)

    def dead_servers(self, older_than: float) -> list[str]:
        return dead_servers(self._db, older_than)

    # Each claim change is noted for the other servers in the same transaction (R22).

    def remove_server(self, server_id: str, now: float) -> list[str]:
        keys = remove_server(self._db, server_id, now)
        self.note_cursor_changes(keys, now)
        return keys

    def claim(self, key: str, server_id: str, now: float) -> int:
        generation = claim(self._db, key, server_id, now)
        self.note_cursor_changes([key], now)
        return generation

    def unclaim(self, key: str, server_id: str, now: float) -> bool:
        dropped = unclaim(self._db, key, server_id, now)
        if dropped:
            self.note_cursor_changes([key], now)
        return dropped

    def claimant(self, key: str) -> tuple[str, int] | None:
        return claimant(self._db, key)

    def all_claims(self) -> dict[str, str]:
        return all_claims(self._db)

    def take_wake_slot(self, watcher: str, now: float, window: float) -> tuple[bool, float]:
        return take_wake_slot(self._db, watcher, now, window)

    def wake_slots(self) -> dict[str, float]:
        return wake_slots(self._db)

    def notifying_events_after(self, after: int, upto: int, kinds: tuple[str, ...]) -> list[tuple[str, str, str | None]]:
        return notifying_events_after(self._db, after, upto, kinds)

"""Tables and SQL for several gateway processes on one database (spec section 6a).

- ``session_servers``: one row per open gateway that runs the change pump (its heartbeat);
- ``session_claims``: which server holds a session by explicit attach (R20, last attach wins);
- ``session_cursor_changes``: one row per watcher whose cursors or claim changed outside the
  event hot path, so a pump finds them through the primary key (R22);
- ``session_wake_slots``: the time of each watcher's last wake, shared by all processes (R23);
- the sweep's reads: the cursors ``freeze`` turned pending since a sweep are found through the
  log's new notifying events and the target index, so the event hot path writes nothing extra.

All SQL for these lives in this module and runs on both backends, but for the change log and
the sweep's snapshot (``note_cursor_changes``, ``read_sweep``, ``watermarks``): on
PostgreSQL those are replaced by notifications (postgres_feed.py). Callers hold the gateway lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Iterable, Optional

from sqlalchemy import Column
from sqlmodel import Field, SQLModel

from ..errors import StorageError
from .dialect import Dialect
from .failures import translated
from .records import PendingCursor, SweepSnapshot
from .schema import WideInt

# Keep this many change rows; a pump further behind resynchronises (R22).
CHANGE_LOG_KEEP = 10_000
CHANGE_LOG_TRIM_EVERY = 1_000


class ServerRow(SQLModel, table=True):
    __tablename__ = "session_servers"

    server_id: str = Field(primary_key=True)
    pid: int  # an OS process id (at most 2**22 on Linux)
    host: str
    started_at: float
    heartbeat_at: float


class ClaimRow(SQLModel, table=True):
    __tablename__ = "session_claims"

    session_key: str = Field(primary_key=True)
    server_id: str = Field(index=True)
    generation: int = Field(sa_type=WideInt)  # one more on every attach
    claimed_at: float


class CursorChangeRow(SQLModel, table=True):
    # A stamp is SQLite's rowid, the newest plus one: the trim never takes the newest row, so
    # no stamp is given twice without AUTOINCREMENT, whose sqlite_sequence row was one more
    # page in every drain's commit (migration 6).
    __tablename__ = "session_cursor_changes"

    stamp: Optional[int] = Field(default=None, sa_column=Column(WideInt, primary_key=True))
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
NOTIFYING_AFTER_SQL = (
    "SELECT session_key, agent_id, actor_id FROM session_state_events"
    " WHERE sequence > ? AND sequence <= ? AND kind IN ({marks}) ORDER BY sequence"
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
NOTE_CHANGE_SQL = "INSERT INTO session_cursor_changes (watcher_session_key, recorded_at) VALUES (?, ?)"
TRIM_CHANGES_SQL = "DELETE FROM session_cursor_changes WHERE stamp <= ?"
CHANGES_AFTER_SQL = "SELECT DISTINCT watcher_session_key FROM session_cursor_changes WHERE stamp > ?"
REGISTER_SERVER_SQL = (
    "INSERT INTO session_servers (server_id, pid, host, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)"
)
HEARTBEAT_SQL = "UPDATE session_servers SET heartbeat_at = ? WHERE server_id = ?"
DEAD_SERVERS_SQL = "SELECT server_id FROM session_servers WHERE heartbeat_at < ?"
CLAIMS_OF_SQL = "SELECT session_key FROM session_claims WHERE server_id = ?"
DROP_CLAIMS_SQL = "DELETE FROM session_claims WHERE server_id = ?"
DROP_SERVER_SQL = "DELETE FROM session_servers WHERE server_id = ?"
CLAIM_SQL = (
    "INSERT INTO session_claims (session_key, server_id, generation, claimed_at)"
    " VALUES (?, ?, 1, ?) ON CONFLICT (session_key) DO UPDATE SET"
    " server_id = excluded.server_id, generation = session_claims.generation + 1,"
    " claimed_at = excluded.claimed_at RETURNING generation"
)
UNCLAIM_SQL = "DELETE FROM session_claims WHERE session_key = ? AND server_id = ?"
CLAIMANT_SQL = "SELECT server_id, generation FROM session_claims WHERE session_key = ?"
ALL_CLAIMS_SQL = "SELECT session_key, server_id FROM session_claims"
# One statement, so two processes cannot both win one window (R23).
TAKE_WAKE_SLOT_SQL = (
    "INSERT INTO session_wake_slots (watcher_session_key, woken_at) VALUES (?, ?)"
    " ON CONFLICT (watcher_session_key) DO UPDATE SET woken_at = excluded.woken_at"
    " WHERE excluded.woken_at - session_wake_slots.woken_at >= ?"
    " RETURNING woken_at"
)
WAKE_SLOT_SQL = "SELECT woken_at FROM session_wake_slots WHERE watcher_session_key = ?"
WAKE_SLOTS_SQL = "SELECT watcher_session_key, woken_at FROM session_wake_slots"


def _int(row: tuple[object, ...] | None) -> int:
    return int(row[0]) if row and row[0] is not None else 0  # type: ignore[call-overload]


@translated
class SqlServingTable:
    """Servers, claims, wake slots and the sweep's reads on the store's connection (either
    backend); callers hold the store's lock."""

    # Runs only inside the store's transaction(), which translates its driver errors.
    HOT_PATH = ("note_cursor_changes",)

    def __init__(self, db: Any, dialect: Dialect, storage_error: Callable[[BaseException], StorageError]) -> None:
        self._db = db
        self._dialect = dialect
        self.storage_error = storage_error  # the store's translation, naming its database
        self._q = dialect.texts(
            frozen_on_target=FROZEN_ON_TARGET_SQL, pending_held_by=PENDING_HELD_BY_SQL, all_pending=ALL_PENDING_SQL,
            note_change=NOTE_CHANGE_SQL, trim_changes=TRIM_CHANGES_SQL, changes_after=CHANGES_AFTER_SQL,
            register_server=REGISTER_SERVER_SQL, heartbeat=HEARTBEAT_SQL, dead_servers=DEAD_SERVERS_SQL,
            claims_of=CLAIMS_OF_SQL, drop_claims=DROP_CLAIMS_SQL, drop_server=DROP_SERVER_SQL, claim=CLAIM_SQL,
            unclaim=UNCLAIM_SQL, claimant=CLAIMANT_SQL, all_claims=ALL_CLAIMS_SQL,
            take_wake_slot=TAKE_WAKE_SLOT_SQL, wake_slot=WAKE_SLOT_SQL, wake_slots=WAKE_SLOTS_SQL,
        )

    # -- the change log and the sweep's reads (R22) -----------------------------------------

    def note_cursor_changes(self, watchers: Iterable[str], now: float) -> None:
        """One change row per watcher (inside the caller's transaction); trims the log now and then."""
        db = self._db
        rows = [(w, now) for w in dict.fromkeys(watchers)]
        if not rows:
            return
        if len(rows) == 1:  # a drain's one watcher: the cursor knows the new stamp, no second statement
            last = int(db.execute(self._q.note_change, rows[0]).lastrowid or 0)
        else:
            db.executemany(self._q.note_change, rows)
            last = db.execute("SELECT last_insert_rowid()").fetchone()[0]
        if last // CHANGE_LOG_TRIM_EVERY != (last - len(rows)) // CHANGE_LOG_TRIM_EVERY:
            db.execute(self._q.trim_changes, (last - CHANGE_LOG_KEEP,))

    def pending_held_by(self, watcher: str) -> list[PendingCursor]:
        """W's pending cursors (the primary key's watcher prefix serves this)."""
        return [PendingCursor(*r) for r in self._db.execute(self._q.pending_held_by, (watcher,)).fetchall()]

    def read_sweep(self, after_sequence: int, after_stamp: int, kinds: tuple[str, ...]) -> SweepSnapshot:
        """One read snapshot of what changed since (after_sequence, after_stamp) (R22).

        The connection must not be inside a transaction; the read transaction is opened and
        closed here.
        """
        db = self._db
        db.execute("BEGIN")
        try:
            sequence = _int(db.execute(self._dialect.sequence_high_water).fetchone())
            first, last = db.execute("SELECT min(stamp), max(stamp) FROM session_cursor_changes").fetchone()
            targets = db.execute(self._with_kinds(NEW_TARGETS_SQL, kinds), (after_sequence, sequence, *kinds)).fetchall()
            frozen = [p for key, agent_id in targets for p in self.frozen_on_target(key, agent_id, after_sequence)]
            changed = [r[0] for r in db.execute(self._q.changes_after, (after_stamp,)).fetchall()]
        finally:
            db.execute("COMMIT")
        gap = first is not None and first > after_stamp + 1
        return SweepSnapshot(sequence, int(last or after_stamp), frozen, changed, gap)

    def watermarks(self) -> tuple[int, int]:
        """The (log sequence, change stamp) a pump starting now begins after."""
        sequence = _int(self._db.execute(self._dialect.sequence_high_water).fetchone())
        stamp = _int(self._db.execute("SELECT max(stamp) FROM session_cursor_changes").fetchone())
        return sequence, stamp

    def frozen_on_target(self, target_key: str, target_agent_id: str, after: int) -> list[PendingCursor]:
        """The target's pending cursors whose N is above ``after`` (the target index)."""
        rows = self._db.execute(self._q.frozen_on_target, (target_key, target_agent_id, after)).fetchall()
        return [PendingCursor(*r) for r in rows]

    def all_pending(self) -> list[PendingCursor]:
        return [PendingCursor(*r) for r in self._db.execute(self._q.all_pending).fetchall()]

    def notifying_events_after(self, after: int, upto: int, kinds: tuple[str, ...]) -> list[tuple[str, str, str | None]]:
        """(session key, agent id, actor id) of the notifying events in (after, upto] (a range of
        the primary key)."""
        rows = self._db.execute(self._with_kinds(NOTIFYING_AFTER_SQL, kinds), (after, upto, *kinds)).fetchall()
        return [tuple(r) for r in rows]

    def _with_kinds(self, template: str, kinds: tuple[str, ...]) -> str:
        return self._dialect.sql(template.format(marks=", ".join("?" * len(kinds))))

    # -- servers and claims (R19, R20); each claim change is noted for the other servers in
    # the same transaction (R22) ------------------------------------------------------------

    def register_server(self, server_id: str, pid: int, host: str, now: float) -> None:
        self._db.execute(self._q.register_server, (server_id, pid, host, now, now))

    def heartbeat(self, server_id: str, now: float) -> bool:
        """Refresh the server's heartbeat; ``False`` when its row is gone (declared dead)."""
        return bool(self._db.execute(self._q.heartbeat, (now, server_id)).rowcount == 1)

    def dead_servers(self, older_than: float) -> list[str]:
        return [r[0] for r in self._db.execute(self._q.dead_servers, (older_than,)).fetchall()]

    def remove_server(self, server_id: str, now: float) -> list[str]:
        """Drop a server's row and claims (inside the caller's transaction); the sessions it held."""
        keys = [r[0] for r in self._db.execute(self._q.claims_of, (server_id,)).fetchall()]
        self._db.execute(self._q.drop_claims, (server_id,))
        self._db.execute(self._q.drop_server, (server_id,))
        self.note_cursor_changes(keys, now)
        return keys

    def claim(self, key: str, server_id: str, now: float) -> int:
        """R20: make ``server_id`` the claimant of ``key``; returns the new generation."""
        generation = int(self._db.execute(self._q.claim, (key, server_id, now)).fetchone()[0])
        self.note_cursor_changes([key], now)
        return generation

    def unclaim(self, key: str, server_id: str, now: float) -> bool:
        dropped = bool(self._db.execute(self._q.unclaim, (key, server_id)).rowcount == 1)
        if dropped:
            self.note_cursor_changes([key], now)
        return dropped

    def claimant(self, key: str) -> tuple[str, int] | None:
        row = self._db.execute(self._q.claimant, (key,)).fetchone()
        return (row[0], int(row[1])) if row else None

    def all_claims(self) -> dict[str, str]:
        return {str(k): str(s) for k, s in self._db.execute(self._q.all_claims).fetchall()}

    # -- wake slots (R23) -------------------------------------------------------------------

    def take_wake_slot(self, watcher: str, now: float, window: float) -> tuple[bool, float]:
        """Move the watcher's wake time to ``now`` if its last wake is at least ``window`` old;
        ``(won, the slot's time)``."""
        # All rows: the statement completes and an implicit transaction commits.
        row = self._db.execute(self._q.take_wake_slot, (watcher, now, window)).fetchall()
        if row:
            return True, float(row[0][0])
        held = self._db.execute(self._q.wake_slot, (watcher,)).fetchone()
        return False, float(held[0])

    def wake_slots(self) -> dict[str, float]:
        """Every watcher's last wake (R23), read only: for operators (``sessionstate watchers``/``tail``)."""
        return {str(k): float(t) for k, t in self._db.execute(self._q.wake_slots).fetchall()}

"""Every statement on the core tables, written once for both backends.

``CoreStatements(dialect, notifying_kinds)`` builds the texts when a store opens: ``?``
parameters in the driver's style, the dialect's pieces in place, R7's effective material
expression with the notifying kinds inlined. The hot path's statements are constant strings
from then on, so each driver prepares them once (``sqlite3``'s statement cache, psycopg's
``prepare=True``). The record builders are here too: both backends return the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dialect import EVENT_PAGE_IN_SECONDS, Dialect
from .records import CaughtUpRow, CursorRecord

EVENT_COLUMNS = (
    "session_key, agent_id, kind, actor_type, actor_id, run_id, summary, payload,"
    " occurred_at, recorded_at, dedupe_key"
)
SESSION_COLUMNS = "session_key, agent_id, kind, parent_key, parent_agent_id, label, created_at, updated_at"
CURSOR_KEY = "watcher_session_key = ? AND target_session_key = ? AND target_agent_id = ?"

# Which cursors each list read returns; a server backend also locks the heads of the targets
# the same condition names before it reads (``SqlStore._cursors``).
HELD_BY = "c.watcher_session_key = ?"
PENDING = "c.notified_sequence > c.last_seen_sequence"
HELD_PENDING = f"{HELD_BY} AND {PENDING}"  # a drain's read: the watcher's pending cursors
NAMING = "(c.watcher_session_key = ? OR (c.target_session_key = ? AND c.target_agent_id = ?))"
BEHIND = (
    "c.notified_sequence > c.last_seen_sequence"
    " AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = c.watcher_session_key)"
)
EXPIRED = (
    "c.updated_at < ? AND coalesce((SELECT h.updated_at FROM session_state_heads h"
    " WHERE h.session_key = c.target_session_key AND h.agent_id = c.target_agent_id), 0) < ?"
)
EVERY = "1 = 1"
CURSOR_ORDER = " ORDER BY c.watcher_session_key, c.target_session_key, c.target_agent_id"
TARGET_ORDER = " ORDER BY c.target_session_key, c.target_agent_id"

# THE caught-up predicate of the SQL (the partial index's, the event path's reads): the
# statemachine derives CAUGHT_UP from the same equality (positions.derive_state); the store
# conformance tests hold the two equal over any positions a cursor may hold.
CAUGHT_UP_CURSOR = "notified_sequence = last_seen_sequence"

CURSOR_ROW = "(?, ?, ?, ?, ?, ?, ?)"
# The cursor upsert; ``{rows}`` is its source of rows (VALUES, or a backend's arrays).
PUT_CURSOR = (
    "INSERT INTO session_watch_cursors (watcher_session_key, target_session_key,"
    " target_agent_id, last_seen_sequence, notified_sequence, material_sequence, updated_at)"
    " {rows}"
    " ON CONFLICT (watcher_session_key, target_session_key, target_agent_id)"
    " DO UPDATE SET last_seen_sequence = excluded.last_seen_sequence,"
    " notified_sequence = excluded.notified_sequence,"
    " material_sequence = excluded.material_sequence, updated_at = excluded.updated_at"
)


def is_one_of(column: str, kinds: Sequence[str]) -> str:
    """``column`` equals one of ``kinds`` (the package's constants, quoted anyway), as a chain
    of equalities: SQLite builds a throwaway table for a literal ``IN`` list at every run of
    the statement, which cost a drain's pending read a sixth of its time."""
    return "(" + " OR ".join(f"{column} = '" + k.replace("'", "''") + "'" for k in kinds) + ")" if kinds else "1 = 0"


class CoreStatements:
    """The core tables' statements for one dialect (see the module docstring)."""

    def __init__(self, dialect: Dialect, notifying_kinds: Sequence[str]) -> None:
        d = dialect
        sql = d.sql
        self.dialect = d
        self._built: dict[tuple[str, str, str], str] = {}
        # R7: a pending cursor's effective material watermark is the larger of the stored one
        # and the newest notifying event on its target after `notified` by another actor.
        self.effective_material = f"""
            CASE WHEN c.notified_sequence > c.last_seen_sequence THEN {d.greatest}(
                c.material_sequence,
                coalesce((SELECT max(e.sequence) FROM session_state_events e
                          WHERE e.session_key = c.target_session_key
                            AND e.agent_id = c.target_agent_id
                            AND e.sequence > c.notified_sequence
                            AND {is_one_of('e.kind', notifying_kinds)}
                            AND (e.actor_id IS NULL OR e.actor_id <> c.watcher_session_key)),
                         0))
            ELSE c.material_sequence END"""
        columns = (
            "c.watcher_session_key, c.target_session_key, c.target_agent_id,"
            # Named: the driver reads each result column's name at every run (sqlite3 builds
            # the cursor's description), and an unnamed one is the whole expression's text.
            f" c.last_seen_sequence, c.notified_sequence, {self.effective_material} AS material_sequence, c.updated_at,"
            " c.provenance"
        )
        self.cursors_where = f"SELECT {columns} FROM session_watch_cursors c WHERE "
        self.targets_where = (
            "SELECT DISTINCT c.target_session_key, c.target_agent_id FROM session_watch_cursors c WHERE "
        )
        self.cursor = sql(
            f"SELECT {columns} FROM session_watch_cursors c WHERE c.watcher_session_key = ?"
            " AND c.target_session_key = ? AND c.target_agent_id = ?"
        )
        # The prune's write-back of the effective watermark into a target's pending cursors.
        self.write_back = sql(
            f"UPDATE session_watch_cursors AS c SET material_sequence = {self.effective_material}"
            " WHERE c.target_session_key = ? AND c.target_agent_id = ?"
            " AND c.notified_sequence > c.last_seen_sequence"
        )

        # -- sessions
        # A row already there (another process created it first) inserts nothing: the caller is
        # told SessionExists rather than a unique violation (spec 13).
        self.insert_session = sql(f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                                  " ON CONFLICT (session_key, agent_id) DO NOTHING")
        self.insert_head = sql(
            "INSERT INTO session_state_heads (session_key, agent_id, last_sequence,"
            " pruned_max_sequence, updated_at) VALUES (?, ?, 0, 0, ?)"
            " ON CONFLICT (session_key, agent_id) DO NOTHING"
        )
        self.get_session = sql(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_key = ? AND agent_id = ?")
        self.agents_with_key = sql("SELECT agent_id FROM sessions WHERE session_key = ? ORDER BY agent_id")
        self.list_sessions = f"SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at, session_key"
        self.delete_events = sql("DELETE FROM session_state_events WHERE session_key = ? AND agent_id = ?")
        self.delete_head = sql("DELETE FROM session_state_heads WHERE session_key = ? AND agent_id = ?")
        self.delete_session = sql("DELETE FROM sessions WHERE session_key = ? AND agent_id = ?")
        self.unlink_children = sql(
            "UPDATE sessions SET parent_key = NULL, parent_agent_id = NULL"
            " WHERE parent_key = ? AND parent_agent_id = ?"
        )

        # -- the signal log
        self.dedupe = sql("SELECT sequence FROM session_state_events WHERE dedupe_key = ?")
        self.head = sql(
            "SELECT last_sequence, pruned_max_sequence FROM session_state_heads"
            " WHERE session_key = ? AND agent_id = ?"
        )
        self.events_after = sql(
            f"SELECT sequence, {EVENT_COLUMNS} FROM session_state_events"
            " WHERE session_key = ? AND agent_id = ? AND sequence > ?"
            " ORDER BY sequence LIMIT ?"
        )
        page_rows = (
            " FROM session_state_events WHERE session_key = ? AND agent_id = ? AND sequence > ?"
            " ORDER BY sequence LIMIT ?"
        )
        self.event_page = sql(f"SELECT {d.event_page_columns}{page_rows}")
        # The page's sequences alone, from the session's index (event_rows.py has the rows).
        self.page_sequences = sql(f"SELECT sequence{page_rows}")
        # The same page with every instant in epoch seconds (where event_page rounds in SQL).
        self.event_page_in_seconds = sql(f"SELECT {EVENT_PAGE_IN_SECONDS}{page_rows}")
        # changesSince's head and earliest held sequence in one statement (the page is another).
        self.head_and_earliest = sql(
            "SELECT h.last_sequence, h.pruned_max_sequence, (SELECT min(e.sequence) FROM session_state_events e"
            " WHERE e.session_key = h.session_key AND e.agent_id = h.agent_id) AS earliest_sequence"
            " FROM session_state_heads h WHERE h.session_key = ? AND h.agent_id = ?"
        )
        self.sequence_high_water = d.sequence_high_water
        self.event_count = "SELECT count(*) FROM session_state_events"

        # -- cursors. The hot path's read pins the partial index where the planner takes a
        # hint (it may otherwise tie-break to the plain target index, which also reads the
        # pending cursors).
        self.caught_up_watchers = sql(
            # A caught-up cursor's notified position is its last-seen one: not read twice.
            "SELECT watcher_session_key, last_seen_sequence, material_sequence, provenance"
            f" FROM session_watch_cursors{d.indexed_by('ix_cursors_target_caught_up')}"
            f" WHERE target_session_key = ? AND target_agent_id = ? AND {CAUGHT_UP_CURSOR}"
        )
        self.has_watchers = sql(
            f"SELECT 1 FROM session_watch_cursors{d.indexed_by('ix_cursors_target')}"
            " WHERE target_session_key = ? AND target_agent_id = ? LIMIT 1"
        )
        self.put_cursor = sql(PUT_CURSOR.format(rows="VALUES " + CURSOR_ROW))
        self.delete_cursor = sql(f"DELETE FROM session_watch_cursors WHERE {CURSOR_KEY}")
        # Cursor provenance (spec R25, R26): written by seeds, read where a wake is decided.
        self.set_provenance = sql(f"UPDATE session_watch_cursors SET provenance = ? WHERE {CURSOR_KEY}")
        self.promote_provenance = sql(
            f"UPDATE session_watch_cursors SET provenance = ? WHERE {CURSOR_KEY} AND provenance = 'ambient'"
        )
        self.provenance = sql(f"SELECT provenance FROM session_watch_cursors WHERE {CURSOR_KEY}")

        # -- retention
        self.prune_beyond = sql(
            "SELECT sequence FROM session_state_events ORDER BY sequence DESC LIMIT 1 OFFSET ?"
        )
        self.prune_sequence_bound = sql(
            "SELECT sequence FROM session_state_events WHERE sequence <= ? ORDER BY sequence LIMIT 1 OFFSET ?"
        )
        self.prune_time_bound = sql(
            "SELECT recorded_at FROM session_state_events WHERE recorded_at < ?"
            " ORDER BY recorded_at LIMIT 1 OFFSET ?"
        )
        self.pruned_watermark = sql(
            "SELECT pruned_max_sequence FROM session_state_heads WHERE session_key = ? AND agent_id = ?"
        )
        self.raise_pruned = sql(
            f"UPDATE session_state_heads SET pruned_max_sequence = {d.greatest}(pruned_max_sequence, ?)"
            " WHERE session_key = ? AND agent_id = ?"
        )
        self.pending_on_target = sql(
            "SELECT watcher_session_key, target_session_key, target_agent_id,"
            " last_seen_sequence, notified_sequence, material_sequence"
            " FROM session_watch_cursors WHERE target_session_key = ? AND target_agent_id = ?"
            " AND notified_sequence > last_seen_sequence ORDER BY watcher_session_key"
        )

    def cursors(self, condition: str, order: str = CURSOR_ORDER) -> str:
        """The cursor read for one of the conditions above (each text built once)."""
        return self._built_once(self.cursors_where, condition, order)

    def cursor_targets(self, condition: str) -> str:
        """The distinct targets of the cursors ``condition`` names (the heads to lock first)."""
        return self._built_once(self.targets_where, condition, "")

    def _built_once(self, select: str, condition: str, order: str) -> str:
        key = (select, condition, order)
        sql = self._built.get(key)
        if sql is None:
            sql = self._built[key] = self.dialect.sql(select + condition + order)
        return sql

    def put_cursors(self, rows: int) -> str:
        """The cursor upsert for ``rows`` rows in one statement (their watchers distinct)."""
        return self.dialect.sql(PUT_CURSOR.format(rows="VALUES " + ", ".join([CURSOR_ROW] * rows)))


def cursor_record(row: Sequence[Any]) -> CursorRecord:
    return CursorRecord(row[0], row[1], row[2], (int(row[3]), int(row[4]), int(row[5])), float(row[6]), row[7])


def caught_up_rows_by_target(rows: Sequence[Sequence[Any]]) -> dict[tuple[str, str], list[CaughtUpRow]]:
    """The many-target caught-up read's rows (target key, target agent id, watcher, L, M,
    provenance) as ``CaughtUpRow``s by target. N is not read: on a caught-up cursor it equals
    L (INV1). The one-target reads build the same rows inline, on the event's hot path."""
    found: dict[tuple[str, str], list[CaughtUpRow]] = {}
    for key, agent, watcher, last_seen, material, provenance in rows:
        found.setdefault((key, agent), []).append((watcher, (last_seen, last_seen, material), provenance))
    return found


def first_value(row: Sequence[Any] | None) -> Any:
    """The first column of a fetched row; ``None`` when there is no row."""
    return None if row is None else row[0]

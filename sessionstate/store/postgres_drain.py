"""A drain's read on PostgreSQL in one round trip (issue 49).

A drain (R21) locks the heads of every target its watcher holds a cursor on, in key order,
and then reads the watcher's pending cursors with their effective positions (R7), in
statements that start after the locks are held (spec section 16, item 2). Statement by
statement that was five round trips (``BEGIN``, the targets, their lock, the targets again,
the read); here it is one PL/pgSQL function sent with the ``BEGIN``: each of its statements
takes its own snapshot (``VOLATILE``, READ COMMITTED), so the read sees every transition
committed while the locks were waited for, as the separate statements did. A target that
the watcher came to hold while the lock was taken (its head not locked yet) is locked by
another pass before the read; the read returns only cursors whose target is locked. The
function also returns the transaction's id, which R29 needs before ``COMMIT``.

The decision stays in Python (``fire``'s ``ack``); the drain's cursor writes are its last
statements and travel in its ``COMMIT``'s message (``PostgresStore._commit``): two round
trips in all.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .postgres_statements import literal
from .records import CursorRecord
from .statements import PENDING, CoreStatements, cursor_record

__all__ = ["DrainReads", "drain_function_ddl", "drain_function_name"]

_SIGNATURE = (
    "p_watcher text, OUT watcher varchar, OUT target_key varchar, OUT target_agent varchar, OUT last_seen bigint,"
    " OUT notified bigint, OUT material bigint, OUT updated_at float8, OUT provenance varchar, OUT txid text"
)


def _body(sql: CoreStatements) -> str:
    held = "SELECT c.target_session_key, c.target_agent_id FROM session_watch_cursors c WHERE c.watcher_session_key = p_watcher"
    # The cursor read both backends share, each row with the transaction's id (R29).
    read = sql.cursors_where.replace(" FROM session_watch_cursors c WHERE ",
                                     ", pg_current_xact_id()::text FROM session_watch_cursors c WHERE ", 1)
    return f"""
DECLARE
    keys text[];
    agents text[];
BEGIN
    LOOP
        -- Lock (key order) the heads of every target the watcher holds a cursor on; heads
        -- this transaction holds already cost no wait.
        SELECT coalesce(array_agg(h.session_key ORDER BY h.session_key, h.agent_id), '{{}}'),
               coalesce(array_agg(h.agent_id ORDER BY h.session_key, h.agent_id), '{{}}')
            INTO keys, agents
            FROM (SELECT session_key, agent_id FROM session_state_heads
                  WHERE (session_key, agent_id) IN ({held})
                  ORDER BY session_key, agent_id FOR UPDATE) h;
        -- Done when no pending cursor's target (with a head) is left unlocked.
        EXIT WHEN NOT EXISTS (
            SELECT 1 FROM session_watch_cursors c JOIN session_state_heads h
              ON h.session_key = c.target_session_key AND h.agent_id = c.target_agent_id
            WHERE c.watcher_session_key = p_watcher AND {PENDING}
              AND (c.target_session_key, c.target_agent_id) NOT IN (SELECT * FROM unnest(keys, agents)));
    END LOOP;
    RETURN QUERY {read}c.watcher_session_key = p_watcher AND {PENDING}
        AND (c.target_session_key, c.target_agent_id) IN (SELECT * FROM unnest(keys, agents))
        ORDER BY c.target_session_key, c.target_agent_id;
END"""


def drain_function_name(sql: CoreStatements) -> str:
    """The function's name: a hash of its signature and body (the notifying kinds are in it)."""
    text = _SIGNATURE + _body(sql)
    return "sessionstate_drain_read_" + hashlib.sha256(text.encode()).hexdigest()[:16]


def drain_function_ddl(sql: CoreStatements) -> str:
    body = _body(sql)
    return (
        f"CREATE OR REPLACE FUNCTION {drain_function_name(sql)}({_SIGNATURE})"
        f" RETURNS SETOF record LANGUAGE plpgsql VOLATILE AS $drain${body}$drain$"
    )


class DrainReads:
    """``PostgresStore.pending_for_drain``: the drain's lock and read as one call."""

    _depth: int
    _begin_unsent: bool
    _cur: Any
    _txid: str | None
    _locked: set[tuple[str, str]]
    _drain_read: str  # "SELECT * FROM <the function>(" (the store's, by its notifying kinds)

    def pending_for_drain(self, watcher: str) -> list[CursorRecord]:
        """The drain's lock and read in one function call (``postgres_drain``), sent with the
        transaction's ``BEGIN`` when that is still unsent: one round trip."""
        if not self._depth:
            return super().pending_for_drain(watcher)  # type: ignore[misc]
        call = self._drain_read + literal(watcher) + ")"
        cur = self._cur
        if self._begin_unsent:
            self._begin_unsent = False
            cur.execute("BEGIN; " + call, None, prepare=False)
            cur.nextset()  # past BEGIN's result
        else:
            cur.execute(call, None, prepare=False)
        rows = cur.fetchall()
        if rows:
            self._txid = str(rows[0][-1])  # R29: the transaction's id, each row's last column
        self._locked |= {(r[1], r[2]) for r in rows}
        return [cursor_record(r) for r in rows]


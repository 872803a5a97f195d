"""The statements only the PostgreSQL store runs: the head-row locks that order concurrent
writers, and the array (``unnest``) forms that put a group commit's appends, cursor reads and
cursor upserts in one round trip each. The statements both backends share are in
``statements.py``; ``postgres.py`` runs these."""

from __future__ import annotations

from typing import Any, Sequence

from .statements import CAUGHT_UP_CURSOR, EVENT_COLUMNS, PUT_CURSOR

LOCK_HEAD_SQL = (
    "SELECT last_sequence FROM session_state_heads"
    " WHERE session_key = %s AND agent_id = %s FOR UPDATE"
)
# The head bump both append statements end with.
# It also returns the transaction's id (assigned by the insert), which R29 needs before
# COMMIT: an append learns it in its own round trip instead of one more read at commit.
_BUMP_HEAD = (
    " UPDATE session_state_heads h SET last_sequence = inserted.sequence, updated_at = %s"
    " FROM inserted WHERE h.session_key = %s AND h.agent_id = %s"
    " RETURNING inserted.sequence, pg_current_xact_id()::text"
)
# Runs after LOCK_HEAD_SQL in the same transaction: the sequence is taken under the head's
# lock. ON CONFLICT covers a dedupe key committed by a transaction on another session after
# the dedupe check (no row comes back; the caller reads the winner's sequence).
APPEND_SQL = (
    f"WITH inserted AS (INSERT INTO session_state_events ({EVENT_COLUMNS})"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (dedupe_key) DO NOTHING RETURNING sequence)" + _BUMP_HEAD
)
# The first append to a session in a transaction, without a dedupe key: the head lock and the
# append in one statement, one round trip fewer (spec section 16, C1). The inserted row is
# produced by the locked head row, so its sequence is taken after the lock is held; no head
# row means nothing is inserted and nothing comes back. Arguments: the head's key twice, then
# APPEND_SQL's.
LOCK_AND_APPEND_SQL = (
    "WITH locked AS (SELECT 1 FROM session_state_heads"
    " WHERE session_key = %s AND agent_id = %s FOR UPDATE),"
    f" inserted AS (INSERT INTO session_state_events ({EVENT_COLUMNS})"
    " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s::float8, %s::float8, %s FROM locked"
    " RETURNING sequence)" + _BUMP_HEAD
)
# The heads of several targets, locked in key order (one order everywhere: no deadlock
# between two such statements).
LOCK_HEADS_SQL = (
    "SELECT session_key, agent_id FROM session_state_heads"
    " WHERE (session_key, agent_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
    " ORDER BY session_key, agent_id FOR UPDATE"
)
# The caught-up cursors of several targets in one statement (a group commit's decisions,
# after the heads are locked): the event path's read, for every target of the batch at once.
CAUGHT_UP_OF_SQL = (
    "SELECT target_session_key, target_agent_id, watcher_session_key,"
    " last_seen_sequence, material_sequence, provenance FROM session_watch_cursors"
    " WHERE (target_session_key, target_agent_id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
    f" AND {CAUGHT_UP_CURSOR}"
)
# Cursor upserts of any number of pairs (several targets) in one statement, from one array
# per column: a group commit's cursor changes in one round trip.
PUT_PAIRS_SQL = PUT_CURSOR.format(
    rows="SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[],"
    " %s::bigint[], %s::float8[])"
)
# Several events in one statement, one round trip for a group commit's appends, their heads
# already locked (``lock_targets``, key order). One array per column, in input order; a dedupe
# key already in the log is found, not inserted (no sequence is consumed for it); the others
# take their sequences in input order (the ORDER BY before nextval), so one session's events
# keep their order; each session's head moves to its largest new sequence. A dedupe key that
# another session's transaction committed meanwhile conflicts and comes back not inserted.
# It is sent in one pipeline with the heads' lock, before that lock's answer is read: a
# session without a head gets its rows inserted and no head bump, and the caller, seeing the
# lock's answer, raises UnknownSession, which rolls them back (their sequences stay unused, a
# gap). Each row also carries the transaction's id, which R29 needs before COMMIT.
APPEND_MANY_SQL = (
    "WITH src AS MATERIALIZED (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[],"
    " %s::text[], %s::text[], %s::text[], %s::text[], %s::float8[], %s::float8[], %s::text[])"
    f" WITH ORDINALITY AS s({EVENT_COLUMNS}, ord)),"
    " existing AS MATERIALIZED (SELECT s.ord, e.sequence FROM src s"
    " JOIN session_state_events e ON e.dedupe_key = s.dedupe_key),"
    " numbered AS MATERIALIZED (SELECT n.*, nextval('session_state_events_sequence_seq') AS sequence"
    " FROM (SELECT * FROM src WHERE ord NOT IN (SELECT ord FROM existing)"
    " ORDER BY ord) n),"
    f" inserted AS (INSERT INTO session_state_events (sequence, {EVENT_COLUMNS})"
    f" SELECT sequence, {EVENT_COLUMNS} FROM numbered ORDER BY ord"
    " ON CONFLICT (dedupe_key) DO NOTHING RETURNING sequence),"
    " bumped AS (UPDATE session_state_heads h SET last_sequence = m.last, updated_at = m.at"
    " FROM (SELECT n.session_key, n.agent_id, max(n.sequence) AS last, max(n.recorded_at) AS at"
    " FROM numbered n JOIN inserted i ON i.sequence = n.sequence GROUP BY n.session_key, n.agent_id) m"
    " WHERE h.session_key = m.session_key AND h.agent_id = m.agent_id)"
    " SELECT n.ord, n.sequence, i.sequence IS NOT NULL, true, pg_current_xact_id()::text FROM numbered n"
    " LEFT JOIN inserted i ON i.sequence = n.sequence"
    " UNION ALL SELECT ord, sequence, false, false, pg_current_xact_id()::text FROM existing"
)
# Up to this many cursor upserts go in one statement, one round trip with its plan prepared
# once per row count: three rows take ~100 µs that way against ~145 µs through executemany's
# pipeline. A larger freeze (rare) uses executemany, so the statement texts stay few.
PUT_CURSORS_MAX_ROWS = 16


def literal(value: Any) -> str:
    """A value as an SQL literal, for the statements that travel inside a simple-query message
    (the connection sets ``standard_conforming_strings``; text holds no NUL on PostgreSQL)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) + "::float8"
    return "'" + str(value).replace("'", "''") + "'"


def put_cursors_literal(upserts: Sequence[Sequence[Any]]) -> str:
    """The cursor upsert of ``upserts`` (distinct pairs) as one literal statement: what a
    transaction sends in its ``COMMIT``'s message when the write is its last statement."""
    rows = ", ".join("(" + ", ".join(map(literal, row)) + ")" for row in upserts)
    return PUT_CURSOR.format(rows="VALUES " + rows)

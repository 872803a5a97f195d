"""A lone record on PostgreSQL in one round trip (issue 49).

Outside a caller's transaction, one event's whole transaction is one server-side function,
called in one simple-query message with its ``BEGIN`` and ``COMMIT``: the head's lock, the
append and the head bump, the decision on the target's caught-up cursors and their write,
the ``NOTIFY`` of R22 and R29's commit witness all run on the server, and the answer brings
back the sequence and the notices the decision opened. The client sends one message and reads
one answer; the statements that made five round trips run as one.

The decision is the statemachine's: ``decision_sql.fired`` renders the table's effects for
``material_event`` and ``self_event`` (R2 picks one per watcher, by the event's actor) into
the function's body; the function's name carries a hash of its body, so a release with other
effects creates and calls another function and two releases sharing a database never call
each other's. Each statement of a PL/pgSQL function takes a fresh snapshot (it is
``VOLATILE``), so the cursors are read after the head's lock is held: a seed, drain or
freeze that committed while this append waited for the lock is seen, as it is when the
statements come one by one.

R29: the transaction writes its store's witness row (the store's number for it and the
sequence it appended) last, in the same statement. When the answer is lost, ``settle`` first
makes sure the old server process is gone (ended, if it is still running on the same server
run: whatever it has not committed by then rolls back), then reads the row: this
transaction's number, it committed (and the row gives the sequence); another, it did not.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ..errors import CommitOutcomeUnknown, StorageError, StorageUnavailable, UnknownSession
from . import commit_outcome
from .commit_outcome import ABORTED, COMMITTED, UNKNOWN, WITNESS_TABLE
from .decision_sql import CAUGHT_UP, MATERIAL_EVENT, SELF_EVENT, Decisions, fired
from .postgres_errors import translate
from .postgres_statements import literal
from .postgres_feed import MAX_PAYLOAD_BYTES, RESYNC_PAYLOAD, encode_changes
from .records import EventRow, RecordedAlone
from .statements import CAUGHT_UP_CURSOR, EVENT_COLUMNS

__all__ = ["RecordedAlone", "RecordsAlone", "call_statement", "function_ddl", "function_name", "note_parts", "settle"]

# The names the decision's expressions read: the caught-up row's positions and the sequence.
_NAMES = {"L": "c.l", "N": "c.n", "M": "c.m", "s": "o_sequence"}


def _decision(decisions: Decisions) -> str:
    """The new positions and the notice of each caught-up row (R2: the actor's own cursor
    gets ``self_event``, every other ``material_event``), from the table's effect data."""
    material = fired(MATERIAL_EVENT, _NAMES, decisions, states=(CAUGHT_UP,))
    own = fired(SELF_EVENT, _NAMES, decisions, states=(CAUGHT_UP,))
    return ", ".join(
        f"CASE WHEN c.own THEN {getattr(own, out)} ELSE {getattr(material, out)} END AS n{out.lower()}"
        for out in ("L", "N", "M", "opened")
    )


def _body(decisions: Decisions) -> str:
    return f"""
BEGIN
    PERFORM 1 FROM session_state_heads WHERE session_key = p_key AND agent_id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- no such session: nothing written, o_sequence stays NULL
    END IF;
    INSERT INTO session_state_events ({EVENT_COLUMNS})
        VALUES (p_key, p_agent, p_kind, p_actor_type, p_actor_id, p_run_id, p_summary, p_payload,
                p_occurred_at, p_recorded_at, NULL)
        RETURNING sequence INTO o_sequence;
    UPDATE session_state_heads SET last_sequence = o_sequence, updated_at = p_recorded_at
        WHERE session_key = p_key AND agent_id = p_agent;
    IF p_notifies THEN
        WITH c AS (
            SELECT watcher_session_key AS w, last_seen_sequence AS l, notified_sequence AS n,
                   material_sequence AS m, provenance AS p,
                   (p_actor_id IS NOT NULL AND watcher_session_key = p_actor_id) AS own
            FROM session_watch_cursors
            WHERE target_session_key = p_key AND target_agent_id = p_agent AND {CAUGHT_UP_CURSOR}),
        d AS (SELECT c.w, c.p, c.l, c.n, c.m, {_decision(decisions)} FROM c),
        written AS (
            UPDATE session_watch_cursors x SET last_seen_sequence = d.nl, notified_sequence = d.nn,
                material_sequence = d.nm, updated_at = p_recorded_at
            FROM d
            WHERE x.watcher_session_key = d.w AND x.target_session_key = p_key AND x.target_agent_id = p_agent
              AND (d.nl, d.nn, d.nm) IS DISTINCT FROM (d.l, d.n, d.m))
        SELECT array_agg(d.w ORDER BY d.w), array_agg(d.nopened ORDER BY d.w), array_agg(d.p ORDER BY d.w)
            INTO o_watchers, o_opened, o_provenances
            FROM d WHERE d.nopened IS NOT NULL;
        PERFORM pg_notify(p_channel, p_note_head || o_sequence::text || p_note_tail);
    END IF;
    INSERT INTO {WITNESS_TABLE} (owner, witnessed, sequence) VALUES (p_owner, p_number, o_sequence)
        ON CONFLICT (owner) DO UPDATE SET witnessed = excluded.witnessed, sequence = excluded.sequence,
        written_at = now();
END"""


_SIGNATURE = (
    "p_key text, p_agent text, p_kind text, p_actor_type text, p_actor_id text, p_run_id text,"
    " p_summary text, p_payload text, p_occurred_at float8, p_recorded_at float8,"
    " p_notifies boolean, p_channel text, p_note_head text, p_note_tail text,"
    " p_owner text, p_number bigint,"
    " OUT o_sequence bigint, OUT o_watchers text[], OUT o_opened bigint[], OUT o_provenances text[]"
)


def function_name(decisions: Decisions) -> str:
    """The function's name: a hash of its signature and body (one per release's effects)."""
    return "sessionstate_record_" + hashlib.sha256((_SIGNATURE + _body(decisions)).encode()).hexdigest()[:16]


def function_ddl(decisions: Decisions) -> str:
    """``CREATE OR REPLACE`` of the function for ``decisions`` (run at every writable open,
    under the schema's advisory lock)."""
    body = _body(decisions)
    return (
        f"CREATE OR REPLACE FUNCTION {function_name(decisions)}({_SIGNATURE})"
        f" LANGUAGE plpgsql VOLATILE AS $record${body}$record$"
    )


def note_parts(row: EventRow) -> tuple[str, str] | None:
    """R22's payload for this one event, split around its sequence (not known before the
    append): ``(head, tail)``; ``None`` when the event alone does not fit one notification."""
    key, agent_id, actor_id = row[0], row[1], row[4]
    payloads = encode_changes((), [(key, agent_id, actor_id, 0)])
    if len(payloads) != 1 or payloads[0] == RESYNC_PAYLOAD or len(payloads[0].encode()) + 20 > MAX_PAYLOAD_BYTES:
        return None
    whole = payloads[0]
    if not whole.endswith(",0]]}"):
        return None
    return whole[: -len("0]]}")], "]]}"


def call_statement(
    name: str, row: EventRow, notifies: bool, channel: str, note: tuple[str, str] | None, owner: str, number: int
) -> str:
    """The one message: ``BEGIN``, the function's call, ``COMMIT``."""
    head, tail = note if note is not None else (None, None)
    args = (*row[:10], notifies, channel if notifies else None, head, tail, owner, number)
    return "BEGIN; SELECT * FROM " + name + "(" + ", ".join(map(literal, args)) + "); COMMIT"


def answer(row: Sequence[Any] | None) -> RecordedAlone | None:
    """The function's answer row; ``None`` when the session has no head (nothing written)."""
    if row is None or row[0] is None:
        return None
    watchers, opened, provenances = row[1] or (), row[2] or (), row[3] or ()
    return RecordedAlone(int(row[0]), [(w, int(o), p) for w, o, p in zip(watchers, opened, provenances)])


# -- R29: the answer was lost --------------------------------------------------------------

BACKEND_SQL = "SELECT pg_backend_pid(), (SELECT backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid())"
_ALIVE_SQL = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND backend_start::text = %s"
_END_SQL = "SELECT pg_terminate_backend(%s)"
_READ_SQL = f"SELECT witnessed, sequence FROM {WITNESS_TABLE} WHERE owner = %s"


def settle(
    connect: Callable[[], "psycopg.Connection[Any]"],
    began_on: str | None,
    backend: tuple[int, str] | None,
    owner: str,
    number: int,
    *,
    seconds: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[str, int | None]:
    """``(outcome, sequence)`` of a lone record whose answer was lost: ``COMMITTED`` with the
    sequence when the store's witness row holds ``number``, ``ABORTED`` when it holds another
    (or there is none), ``UNKNOWN`` when no server answers in time or the old server process
    (``backend``: its pid and start, on the server run ``began_on``) cannot be ended."""
    deadline = clock() + (commit_outcome.RESOLVE_SECONDS if seconds is None else seconds)
    while True:
        try:
            conn = connect()
            same_run = began_on is not None and conn.execute(commit_outcome.TIMELINE_SQL).fetchone()[0] == began_on  # type: ignore[index]
            if same_run and backend is not None and conn.execute(_ALIVE_SQL, backend).fetchone() is not None:
                # The old process may still commit: end it, and ask again once it is gone.
                conn.execute(_END_SQL, (backend[0],))
            else:
                found = conn.execute(_READ_SQL, (owner,)).fetchone()
                if found is not None and int(found[0]) == number:
                    return COMMITTED, None if found[1] is None else int(found[1])
                return ABORTED, None
        except (psycopg.Error, StorageError):
            pass
        if clock() >= deadline:
            return UNKNOWN, None
        sleep(commit_outcome.PAUSE_SECONDS)


# The notices a committed record whose answer was lost owes (R18's owed notices, as the change
# feed reads them): its event froze exactly the target's pending cursors whose frozen
# watermark is its sequence; each owes the notice since its L.
FROZEN_BY_SQL = (
    "SELECT watcher_session_key, last_seen_sequence, provenance FROM session_watch_cursors"
    " WHERE target_session_key = %s AND target_agent_id = %s AND notified_sequence = %s"
    " AND last_seen_sequence < notified_sequence ORDER BY watcher_session_key"
)


class RecordsAlone:
    """``PostgresStore.record_alone``: the lone record's one round trip (module docstring).
    Built on the store's connection (``PostgresConnected``) and its commit witness."""

    lock: Any
    witness: commit_outcome.CommitWitness
    channel: str
    commit_resolutions: dict[str, int]
    _pg: "psycopg.Connection[Any]"
    _cur: "psycopg.Cursor[Any]"
    _depth: int
    _observers: list[Any]
    _notifying_kinds: frozenset[str]
    _timeline: str | None
    _backend: tuple[int, str] | None
    _reconnect_if_broken: Callable[[], None]
    _resolving_connection: Callable[[], "psycopg.Connection[Any]"]
    _execute: Callable[..., Any]

    record_function: str | None  # ``function_name(decisions)`` when the store opened with them

    def record_alone(self, row: EventRow) -> RecordedAlone | None:
        """One event as its own transaction in one round trip: its sequence and the notices
        its decision opened; ``None`` (nothing sent) when this is no lone record here: inside
        a transaction, under a transaction observer, with a dedupe key, or an event too large
        for one notification. Raises ``UnknownSession`` (nothing written) and ``StorageError``
        as an append in its own transaction does; a lost answer is settled (R29)."""
        if row[10] is not None or self.record_function is None:
            return None
        with self.lock:
            if self._depth or self._observers:
                return None
            notifies = row[2] in self._notifying_kinds
            note = note_parts(row) if notifies else None
            if notifies and note is None:
                return None
            self._reconnect_if_broken()
            witness = self.witness
            witness.number += 1
            number, began_on, backend = witness.number, self._timeline, self._backend
            sql = call_statement(self.record_function, row, notifies, self.channel, note, witness.owner, number)
            cur = self._cur
            try:
                cur.execute(sql, None, prepare=False)
                cur.nextset()  # past BEGIN's result
                found = cur.fetchone()
            except psycopg.Error as exc:
                error = translate(exc, committing=True)
                if not isinstance(error, CommitOutcomeUnknown):
                    self._end_failed_transaction()
                    raise error from exc
                return self._settled(row, error, began_on, backend, number)
            recorded = answer(found)
            if recorded is None:
                raise UnknownSession(f"unknown session {row[0]!r} (agent {row[1]!r})")
            return recorded

    def _end_failed_transaction(self) -> None:
        try:
            if self._pg.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._pg.execute("ROLLBACK")
        except psycopg.Error:
            pass  # a broken connection: the server rolled back; the next use reconnects

    def _settled(
        self, row: EventRow, error: CommitOutcomeUnknown, began_on: str | None, backend: tuple[int, str] | None,
        number: int,
    ) -> RecordedAlone:
        outcome, sequence = settle(self._resolving_connection, began_on, backend, self.witness.owner, number)
        self.commit_resolutions[outcome] += 1
        if outcome == COMMITTED and sequence is not None:
            frozen = self._execute(FROZEN_BY_SQL, (row[0], row[1], sequence)).fetchall()
            return RecordedAlone(sequence, [(w, int(since), p) for w, since, p in frozen])
        if outcome == ABORTED:
            raise StorageUnavailable(
                "PostgreSQL connection lost during a lone record's commit; it rolled back", retry_safe=True
            ) from None
        raise error

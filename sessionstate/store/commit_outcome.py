"""Resolving a PostgreSQL commit whose answer was lost (spec R29).

When the connection breaks after ``COMMIT`` was sent and before its answer arrived, the
transaction may have committed or not. The store learns the transaction's id just before it
sends ``COMMIT`` (``pg_current_xact_id_if_assigned()``: nothing is assigned, and nothing needs
resolving, for a transaction that wrote nothing) and, after such a loss, asks the server it
reaches next (the same one restarted, or a promoted standby through a multi-host URL) with
``pg_xact_status``:

- ``committed`` on the same timeline: the transaction committed; the caller goes on as if the
  answer had arrived. On another timeline (a failover happened), or from another run of the server (it restarted), the id may have been issued
  again by the promoted server, so that answer is only "unknown".
- ``aborted``, ``in progress`` on another timeline (another transaction's), or an id "in the
  future" of the answering server: the transaction is not in the database; it rolled back.
- ``in progress`` on the same timeline: the old server process has not noticed the loss yet;
  asked again after a pause.
- no answer (the history was truncated), or no server within ``RESOLVE_SECONDS``: unknown.

A transaction that asked for a witness (a drain) is not left unknown when a server answers:
it wrote its number into its store's row of ``WITNESS_TABLE`` with its ``COMMIT``, and
``witnessed`` reads that row back. Only the store that owns the row writes it, one transaction
at a time, so the number found there is this transaction's exactly when it committed. A
transaction that appended events (a record) needs no such write: ``rows_found`` looks for the
rows themselves, by sequence, session and recording time.

Pure of the store's state: it takes a function that gives a fresh connection.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ..errors import StorageError

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
OUTCOMES = (COMMITTED, ABORTED, UNKNOWN)

# How long a resolution may wait for a server to answer (a failover takes about a second).
RESOLVE_SECONDS = 15.0
PAUSE_SECONDS = 0.05

# Read just before COMMIT: the transaction's id, or NULL when it wrote nothing.
TXID_SQL = "SELECT pg_current_xact_id_if_assigned()::text"

# The answering server's current timeline and run (its postmaster's start time), read once per
# connection (NULL on a standby). A restart on the same timeline counts as another: after an
# immediate restart the server may issue again an id whose records never reached its log (a
# restart trial under load saw an acknowledged event lost when a `committed` answer came from
# such a reissued id).
TIMELINE_SQL = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN NULL"
    " ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) || '@' || pg_postmaster_start_time()::text END"
)

STATUS_SQL = "SELECT pg_xact_status(%s::xid8), " + TIMELINE_SQL[len("SELECT "):]

# R29's commit witness: one row per open store (``owner``, a random name), holding the number
# of its latest witnessed transaction. Backend bookkeeping like the schema stamp, so not one of
# the SQLModel tables; created by every open (``postgres_schema.prepare``).
WITNESS_TABLE = "sessionstate_commit_witness"
WITNESS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {WITNESS_TABLE}"
    " (owner text PRIMARY KEY, witnessed bigint NOT NULL, written_at timestamptz NOT NULL DEFAULT now(),"
    " sequence bigint)"
)
# A lone record's witness also holds the sequence it appended (``postgres_record``): a table
# an older release created gains the column.
WITNESS_SEQUENCE_DDL = f"ALTER TABLE {WITNESS_TABLE} ADD COLUMN IF NOT EXISTS sequence bigint"
# A witness is read within seconds of its write; rows a day old belong to stores long gone.
WITNESS_PRUNE_SQL = f"DELETE FROM {WITNESS_TABLE} WHERE written_at < now() - interval '1 day'"
WITNESS_READ_SQL = f"SELECT witnessed FROM {WITNESS_TABLE} WHERE owner = %s"

# A record's witness: how many of the rows it appended (sequence, session, recording time) the
# answering server holds. The three together: a promoted server may reissue a sequence.
ROWS_FOUND_SQL = (
    "SELECT count(*) FROM session_state_events e"
    " JOIN unnest(%s::bigint[], %s::text[], %s::float8[]) AS w(sequence, session_key, recorded_at)"
    " ON e.sequence = w.sequence AND e.session_key = w.session_key AND e.recorded_at = w.recorded_at"
)

AppendedRow = tuple[int, str, float]
"""An event row a transaction appended: its sequence, session key and recording time."""

_IN_THE_FUTURE = "22023"  # invalid_parameter_value: "transaction ID ... is in the future"


def classify(status: str | None, began_on: str | None, answered_on: str | None) -> str | None:
    """The outcome ``pg_xact_status``'s answer gives, or ``None`` to ask again."""
    same_timeline = began_on is not None and began_on == answered_on
    if status == "committed":
        return COMMITTED if same_timeline else UNKNOWN
    if status == "aborted":
        return ABORTED
    if status == "in progress":
        return None if same_timeline else ABORTED
    return UNKNOWN


def resolve(
    connect: Callable[[], "psycopg.Connection[Any]"],
    txid: str,
    began_on: str | None,
    *,
    seconds: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """``COMMITTED``, ``ABORTED`` or ``UNKNOWN`` for the transaction ``txid`` begun on the
    timeline ``began_on``; ``connect`` gives a connection to a read-write server (or raises)."""
    deadline = clock() + (RESOLVE_SECONDS if seconds is None else seconds)
    while True:
        try:
            row = connect().execute(STATUS_SQL, (txid,)).fetchone()
        except (psycopg.Error, StorageError) as exc:
            if getattr(exc, "sqlstate", None) == _IN_THE_FUTURE:
                return ABORTED  # the answering server never issued this id: not there
            row = ()
        if row:
            outcome = classify(row[0], began_on, row[1])
            if outcome is not None:
                return outcome
        if clock() >= deadline:
            return UNKNOWN
        sleep(PAUSE_SECONDS)


class CommitWitness:
    """One store's commit witness (R29): its owner name, the number of its latest witnessed
    transaction, and whether the open transaction asked for one (``wanted``)."""

    def __init__(self) -> None:
        self.owner = uuid.uuid4().hex
        self.number = 0
        self.wanted = False

    def statement(self, txid: str | None) -> str:
        """What the commit sends before its ``COMMIT`` ('' unless wanted by a transaction that
        wrote something); numbers the transaction."""
        if not self.wanted or txid is None:
            return ""
        self.number += 1
        return witness_statement(self.owner, self.number) + "; "

    def read(self, connect: Callable[[], "psycopg.Connection[Any]"]) -> str:
        """The outcome of the transaction numbered last (``witnessed``)."""
        return witnessed(connect, self.owner, self.number)


def witness_statement(owner: str, number: int) -> str:
    """The statement a witnessed transaction sends with its ``COMMIT`` (in the same simple
    query, so no round trip is added). ``owner`` is the store's own hex name, never input."""
    if not owner.isalnum():
        raise ValueError(f"a witness owner is a plain name, not {owner!r}")
    return (
        f"INSERT INTO {WITNESS_TABLE} (owner, witnessed) VALUES ('{owner}', {int(number)})"
        " ON CONFLICT (owner) DO UPDATE SET witnessed = excluded.witnessed, written_at = now()"
    )


def witnessed(connect: Callable[[], "psycopg.Connection[Any]"], owner: str, number: int) -> str:
    """``COMMITTED`` when the owner's row holds ``number``, ``ABORTED`` when it holds an older
    one or there is no row, ``UNKNOWN`` when no server answers (one attempt: the resolution
    before it already waited for a server)."""
    try:
        row = connect().execute(WITNESS_READ_SQL, (owner,)).fetchone()
    except (psycopg.Error, StorageError):
        return UNKNOWN
    return COMMITTED if row is not None and int(row[0]) == number else ABORTED


def rows_found(connect: Callable[[], "psycopg.Connection[Any]"], rows: Sequence[AppendedRow]) -> str:
    """``COMMITTED`` when the answering server holds every one of ``rows`` (the event rows a
    transaction appended), ``ABORTED`` when it holds none, ``UNKNOWN`` when it holds some
    (not one transaction's doing) or no server answers (one attempt, as ``witnessed``)."""
    if not rows:
        return UNKNOWN  # nothing to look for
    sequences, sessions, times = (list(column) for column in zip(*rows))
    try:
        row = connect().execute(ROWS_FOUND_SQL, (sequences, sessions, times)).fetchone()
    except (psycopg.Error, StorageError):
        return UNKNOWN
    assert row is not None  # count(*) always answers
    found = int(row[0])
    return COMMITTED if found == len(rows) else ABORTED if found == 0 else UNKNOWN


def settle(
    connect: Callable[[], "psycopg.Connection[Any]"],
    txid: str | None,
    began_on: str | None,
    witness: CommitWitness | None,
    appended: Sequence[AppendedRow],
) -> str:
    """The outcome of a commit whose answer was lost: its id's status (``resolve``); when that
    is only unknown, the transaction's witness (``witness``: it wrote one) or else its own
    appended rows decide."""
    outcome = COMMITTED if txid is None else resolve(connect, txid, began_on)
    if outcome != UNKNOWN:
        return outcome
    if witness is not None:
        return witness.read(connect)
    return rows_found(connect, appended)

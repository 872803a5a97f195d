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

Pure of the store's state: it takes a function that gives a fresh connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from ..errors import StorageError

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"

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

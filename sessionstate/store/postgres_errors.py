"""What a psycopg error means for the store: each leaves as the ``StorageError`` subclass that
says what happened (a conflict to retry, a refused login, a full disk, a lost connection, a
commit whose outcome is unknown), with the driver's error as the cause."""

from __future__ import annotations

import re

import psycopg
from psycopg import errors as pg_errors

from ..errors import CommitOutcomeUnknown, StorageConflict, StorageError, StorageFull, StorageUnavailable

__all__ = ["translate"]

# SQLSTATE classes and codes: 08 connection exception, 28 invalid authorization,
# 57P01-57P03 server shutting down or starting, 40001 serialization failure, 40P01 deadlock,
# 25006 a write in a read-only transaction (a standby, or default_transaction_read_only).
_UNAVAILABLE_STATES = ("57P01", "57P02", "57P03")
_READ_ONLY = "25006"
_LOGIN_REFUSED = re.compile(r"authentication failed|role \".*\" does not exist|no pg_hba\.conf entry")


def translate(exc: BaseException, *, committing: bool = False) -> StorageError:
    """A driver error as the ``StorageError`` that says what happened."""
    state = getattr(exc, "sqlstate", None) or ""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)):
        return StorageConflict(f"PostgreSQL: concurrent transaction conflict ({detail})", retry_safe=True)
    # A login refused at connect time carries no SQLSTATE in psycopg: the server's FATAL says it.
    if state.startswith("28") or _LOGIN_REFUSED.search(str(exc)):
        return StorageUnavailable(f"PostgreSQL refused the login: {detail}")
    if state.startswith("53"):  # insufficient resources: disk full, out of memory, too many connections
        return StorageFull(f"PostgreSQL: storage full or out of resources: {detail}") if state == "53100" \
            else StorageUnavailable(f"PostgreSQL: out of resources: {detail}", retry_safe=True)
    if state == _READ_ONLY:  # as SQLite's SQLITE_READONLY: the database cannot be written
        return StorageUnavailable(f"PostgreSQL: the database is read-only: {detail}")
    # A client-side connection failure has no SQLSTATE; the server's says 08 or 57P0x.
    lost = (state.startswith("08") or state in _UNAVAILABLE_STATES
            or (isinstance(exc, psycopg.OperationalError) and not state))
    if lost:
        # A transaction whose connection broke before COMMIT was rolled back by the server;
        # one that broke during COMMIT may or may not have committed.
        if committing:
            return CommitOutcomeUnknown(
                f"PostgreSQL connection lost during commit; the outcome is unknown ({detail})"
            )
        return StorageUnavailable(f"PostgreSQL unavailable: {detail}", retry_safe=True)
    return StorageError(f"PostgreSQL error: {detail}")

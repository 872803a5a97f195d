"""``postgres_errors.translate``: each psycopg failure leaves as the ``StorageError`` subclass
that says what happened, with the driver's first line in the message (pure: no server)."""

from __future__ import annotations

import psycopg
import pytest

from sessionstate.errors import CommitOutcomeUnknown, StorageConflict, StorageError, StorageFull, StorageUnavailable
from sessionstate.store.postgres_errors import translate


def _server_error(sqlstate: str, text: str) -> psycopg.Error:
    error: psycopg.Error = psycopg.errors.lookup(sqlstate)(text)
    assert error.sqlstate == sqlstate
    return error


@pytest.mark.parametrize("sqlstate, text, kind, message, retry_safe", [
    ("40001", "could not serialize access\nDETAIL: more", StorageConflict,
     "PostgreSQL: concurrent transaction conflict (could not serialize access)", True),
    ("40P01", "deadlock detected", StorageConflict, "PostgreSQL: concurrent transaction conflict (deadlock detected)", True),
    ("28000", "not allowed in", StorageUnavailable, "PostgreSQL refused the login: not allowed in", False),
    ("53100", "could not extend file", StorageFull, "PostgreSQL: storage full or out of resources: could not extend file", False),
    ("53300", "too many clients", StorageUnavailable, "PostgreSQL: out of resources: too many clients", True),
    ("08006", "server closed the connection", StorageUnavailable, "PostgreSQL unavailable: server closed the connection", True),
    ("57P01", "terminating connection", StorageUnavailable, "PostgreSQL unavailable: terminating connection", True),
    ("25006", "cannot execute UPDATE in a read-only transaction", StorageUnavailable,
     "PostgreSQL: the database is read-only: cannot execute UPDATE in a read-only transaction", False),
    ("23505", "duplicate key value", StorageError, "PostgreSQL error: duplicate key value", False),
])
def test_a_server_error_says_what_happened(sqlstate, text, kind, message, retry_safe):
    error = translate(_server_error(sqlstate, text))
    assert type(error) is kind
    assert error.message == message
    assert error.retry_safe is retry_safe


def test_a_login_refused_at_connect_time_is_known_by_its_text():
    # psycopg gives no SQLSTATE before the session starts: the server's FATAL line says it.
    error = translate(psycopg.OperationalError('FATAL:  password authentication failed for user "x"'))
    assert type(error) is StorageUnavailable
    assert error.message.startswith("PostgreSQL refused the login: ") and not error.retry_safe


def test_a_connection_lost_without_a_state_is_unavailable_or_unknown_while_committing():
    lost = psycopg.OperationalError("connection to server was lost")
    before = translate(lost)
    assert type(before) is StorageUnavailable and before.retry_safe
    assert before.message == "PostgreSQL unavailable: connection to server was lost"
    during = translate(lost, committing=True)
    assert type(during) is CommitOutcomeUnknown
    assert during.message == "PostgreSQL connection lost during commit; the outcome is unknown (connection to server was lost)"
    # Committing changes nothing for an error that is not a lost connection.
    assert type(translate(_server_error("23505", "duplicate key value"), committing=True)) is StorageError


def test_a_client_error_without_a_state_is_not_a_lost_connection():
    error = translate(psycopg.ProgrammingError("the query has 1 placeholder but 2 parameters were passed"))
    assert type(error) is StorageError and not error.retry_safe


def test_an_error_without_text_is_named_by_its_type():
    assert translate(psycopg.OperationalError("")).message == "PostgreSQL unavailable: OperationalError"

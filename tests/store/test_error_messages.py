"""What ``storage_error`` says: the error class and a message that names the database and the
cause (``store/failures.py``), one test per kind of failure the store translates."""

from __future__ import annotations

import errno
import sqlite3

from sqlalchemy.exc import OperationalError as SqlAlchemyOperationalError

from sessionstate import StorageError, StorageUnavailable
from sessionstate.store.failures import storage_error

WHERE = "/data/state.db"


def _constraint_error() -> sqlite3.IntegrityError:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a PRIMARY KEY)")
    db.execute("INSERT INTO t VALUES (1)")
    try:
        db.execute("INSERT INTO t VALUES (1)")
    except sqlite3.IntegrityError as exc:
        return exc
    finally:
        db.close()
    raise AssertionError("the duplicate key was accepted")


def test_an_sqlite_error_names_the_database_the_text_and_sqlites_error_name():
    error = storage_error(_constraint_error(), WHERE)
    # An integrity error is the caller's data, not an unavailable store: the base class.
    assert type(error) is StorageError
    assert error.message == f"{WHERE}: UNIQUE constraint failed: t.a (SQLITE_CONSTRAINT_PRIMARYKEY)"


def test_an_sqlite_error_without_a_code_keeps_its_own_text():
    # The driver's own errors (a closed connection) carry no SQLite code or name.
    db = sqlite3.connect(":memory:")
    db.close()
    try:
        db.execute("SELECT 1")
    except sqlite3.ProgrammingError as exc:
        error = storage_error(exc, WHERE)
    assert type(error) is StorageUnavailable
    assert error.message == f"{WHERE}: Cannot operate on a closed database."


def test_a_file_system_error_names_its_file_when_that_is_not_the_database():
    other = OSError(errno.EACCES, "Permission denied", "/data/state.db-wal")
    error = storage_error(other, WHERE)
    assert type(error) is StorageUnavailable
    assert error.message == f"{WHERE}: Permission denied: /data/state.db-wal"
    same = storage_error(OSError(errno.ENOENT, "No such file or directory", WHERE), WHERE)
    assert same.message == f"{WHERE}: No such file or directory"
    # Without a strerror the exception's own text stands in.
    bare = storage_error(OSError("disk went away"), WHERE)
    assert bare.message == f"{WHERE}: disk went away"


def test_any_other_driver_error_is_unavailable_with_its_type_and_text():
    error = storage_error(SqlAlchemyOperationalError("SELECT 1", {}, Exception("gone")), WHERE)
    assert type(error) is StorageUnavailable
    assert error.message.startswith(f"{WHERE}: OperationalError: ") and "gone" in error.message


def test_a_storage_error_is_passed_through_unchanged():
    original = StorageUnavailable("elsewhere: already translated")
    assert storage_error(original, WHERE) is original

"""Migration 6: a version-5 SQLite file, whose change log (spec R22) took its stamps from
AUTOINCREMENT, ends up with the schema a new file has, every change row kept with its stamp,
later stamps following the newest, and no ``sqlite_sequence`` row for the log; on PostgreSQL
the step changes nothing but the stamp."""

from __future__ import annotations

import logging

from sessionstate import Gateway
from sessionstate.store import schema
from tests.store.second_connection import run_beside
from tests.store.test_integer_widening_migration import shape, stamp

# The change log as release 5 created it on SQLite.
VERSION_5_CHANGE_LOG = (
    "CREATE TABLE session_cursor_changes (\n\tstamp INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, \n"
    "\twatcher_session_key VARCHAR NOT NULL, \n\trecorded_at FLOAT NOT NULL\n)"
)
ROWS = [(3, "agent:a:w", 1.0), (4, "agent:a:x", 2.0), (9, "agent:a:w", 3.0)]


def make_version_5(url: str) -> None:
    Gateway.open(url).close()
    if not url.startswith("sqlite"):
        run_beside(url, "UPDATE sessionstate_schema SET version = 5")
        return
    run_beside(url, "DROP TABLE session_cursor_changes", VERSION_5_CHANGE_LOG,
               *(f"INSERT INTO session_cursor_changes VALUES ({s}, '{w}', {t})" for s, w, t in ROWS),
               "PRAGMA user_version = 5")


def test_a_version_5_database_gets_the_schema_a_new_one_has_and_keeps_its_change_rows(db_url, tmp_path, caplog):
    new = f"sqlite:///{tmp_path / 'new.db'}" if db_url.startswith("sqlite") else None
    if new is not None:
        Gateway.open(new).close()
    make_version_5(db_url)
    before = shape(db_url)
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        Gateway.open(db_url).close()
    assert stamp(db_url) == schema.SCHEMA_VERSION
    assert any("5 -> 6: change-log stamps" in r.getMessage() for r in caplog.records)
    if new is None:  # PostgreSQL: nothing but the version
        assert shape(db_url) == before
        return
    assert before != shape(db_url) == shape(new)
    assert run_beside(db_url, "SELECT * FROM session_cursor_changes ORDER BY stamp") == ROWS
    assert run_beside(db_url, "SELECT count(*) FROM sqlite_sequence WHERE name LIKE 'session_cursor_changes%'") == [(0,)]
    # the next stamp follows the newest row, as the pumps' watermarks need
    assert run_beside(db_url, "INSERT INTO session_cursor_changes (watcher_session_key, recorded_at)"
                              " VALUES ('agent:a:y', 4.0) RETURNING stamp") == [(10,)]


def test_a_current_file_is_left_as_it_is(tmp_path):
    url = f"sqlite:///{tmp_path / 'current.db'}"
    Gateway.open(url).close()
    before = shape(url)
    Gateway.open(url).close()
    assert shape(url) == before and stamp(url) == schema.SCHEMA_VERSION

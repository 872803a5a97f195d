"""``Dialect``: each backend's parameter style and planner hints, applied in one place."""

from __future__ import annotations

from sessionstate.store.dialect import POSTGRES, SQLITE

STATEMENT = "SELECT summary FROM session_state_events WHERE summary LIKE '100%' AND session_key = ?"


def test_sqlite_takes_the_statement_as_written():
    assert SQLITE.sql(STATEMENT) == STATEMENT


def test_postgres_gets_its_placeholder_and_a_literal_percent_doubled():
    # psycopg reads "%" as the start of a placeholder: a literal one must be doubled.
    assert POSTGRES.sql(STATEMENT) == (
        "SELECT summary FROM session_state_events WHERE summary LIKE '100%%' AND session_key = %s"
    )


def test_only_sqlite_gets_planner_hints():
    assert SQLITE.indexed_by("ix_events_recorded_at") == " INDEXED BY ix_events_recorded_at"
    assert SQLITE.not_indexed() == " NOT INDEXED"
    assert POSTGRES.indexed_by("ix_events_recorded_at") == ""
    assert POSTGRES.not_indexed() == ""

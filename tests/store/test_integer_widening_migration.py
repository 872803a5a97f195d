"""Migration 5: a version-4 database, whose id, token and counter columns are 32-bit INTEGER on
PostgreSQL, ends up with the schema a new database has, its rows kept, and every widened column
takes 2**62; on SQLite, where those columns already hold 64 bits, the step changes nothing but
the stamp. A failing later step leaves the PostgreSQL columns as they were."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from sessionstate import Gateway, StorageError
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, migrations, open_store, schema
from sessionstate.store.migrations import WIDENED_IN_VERSION_5, Migration
from sessionstate.store.records import RUNNING, RunRecord
from tests.backends import Backend
from tests.store.second_connection import run_beside

MAIN = "agent:main:main"
CHILD = "agent:main:subagent:c"
TOKENS = 7
BEYOND_32_BITS = 2**62


def fill(url: str) -> None:
    """A row in every table with a widened column that ``make_version_4`` has none in yet."""
    store = open_store(url, notifying_kinds=NOTIFYING_KINDS)
    try:
        with store.transaction():
            store.insert_session(SessionRecord(CHILD, "main", "subagent", MAIN, "main", None, 1.0, 1.0))
            store.transcripts.append(MAIN, "main", "assistant", "kept", actor_type="agent", actor_id=None,
                                     provenance=None, tool_calls=None, tool_result=None,
                                     input_tokens=TOKENS, output_tokens=TOKENS, created_at=1.0)
            store.runs.insert(RunRecord("r1", MAIN, "main", CHILD, "main", "subagent", "task", None, None, None,
                                        False, "isolated", None, RUNNING, None, None, None, None, 0, 1.0, None))
            store.serving.claim(MAIN, "server-1", 1.0)
        store.links.replace(MAIN, "main", provider="p", host="h", thread_id="t", marker=None, primed=True, now=1.0)
    finally:
        store.close()
    # Only SQLite's store writes the change log; the row is for the widening's sake.
    run_beside(url, "INSERT INTO session_cursor_changes (watcher_session_key, recorded_at) VALUES ('w', 1.0)")


def make_version_4(url: str) -> None:
    """A database as release 4 left it: on PostgreSQL the widened columns (and their id
    sequences) 32-bit, stamped 4; on SQLite the same file stamped 4."""
    with Gateway.open(url) as gw:
        gw.create_session(MAIN)
        gw.transcripts.append_message(MAIN, "assistant", "usage", input_tokens=TOKENS, output_tokens=TOKENS)
    fill(url)
    if url.startswith("sqlite"):
        run_beside(url, "PRAGMA user_version = 4")
        return
    narrowing = []
    for table, columns in WIDENED_IN_VERSION_5.items():
        narrowing.append(f"ALTER TABLE {table} " + ", ".join(f"ALTER COLUMN {c} TYPE integer" for c in columns))
        narrowing += [f"ALTER SEQUENCE IF EXISTS {table}_{c}_seq AS integer" for c in columns]
    run_beside(url, *narrowing, "UPDATE sessionstate_schema SET version = 4")


def shape(url: str) -> list[tuple[Any, ...]]:
    """The schema as the database describes it: SQLite's DDL text, PostgreSQL's column types,
    nullability and defaults and its sequences' types."""
    if url.startswith("sqlite"):
        return run_beside(url, "SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
    columns = run_beside(url, (
        "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, column_name"
    ))
    sequences = run_beside(url, (
        "SELECT sequencename, data_type::text, max_value FROM pg_sequences"
        " WHERE schemaname = current_schema() ORDER BY sequencename"
    ))
    return columns + sequences


def stamp(url: str) -> int:
    if url.startswith("sqlite"):
        return run_beside(url, "PRAGMA user_version")[0][0]
    return run_beside(url, "SELECT version FROM sessionstate_schema")[0][0]


@pytest.fixture
def new_database_shape(backend: Backend) -> Iterator[list[tuple[Any, ...]]]:
    with backend.database() as url:
        Gateway.open(url).close()
        yield shape(url)


def test_a_version_4_database_gets_the_schema_a_new_one_has_and_keeps_its_rows(db_url, new_database_shape, caplog):
    make_version_4(db_url)
    if db_url.startswith("sqlite"):
        before = shape(db_url)
    else:
        assert shape(db_url) != new_database_shape, "the version-4 database is narrower"
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(db_url) as gw:
            assert [(m.text, m.input_tokens, m.output_tokens) for m in gw.transcripts.transcript(MAIN)] == [
                ("usage", TOKENS, TOKENS), ("kept", TOKENS, TOKENS)]
            meta = gw.registry.session_meta(MAIN)
            assert (meta.input_tokens, meta.output_tokens) == (TOKENS, TOKENS)
    assert any("4 -> 5: 64-bit ids" in r.getMessage() for r in caplog.records)
    assert stamp(db_url) == schema.SCHEMA_VERSION
    assert shape(db_url) == new_database_shape
    if db_url.startswith("sqlite"):
        assert shape(db_url) == before  # nothing on SQLite but the stamp


def test_every_widened_column_takes_2_to_the_62_after_the_migration(db_url):
    make_version_4(db_url)
    Gateway.open(db_url).close()
    for table, columns in WIDENED_IN_VERSION_5.items():
        read = f"SELECT {', '.join(columns)} FROM {table} ORDER BY {columns[0]}"
        before = run_beside(db_url, read)
        # added rather than set: an id stays unique over the table's rows
        raised = run_beside(db_url, f"UPDATE {table} SET " + ", ".join(f"{c} = {c} + {BEYOND_32_BITS}" for c in columns), read)
        assert before and raised == [tuple(v + BEYOND_32_BITS for v in row) for row in before], table
    if not db_url.startswith("sqlite"):  # the id sequences hand out such ids too
        for table, column in (("session_messages", "id"), ("upstream_links", "generation"),
                              ("session_cursor_changes", "stamp")):
            assert run_beside(db_url, f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), {BEYOND_32_BITS})",
                              f"SELECT nextval(pg_get_serial_sequence('{table}', '{column}'))") == [(BEYOND_32_BITS + 1,)]


def test_a_failing_later_step_leaves_the_postgresql_columns_32_bit(pg_url, monkeypatch):
    make_version_4(pg_url)
    before = shape(pg_url)

    seen_by_the_failing_step = []

    def bad(db: Any) -> None:
        seen_by_the_failing_step.append(db.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = 'session_messages' AND column_name = 'input_tokens'"
        ).fetchone()[0])
        db.execute("ALTER TABLE no_such_table ADD COLUMN y integer")

    failing = len(migrations.MIGRATIONS) + 2  # the step after the last
    monkeypatch.setattr(schema, "SCHEMA_VERSION", failing)
    monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, Migration(failing, "bad", bad)))
    with pytest.raises(StorageError, match="no_such_table"):
        Gateway.open(pg_url)
    assert seen_by_the_failing_step == ["bigint"]  # step 5 had run
    assert shape(pg_url) == before  # and was rolled back with the open
    assert stamp(pg_url) == 4

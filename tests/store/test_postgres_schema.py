"""PostgreSQL's schema version: the stamp, the refusal of a newer one, the migrations of an older
one and of a database created before the stamp, each against the real server; every refusal
leaves the database as it was and names every table of another shape with all its differences.
An empty stamp table is no stamp; an empty database opened without ``create`` is refused; each
migration is logged; a delete trigger missing from an older database is made again."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from sqlmodel import SQLModel

from sessionstate import Gateway, SchemaMismatch, SchemaVersionError, StorageError
from sessionstate.errors import StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import migrations, open_store, schema
from sessionstate.store.migrations import Migration
from sessionstate.store.postgres import postgres_url
from sessionstate.store.postgres_schema import SESSION_CHILD_TABLES, UNSTAMPED_VERSION, VERSION_TABLE

MAIN = "agent:main:main"
PUMP_INDEX = "ix_cursors_pending_notified"


@contextmanager
def raw(url: str) -> Iterator[Any]:
    """A second connection to the test schema, in one transaction committed at the end."""
    engine = create_engine(postgres_url(url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def make_database(url: str) -> None:
    with Gateway.open(url) as gw:
        gw.create_session(MAIN)
        gw.record_event(MAIN, "goal_changed", actor_type="human", summary="kept")


def altered_database(url: str, *statements: str) -> tuple[list[tuple[Any, ...]], ...]:
    """A database made by this release, then changed by ``statements`` from outside; returns
    its ``snapshot`` before anything else touches it."""
    make_database(url)
    with raw(url) as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    return snapshot(url)


def stamp(url: str) -> int | None:
    with raw(url) as conn:
        if conn.exec_driver_sql(f"SELECT to_regclass('{VERSION_TABLE}')").scalar() is None:
            return None
        return conn.exec_driver_sql(f"SELECT version FROM {VERSION_TABLE}").scalar()


def set_stamp(url: str, version: int) -> None:
    with raw(url) as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version = {version}")


def snapshot(url: str) -> tuple[list[tuple[Any, ...]], ...]:
    """Every relation of the schema (tables, indexes, sequences), the stamp and the data."""
    with raw(url) as conn:
        relations = conn.exec_driver_sql(
            "SELECT relname, relkind FROM pg_class WHERE relnamespace = current_schema()::regnamespace ORDER BY relname"
        ).all()
        # this schema's triggers only: other tests (another worker) create theirs meanwhile
        triggers = conn.exec_driver_sql(
            "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal"
            " AND c.relnamespace = current_schema()::regnamespace ORDER BY t.tgname"
        ).all()
        stamps = conn.exec_driver_sql(f"SELECT * FROM {VERSION_TABLE}").all() \
            if conn.exec_driver_sql(f"SELECT to_regclass('{VERSION_TABLE}')").scalar() else []
        events = conn.exec_driver_sql("SELECT * FROM session_state_events ORDER BY sequence").all()
        heads = conn.exec_driver_sql("SELECT * FROM session_state_heads ORDER BY session_key").all()
    return relations, triggers, stamps, events, heads


def migrated(caplog: pytest.LogCaptureFixture) -> list[Migration]:
    """The steps the log says ran, in order (each logged as ``<where>: migrating ... : <summary>``)."""
    lines = [r.getMessage().split(": ", 1)[1] for r in caplog.records if ": migrating schema version " in r.getMessage()]
    by_line = {f"migrating schema version {m.version - 1} -> {m.version}: {m.summary}": m for m in migrations.MIGRATIONS}
    assert set(lines) <= set(by_line), lines
    return [by_line[line] for line in lines]


def has_index(url: str, name: str) -> bool:
    with raw(url) as conn:
        return conn.exec_driver_sql(f"SELECT to_regclass('{name}')").scalar() is not None


def test_a_new_database_is_stamped_with_this_releases_version(pg_url):
    make_database(pg_url)
    assert stamp(pg_url) == schema.SCHEMA_VERSION
    with raw(pg_url) as conn:  # one row, and a second one is refused
        with pytest.raises(Exception):
            with conn.begin_nested():
                conn.exec_driver_sql(f"INSERT INTO {VERSION_TABLE} (one, version) VALUES (false, 1)")
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {VERSION_TABLE}").scalar() == 1


def test_a_newer_version_is_refused_and_the_database_is_unchanged(pg_url):
    make_database(pg_url)
    with raw(pg_url) as conn:  # a table this release would otherwise create
        conn.exec_driver_sql("DROP TABLE session_meta CASCADE")
    set_stamp(pg_url, schema.SCHEMA_VERSION + 1)
    before = snapshot(pg_url)
    assert before[0] and before[1], "the snapshot holds this schema's relations and triggers"
    with pytest.raises(SchemaVersionError, match="newer sessionstate") as refused:
        Gateway.open(pg_url)
    assert (refused.value.file_version, refused.value.supported_version) == (
        schema.SCHEMA_VERSION + 1, schema.SCHEMA_VERSION)
    assert refused.value.code == "unsupported_schema_version"
    assert snapshot(pg_url) == before


def test_a_database_created_before_the_stamp_is_adopted_as_version_3(pg_url, caplog):
    make_database(pg_url)
    with raw(pg_url) as conn:
        conn.exec_driver_sql(f"DROP TABLE {VERSION_TABLE}")
    assert stamp(pg_url) is None and UNSTAMPED_VERSION == 3
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(pg_url) as gw:
            assert gw.session_status(MAIN)["stateVersion"] == 2  # data kept: its `created` (R27), the goal
    assert stamp(pg_url) == schema.SCHEMA_VERSION
    # Only the steps after version 3 run (none while 3 is the current version).
    assert migrated(caplog) == [m for m in migrations.MIGRATIONS if m.version > UNSTAMPED_VERSION]


def test_an_older_stamp_runs_the_numbered_migrations_in_order(pg_url, caplog):
    make_database(pg_url)
    set_stamp(pg_url, 1)
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(pg_url) as gw:
            assert gw.session_status(MAIN)["stateVersion"] == 2  # its `created` (R27), the goal
    assert migrated(caplog) == list(migrations.MIGRATIONS)
    assert stamp(pg_url) == schema.SCHEMA_VERSION
    assert not has_index(pg_url, PUMP_INDEX)  # version 2 added it, version 3 dropped it


def test_migration_3_drops_the_index_a_version_2_database_has(pg_url):
    make_database(pg_url)
    set_stamp(pg_url, 2)
    with raw(pg_url) as conn:
        conn.exec_driver_sql(
            f"CREATE INDEX {PUMP_INDEX} ON session_watch_cursors (notified_sequence)"
            " WHERE notified_sequence > last_seen_sequence"
        )
    Gateway.open(pg_url).close()
    assert not has_index(pg_url, PUMP_INDEX)
    assert stamp(pg_url) == schema.SCHEMA_VERSION


def test_a_failing_migration_changes_nothing(pg_url, monkeypatch):
    make_database(pg_url)
    set_stamp(pg_url, 1)
    before = snapshot(pg_url)

    def good(db: Any) -> None:
        db.execute("CREATE TABLE probe (x integer)")

    def bad(db: Any) -> None:
        db.execute("ALTER TABLE no_such_table ADD COLUMN y integer")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(migrations, "MIGRATIONS", (Migration(2, "good", good), Migration(3, "bad", bad)))
    with pytest.raises(StorageError, match="no_such_table"):
        Gateway.open(pg_url)
    assert snapshot(pg_url) == before  # no probe table, stamp still 1


def test_tables_with_our_names_and_other_columns_are_refused_and_left_alone(pg_url):
    before = altered_database(pg_url, "ALTER TABLE session_meta ADD COLUMN surprise text", "DROP TABLE agent_runs CASCADE")
    with pytest.raises(SchemaMismatch, match=r"session_meta \(missing columns: none; unexpected columns: surprise\)"):
        Gateway.open(pg_url)
    assert snapshot(pg_url) == before  # agent_runs not created either


def test_a_stamp_no_release_wrote_is_refused(pg_url):
    make_database(pg_url)
    set_stamp(pg_url, 0)
    before = snapshot(pg_url)
    with pytest.raises(SchemaMismatch, match="version 0"):
        Gateway.open(pg_url)
    assert snapshot(pg_url) == before


def test_processes_opening_a_new_database_at_once_stamp_it_once(pg_url):
    errors: list[BaseException] = []

    def open_once() -> None:
        try:
            Gateway.open(pg_url).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_once) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with raw(pg_url) as conn:
        assert conn.exec_driver_sql(f"SELECT * FROM {VERSION_TABLE}").all() == [(True, schema.SCHEMA_VERSION)]


def test_a_refusal_names_every_table_of_another_shape_with_all_its_differences(pg_url):
    before = altered_database(pg_url, "ALTER TABLE session_meta DROP COLUMN last_to, DROP COLUMN channel",
                              "ALTER TABLE upstream_links ADD COLUMN surprise text, ADD COLUMN extra integer")
    differences = {
        "session_meta": "missing columns: channel, last_to; unexpected columns: none",
        "upstream_links": "missing columns: none; unexpected columns: extra, surprise",
    }
    # The tables are named in the order the declarations sort them (dependencies first).
    named = "; ".join(f"{t.name} ({differences[t.name]})" for t in SQLModel.metadata.sorted_tables
                      if t.name in differences)
    with pytest.raises(SchemaMismatch) as refused:
        Gateway.open(pg_url)
    where = make_url(pg_url).render_as_string(hide_password=True)
    assert str(refused.value) == (
        f"{where}: not a sessionstate database of a known shape; these tables have other columns: {named}."
        " Nothing was changed."
    )
    assert snapshot(pg_url) == before


def test_an_empty_stamp_table_is_no_stamp_and_a_new_database_is_created_and_stamped(pg_url):
    with raw(pg_url) as conn:  # left by an opening that never stamped, or emptied by hand
        conn.exec_driver_sql(f"CREATE TABLE {VERSION_TABLE} (one boolean PRIMARY KEY DEFAULT true"
                             " CHECK (one), version integer NOT NULL)")
    make_database(pg_url)
    assert stamp(pg_url) == schema.SCHEMA_VERSION


def test_opening_an_empty_database_without_create_says_so_and_creates_nothing(pg_url):
    with pytest.raises(StorageUnavailable) as refused:
        open_store(pg_url, notifying_kinds=NOTIFYING_KINDS, create=False)
    where = make_url(pg_url).render_as_string(hide_password=True)
    assert str(refused.value) == f"{where}: no sessionstate tables there (nothing was created)"
    with raw(pg_url) as conn:
        assert conn.exec_driver_sql(
            "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        ).scalar() == 0


def test_each_migration_is_logged_naming_the_database_and_the_step(pg_url, caplog):
    make_database(pg_url)
    set_stamp(pg_url, schema.SCHEMA_VERSION - 1)
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        Gateway.open(pg_url).close()
    last = migrations.MIGRATIONS[-1]
    where = make_url(pg_url).render_as_string(hide_password=True)
    assert [r.getMessage() for r in caplog.records if " migrating " in r.getMessage()] == [
        f"{where}: migrating schema version {last.version - 1} -> {last.version}: {last.summary}"
    ]


def session_delete_triggers(url: str) -> set[str]:
    with raw(url) as conn:
        return {row[0] for row in conn.exec_driver_sql(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'sessions'::regclass AND NOT tgisinternal"
        )}


@pytest.mark.parametrize("missing", [table for table, _, _ in SESSION_CHILD_TABLES[1:]])
def test_opening_recreates_a_delete_trigger_missing_after_one_that_is_present(pg_url, missing):
    make_database(pg_url)
    trigger = f"trg_{missing}_session_deleted"
    with raw(pg_url) as conn:
        conn.exec_driver_sql(f"DROP TRIGGER {trigger} ON sessions")
    Gateway.open(pg_url).close()
    assert session_delete_triggers(pg_url) == {f"trg_{table}_session_deleted" for table, _, _ in SESSION_CHILD_TABLES}

"""What opening a PostgreSQL database does to its schema: check, migrate, create, stamp.

The PostgreSQL counterpart of ``bootstrap`` (SQLite). The schema version lives in a one-row
table, ``sessionstate_schema`` (PostgreSQL has no ``user_version``); it is backend bookkeeping
like SQLite's pragma, so it is not one of the SQLModel tables. Everything below runs in one
transaction holding the advisory lock every opening process takes, so two processes opening a
new or an older database at once neither collide nor migrate twice:

1. Read the stamp. Above this release's ``schema.SCHEMA_VERSION``: refuse with
   ``SchemaVersionError``; the transaction rolls back and nothing was written.
2. Unstamped: a new database (created at the current version), or one whose tables a release
   before the stamp created. Every such release declared the version-3 tables
   (``UNSTAMPED_VERSION``), so it is taken as version 3.
3. Run the numbered migrations the database lacks (``migrations.MIGRATIONS``, the same list as
   SQLite's: its steps are written in SQL both backends speak), each logged.
4. Check every existing table of ours against the declared columns (``SchemaMismatch``), create
   the missing tables from the SQLModel declarations and the delete triggers, and R29's
   commit-witness table (dropping its rows a day old), stamp the version. A failure anywhere
   rolls all of it back.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Connection, text
from sqlmodel import SQLModel

from ..errors import SchemaMismatch, SchemaVersionError, StorageUnavailable
from . import commit_outcome, migrations, schema, tables  # noqa: F401  (tables registers every table module)

log = logging.getLogger("sessionstate")

# Serialises schema work between processes opening one database at the same time.
SCHEMA_LOCK_KEY = 0x5E55_1057
VERSION_TABLE = "sessionstate_schema"
# The version of a database whose tables were created before PostgreSQL databases were
# stamped: the tables every such release declared are version 3's.
UNSTAMPED_VERSION = 3

# Feature tables whose rows go with their session: (table, key column, agent column).
# SQLite does it with the triggers its table modules declare; these are the same on PostgreSQL.
SESSION_CHILD_TABLES = (
    ("session_meta", "session_key", "agent_id"),
    ("session_messages", "session_key", "agent_id"),
    ("agent_runs", "child_key", "child_agent_id"),
    ("upstream_links", "session_key", "agent_id"),
)


class PostgresSchemaEditor:
    """What a migration step gets on PostgreSQL (``migrations.SchemaEditor``)."""

    integer_holds_64_bits = False

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def execute(self, sql: str) -> Any:
        return self.conn.exec_driver_sql(sql)

    def has_table(self, name: str) -> bool:
        return self.conn.execute(text("SELECT to_regclass(:name)"), {"name": name}).scalar() is not None

    def has_column(self, table: str, column: str) -> bool:
        return self.conn.execute(text(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = :table AND column_name = :column"
        ), {"table": table, "column": column}).first() is not None

    def autoincrements(self, table: str) -> bool:
        return False  # SQLite's counter; a serial column's sequence is another thing


def prepare(conn: Connection, where: str, *, create: bool) -> None:
    """Bring the database on ``conn`` (a transaction open on it) to this release's schema,
    or raise; the caller's transaction then rolls everything back."""
    editor = PostgresSchemaEditor(conn)
    if not create and not editor.has_table("sessions"):
        raise StorageUnavailable(f"{where}: no sessionstate tables there (nothing was created)")
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
    target = schema.SCHEMA_VERSION
    stamped = stamped_version(editor)
    if stamped is not None and stamped > target:
        raise SchemaVersionError(
            f"{where}: the database has schema version {stamped}; this release reads version"
            f" {target} and older. Open it with a newer sessionstate; nothing was changed.",
            file_version=stamped,
            supported_version=target,
        )
    if stamped is None:
        version = UNSTAMPED_VERSION if editor.has_table("sessions") else target
    else:
        version = stamped
    if version < 1:
        raise SchemaMismatch(f"{where}: {VERSION_TABLE} holds version {version}, which no release wrote; nothing was changed")
    steps = migrations.steps_between(version, target, migrations.MIGRATIONS)
    for step in steps:
        step.apply(editor)
    _check_columns(conn, where)
    for step in steps:  # logged only now: a refused foreign file migrated nothing
        log.warning("%s: migrating schema version %d -> %d: %s", where, step.version - 1, step.version, step.summary)
    SQLModel.metadata.create_all(conn)
    _create_delete_triggers(conn)
    _prepare_witnesses(editor)
    if stamped != target:
        _stamp(editor, target)


def _prepare_witnesses(editor: PostgresSchemaEditor) -> None:
    """R29's commit-witness table: created when missing (with the column a lone record
    writes, ``postgres_record``), its day-old rows deleted; neither on a read-only open
    (which never writes a witness: its transactions write nothing)."""
    if editor.execute("SELECT current_setting('transaction_read_only')").scalar() == "on":
        return
    editor.execute(commit_outcome.WITNESS_DDL)  # CREATE TABLE IF NOT EXISTS
    editor.execute(commit_outcome.WITNESS_SEQUENCE_DDL)
    editor.execute(commit_outcome.WITNESS_PRUNE_SQL)


def stamped_version(editor: PostgresSchemaEditor) -> int | None:
    """The stamped schema version; ``None`` when the database has no stamp."""
    if not editor.has_table(VERSION_TABLE):
        return None
    row = editor.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()
    return None if row is None else int(row[0])


def _stamp(editor: PostgresSchemaEditor, version: int) -> None:
    # One row: the primary key is a boolean that can only be true.
    editor.execute(
        f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE}"
        " (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)"
    )
    editor.execute(
        f"INSERT INTO {VERSION_TABLE} (version) VALUES ({int(version)})"
        " ON CONFLICT (one) DO UPDATE SET version = excluded.version"
    )


def _check_columns(conn: Connection, where: str) -> None:
    found: dict[str, set[str]] = {}
    for table, column in conn.exec_driver_sql(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    ):
        found.setdefault(table, set()).add(column)
    problems = []
    for table in SQLModel.metadata.sorted_tables:
        expected = {c.name for c in table.columns}
        present = found.get(table.name)
        if present is None or present == expected:
            continue
        missing = ", ".join(sorted(expected - present)) or "none"
        extra = ", ".join(sorted(present - expected)) or "none"
        problems.append(f"{table.name} (missing columns: {missing}; unexpected columns: {extra})")
    if problems:
        raise SchemaMismatch(
            f"{where}: not a sessionstate database of a known shape; these tables have other"
            f" columns: {'; '.join(problems)}. Nothing was changed."
        )


def _create_delete_triggers(conn: Connection) -> None:
    present = {row[0] for row in conn.exec_driver_sql(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'sessions'::regclass"
    )}
    for table, key_column, agent_column in SESSION_CHILD_TABLES:
        trigger, function = f"trg_{table}_session_deleted", f"sessionstate_{table}_session_deleted"
        if trigger in present:
            continue
        conn.exec_driver_sql(
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN DELETE FROM {table} WHERE {key_column} = OLD.session_key"
            f" AND {agent_column} = OLD.agent_id; RETURN NULL; END $$"
        )
        conn.exec_driver_sql(
            f"CREATE TRIGGER {trigger} AFTER DELETE ON sessions"
            f" FOR EACH ROW EXECUTE FUNCTION {function}()"
        )

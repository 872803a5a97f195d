"""What opening a database does to it: check first, then create, in one transaction.

1. Read the file's schema version (``PRAGMA user_version``). Above this release's: refuse
   (``SchemaVersionError``) before anything is written.
2. A file that is already current (every declared table present with the declared columns)
   is only read: opening it needs no write lock, and works on a read-only file.
3. Otherwise, in one ``BEGIN IMMEDIATE`` transaction: read the version again (another process
   may have got there first), run the numbered migrations the file lacks, check every
   existing table of ours against the declared columns (``SchemaMismatch``), create the
   missing tables from the SQLModel declarations, stamp the version, commit. Any failure
   rolls the whole transaction back: no table added, version unchanged.

Journal mode (WAL) is switched by the caller after this succeeds, so a refused file keeps its
journal mode too. A new, empty file gets incremental auto-vacuum before its first table (the
setting can only be chosen then; see ``reclaim_free_pages``).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from sqlalchemy import Table, create_mock_engine
from sqlmodel import SQLModel

from ..errors import SchemaMismatch, SchemaVersionError
from . import migrations, schema, tables  # noqa: F401  (tables registers every table module)

log = logging.getLogger("sessionstate")

# The tables whose presence marks a file as a sessionstate database (of any version).
CORE_TABLES = ("sessions", "session_state_events", "session_state_heads", "session_watch_cursors")


def prepare(db: sqlite3.Connection, where: str) -> None:
    """Bring the database on ``db`` (autocommit mode, no transaction open) to this release's
    schema, or raise and leave it exactly as it was."""
    target = schema.SCHEMA_VERSION
    version = _user_version(db)
    _refuse_newer(version, target, where)
    if version == target and not _missing_tables(db):
        _check_columns(db, where)  # current: nothing to write
        return
    if _scalar(db, "PRAGMA page_count") == 0:
        # A new file: the auto-vacuum mode is fixed when its first page is written.
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _user_version(db)
        _refuse_newer(version, target, where)
        present = _existing_tables(db)
        if version == 0:
            # Unstamped: a new file (created below at the current version), or one whose first
            # open stopped before the stamp (its tables are the first schema's).
            version = 1 if present & set(CORE_TABLES) else target
        steps = migrations.steps_between(version, target, migrations.MIGRATIONS)
        for step in steps:
            step.apply(SqliteSchemaEditor(db))
        _check_columns(db, where)
        for step in steps:  # logged only now: a refused foreign file migrated nothing
            log.warning("%s: migrating schema version %d -> %d: %s", where, step.version - 1, step.version, step.summary)
        missing = _missing_tables(db)
        if missing:
            for statement in create_statements(missing):
                db.execute(statement)
        if _user_version(db) != target:
            db.execute(f"PRAGMA user_version = {int(target)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class SqliteSchemaEditor:
    """What a migration step gets on SQLite (``migrations.SchemaEditor``)."""

    integer_holds_64_bits = True

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str) -> Any:
        return self.db.execute(sql)

    def has_table(self, name: str) -> bool:
        return name in _existing_tables(self.db)

    def has_column(self, table: str, column: str) -> bool:
        return any(row[1] == column for row in self.db.execute(f"PRAGMA table_info({table})"))

    def autoincrements(self, table: str) -> bool:
        row = self.db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        return row is not None and "AUTOINCREMENT" in row[0].upper()


def create_statements(missing: list[Table]) -> list[str]:
    """The DDL that creates ``missing`` tables (with their indexes and triggers) exactly as
    the SQLModel declarations say."""
    statements: list[str] = []

    def collect(element: Any, *args: Any, **kwargs: Any) -> None:
        statements.append(str(element.compile(dialect=engine.dialect)).strip())

    engine = create_mock_engine("sqlite://", collect)
    SQLModel.metadata.create_all(engine, tables=missing, checkfirst=False)
    # Triggers last: a feature table's trigger fires on another table (``sessions``).
    return sorted(statements, key=lambda sql: sql.upper().startswith("CREATE TRIGGER"))


def declared_columns() -> dict[str, set[str]]:
    return {t.name: {c.name for c in t.columns} for t in SQLModel.metadata.sorted_tables}


def _check_columns(db: sqlite3.Connection, where: str) -> None:
    problems = []
    present = _existing_tables(db)
    for name, expected in declared_columns().items():
        if name not in present:
            continue
        found = {row[1] for row in db.execute(f'PRAGMA table_info("{name}")').fetchall()}
        if found != expected:
            missing = ", ".join(sorted(expected - found)) or "none"
            extra = ", ".join(sorted(found - expected)) or "none"
            problems.append(f"{name} (missing columns: {missing}; unexpected columns: {extra})")
    if problems:
        raise SchemaMismatch(
            f"{where}: not a sessionstate database of a known shape; these tables have other"
            f" columns: {'; '.join(problems)}. Nothing was changed."
        )


def _refuse_newer(version: int, target: int, where: str) -> None:
    if version > target:
        raise SchemaVersionError(
            f"{where}: the file has schema version {version}; this release reads version"
            f" {target} and older. Open it with a newer sessionstate; nothing was changed.",
            file_version=version,
            supported_version=target,
        )


def _missing_tables(db: sqlite3.Connection) -> list[Table]:
    present = _existing_tables(db)
    return [t for t in SQLModel.metadata.tables.values() if t.name not in present]


def _existing_tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}


def _user_version(db: sqlite3.Connection) -> int:
    return int(_scalar(db, "PRAGMA user_version"))


def _scalar(db: sqlite3.Connection, sql: str) -> Any:
    return db.execute(sql).fetchone()[0]

"""Opening an SQLite file that is not exactly this release's (sessionstate/store/bootstrap.py):
tables missing, an unstamped first-schema file, tables of another shape, a newer release
stamping the file while the open waits for the write lock.

Found by mutmut over store/bootstrap.py (docs/mutants/store-features.md): every test that
opened a file with some tables missing built that file with ``create_statements`` itself, the
unstamped file they opened already had the current columns, and the refusals were matched
on a fragment only, so an open that created every table again, skipped the first migration
or named no file in its refusal went unnoticed."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sessionstate import Gateway
from sessionstate.errors import SchemaMismatch, SchemaVersionError
from sessionstate.store import bootstrap, migrations, schema

MAIN = "agent:main:main"
PEER = "agent:main:peer"


def _tables(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


def test_an_open_creates_only_the_tables_a_file_lacks_and_keeps_the_others_rows(tmp_path):
    """A stamped file missing two feature tables (their triggers gone with them) opens: the
    two are created again with their delete triggers, and the sessions and events already in
    the file are kept."""
    path = tmp_path / "partial.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
        sequence = gw.record_event(MAIN, "goal_changed", actor_type="human", summary="kept")
    everything = _tables(path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE upstream_links")
    db.execute("DROP TABLE session_messages")
    db.close()
    assert everything - _tables(path) == {"upstream_links", "session_messages"}

    with Gateway.open(str(path)) as gw:
        assert gw.ops.state_version(MAIN) == sequence
        assert gw.store.pragma("user_version") == schema.SCHEMA_VERSION
        gw.store.links.replace(MAIN, "main", provider="p", host="h", thread_id="t", marker=None, primed=False,
                               now=1.0)
        gw.transcripts.append_message(MAIN, "user", "hello")
        assert [m.text for m in gw.store.transcripts.recent(MAIN, "main", 5)] == ["hello"]
        gw.ops.delete_session(MAIN)  # the recreated tables' triggers drop the session's rows
        assert gw.store.links.all() == [] and gw.store.transcripts.dump() == []
    assert _tables(path) == everything


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_a_refused_current_file_names_itself_and_every_column_problem(tmp_path):
    """A current file whose tables have other columns is refused with one message naming
    the file, then each table's missing and unexpected columns (comma-separated, "none" for
    an empty side), the tables separated by semicolons; the file is left as it was."""
    path = tmp_path / "tampered.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
    db = _raw(path)
    db.execute("ALTER TABLE agent_runs ADD COLUMN extra_a TEXT")
    db.execute("ALTER TABLE agent_runs ADD COLUMN extra_b TEXT")
    db.execute("ALTER TABLE session_meta DROP COLUMN thinking")
    db.execute("ALTER TABLE session_meta DROP COLUMN runtime")
    db.close()
    before = path.read_bytes()
    with pytest.raises(SchemaMismatch) as raised:
        Gateway.open(str(path))
    assert raised.value.message == (
        f"{path}: not a sessionstate database of a known shape; these tables have other columns:"
        " agent_runs (missing columns: none; unexpected columns: extra_a, extra_b);"
        " session_meta (missing columns: runtime, thinking; unexpected columns: none). Nothing was changed."
    )
    assert path.read_bytes() == before


def test_an_unstamped_file_of_the_first_schema_is_migrated_from_version_1_step_by_step(tmp_path, caplog):
    """A file left at version 0 holding the first schema's tables (no cursor provenance)
    counts as version 1: every step from 1 runs, each logged with the file's name, and its
    cursors come out with the provenance the last step adds."""
    path = tmp_path / "unstamped.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
        gw.create_session(PEER)
        gw.watch(MAIN, PEER)
    db = _raw(path)
    db.execute("ALTER TABLE session_watch_cursors DROP COLUMN provenance")
    db.execute("PRAGMA user_version = 0")
    db.close()
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(str(path)) as gw:
            assert gw.ops.cursor_positions(MAIN, PEER).provenance == "explicit"
            assert gw.store.pragma("user_version") == schema.SCHEMA_VERSION
    logged = [r.getMessage() for r in caplog.records if "migrating schema version" in r.getMessage()]
    assert logged == [
        f"{path}: migrating schema version {step.version - 1} -> {step.version}: {step.summary}"
        for step in migrations.MIGRATIONS
    ]
    assert [step.version for step in migrations.MIGRATIONS] == list(range(2, schema.SCHEMA_VERSION + 1))


def test_a_newer_version_stamped_before_the_open_takes_the_write_lock_is_refused(tmp_path, caplog):
    """Another process stamps a newer release's version after the open first read the file's
    (older) version and before its write transaction begins: the version read again inside
    the transaction is refused, naming the file, and nothing is migrated."""
    path = tmp_path / "raced.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
    db = _raw(path)
    db.execute("PRAGMA user_version = 3")  # older: the open must migrate, so it writes
    db.close()
    newer = schema.SCHEMA_VERSION + 1

    class StampedMeanwhile(sqlite3.Connection):
        """The open's connection; just before its write transaction begins, another
        connection (a newer release) stamps the file."""

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql.upper().startswith("BEGIN"):
                other = _raw(path)
                other.execute(f"PRAGMA user_version = {newer}")
                other.close()
            return super().execute(sql, *args)

    db = sqlite3.connect(path, isolation_level=None, factory=StampedMeanwhile)
    try:
        with pytest.raises(SchemaVersionError) as raised, caplog.at_level(logging.WARNING, logger="sessionstate"):
            bootstrap.prepare(db, str(path))
        assert not db.in_transaction
    finally:
        db.close()
    assert raised.value.message.startswith(f"{path}: the file has schema version {newer}; ")
    assert "migrating" not in caplog.text
    db = _raw(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == newer  # the other release's stamp stands
    finally:
        db.close()

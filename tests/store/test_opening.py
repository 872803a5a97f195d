"""Opening a database: URLs, locations, unusable files, schema versions, foreign tables, a file
missing some tables, an unstamped first-schema file, a newer release stamping the file while
the open waits for the write lock.

Every refusal is a ``StorageError`` subclass naming the path and the cause, and leaves the file
exactly as it was (spec: storage that is not ours, or not usable).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstate import (
    Gateway,
    InvalidDatabaseUrl,
    SchemaMismatch,
    SchemaVersionError,
    SessionStateError,
    StorageError,
    StorageUnavailable,
    UnsupportedBackend,
    notice_text,
)
from sessionstate.services.notice.announce import created_line
from sessionstate.store import bootstrap, migrations, schema
from sessionstate.store.migrations import Migration, steps_between

MAIN = "agent:main:main"
PEER = "agent:main:peer"


def make_current_file(path: Path) -> None:
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
        gw.record_event(MAIN, "goal_changed", actor_type="human", summary="kept")


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def snapshot(path: Path) -> tuple[bytes, list[str]]:
    """The file's bytes and the names beside it (no -journal, -wal left behind either)."""
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", *args], capture_output=True, text=True, timeout=60)


# -- item 3: in-memory databases -------------------------------------------------------------


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_gateway_keeps_the_whole_contract(url):
    with Gateway.open(url) as gw:
        gw.create_session(MAIN)
        gw.create_session(PEER)
        assert gw.watch(MAIN, PEER) is True
        sequence = gw.record_event(PEER, "goal_changed", actor_type="human", summary="goal")
        assert sequence == 3  # a new database numbers from 1: MAIN's and PEER's `created` (R27) first
        assert gw.drain_system_events(MAIN) == [created_line(PEER, "main", None), notice_text(PEER, 2)]
        assert gw.session_status(PEER, changes_since=2)["stateChanges"]["events"][0]["summary"] == "goal"
        assert gw.call_tool(MAIN, "session_status", {"sessionKey": PEER})["stateVersion"] == 3
        # One connection, usable from the runner threads the gateway starts.
        seen: list[int] = []
        thread = threading.Thread(target=lambda: seen.append(gw.ops.state_version(PEER)))
        thread.start()
        thread.join()
        assert seen == [3]


# -- item 4: URLs and locations ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url, error",
    [
        ("", InvalidDatabaseUrl),
        ("   ", InvalidDatabaseUrl),
        ("://x", InvalidDatabaseUrl),
        ("sqlite://host/x.db", InvalidDatabaseUrl),
        ("sqlite:///tmp/a\x00b.db", InvalidDatabaseUrl),
        ("state-\ud800.db", InvalidDatabaseUrl),
        (b"state.db", InvalidDatabaseUrl),
        ("mysql://localhost/x", UnsupportedBackend),
        ("postgresql+psycopg2://localhost/x", UnsupportedBackend),  # psycopg 3 only
        ("postgresql://nobody@/x?host=/nonexistent-sessionstate", StorageUnavailable),
    ],
)
def test_unusable_urls_raise_typed_errors(url, error):
    with pytest.raises(error) as raised:
        Gateway.open(url)
    assert isinstance(raised.value, StorageError)


def test_random_bytes_are_refused_naming_the_file_and_left_alone(tmp_path):
    path = tmp_path / "noise.db"
    path.write_bytes(os.urandom(3000) + b"not sqlite" * 100)
    before = snapshot(path)
    with pytest.raises(StorageUnavailable) as raised:
        Gateway.open(str(path))
    assert str(path) in raised.value.message and "not a database" in raised.value.message
    assert not isinstance(raised.value.__cause__, SessionStateError)  # translated from the driver
    assert snapshot(path) == before


def test_a_directory_is_not_a_database(tmp_path):
    with pytest.raises(StorageUnavailable, match="is a directory") as raised:
        Gateway.open(str(tmp_path))
    assert str(tmp_path) in raised.value.message


def test_a_parent_that_is_a_file_is_named(tmp_path):
    blocker = tmp_path / "plain"
    blocker.write_text("x")
    with pytest.raises(StorageUnavailable, match="is a file, not a directory") as raised:
        Gateway.open(str(blocker / "sub" / "state.db"))
    assert str(blocker) in raised.value.message
    assert blocker.read_text() == "x"


def test_open_without_create_makes_no_directory_and_no_file(tmp_path):
    path = tmp_path / "missing" / "deeper" / "state.db"
    with pytest.raises(StorageUnavailable, match="no database file") as raised:
        Gateway.open(str(path), create=False)
    assert str(path) in raised.value.message
    assert list(tmp_path.iterdir()) == []


def test_open_creates_missing_directories_by_default(tmp_path):
    path = tmp_path / "new" / "state.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
    assert path.is_file()


@pytest.mark.parametrize(
    "db, code, words",
    [
        ("://x", "invalid_database_url", "'://x'"),
        ("", "invalid_database_url", "empty"),
        ("RANDOM", "storage_unavailable", "not a database"),
        ("DIRECTORY", "storage_unavailable", "is a directory"),
    ],
)
def test_cli_prints_one_error_line_and_exits_2(tmp_path, db, code, words):
    if db == "RANDOM":
        db = str(tmp_path / "noise.db")
        Path(db).write_bytes(os.urandom(4096))
    elif db == "DIRECTORY":
        db = str(tmp_path)
    run = cli("status", MAIN, "--db", db)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sessionstate: {code}: ") and words in lines[0], run.stderr
    assert run.stdout == ""


def test_cli_status_on_an_in_memory_url_is_a_clean_unknown_session():
    run = cli("status", MAIN, "--db", "sqlite://")
    assert (run.returncode, run.stderr.strip()) == (2, f"sessionstate: unknown_session: unknown session {MAIN!r} (agent 'main')")


def test_cli_status_in_a_missing_directory_creates_nothing(tmp_path):
    path = tmp_path / "nowhere" / "state.db"
    run = cli("status", MAIN, "--db", str(path))
    assert run.returncode == 2 and run.stderr.startswith("sessionstate: storage_unavailable: ")
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=200)
@given(url=st.one_of(
    st.text(),
    st.text().map(lambda t: "sqlite:///" + t),
    st.text().map(lambda t: "sqlite://" + t),
    st.text(alphabet="sqlite:/?&=.\x00\ud800modeuriro", max_size=30),
))
def test_any_url_opens_or_raises_a_typed_error_and_creates_nothing(url):
    with tempfile.TemporaryDirectory() as scratch:
        here = os.getcwd()
        os.chdir(scratch)
        try:
            try:
                Gateway.open(url, create=False).close()
            except SessionStateError:
                pass
            assert os.listdir(scratch) == []
        finally:
            os.chdir(here)


# -- item 1: schema versions ------------------------------------------------------------------


def test_a_newer_schema_version_is_refused_and_the_file_is_byte_identical(tmp_path):
    path = tmp_path / "future.db"
    make_current_file(path)
    with raw(path) as db:
        db.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    db.close()
    before = snapshot(path)
    with pytest.raises(SchemaVersionError) as raised:
        Gateway.open(str(path))
    error = raised.value
    assert (error.file_version, error.supported_version) == (schema.SCHEMA_VERSION + 1, schema.SCHEMA_VERSION)
    assert f"schema version {schema.SCHEMA_VERSION + 1}" in error.message
    assert f"reads version {schema.SCHEMA_VERSION}" in error.message and str(path) in error.message
    assert snapshot(path) == before


def test_a_newer_schema_version_on_an_otherwise_empty_file_is_refused_too(tmp_path):
    path = tmp_path / "future-empty.db"
    with raw(path) as db:
        db.execute("PRAGMA user_version = 7")
    db.close()
    before = snapshot(path)
    with pytest.raises(SchemaVersionError):
        Gateway.open(str(path))
    assert snapshot(path) == before


def test_migration_to_1_completes_an_unstamped_file_holding_the_first_schema(tmp_path, caplog):
    # A first open that stopped after some tables and before the stamp left version 0.
    path = tmp_path / "unstamped.db"
    core = [t for t in bootstrap.SQLModel.metadata.sorted_tables if t.name in ("sessions", "session_state_heads")]
    with raw(path) as db:
        for statement in bootstrap.create_statements(core):
            db.execute(statement)
        db.execute("INSERT INTO sessions VALUES ('agent:main:main', 'main', 'main', NULL, NULL, NULL, 1, 1)")
        db.execute("INSERT INTO session_state_heads VALUES ('agent:main:main', 'main', 0, 0, 1)")
    db.close()
    with Gateway.open(str(path)) as gw:
        assert gw.ops.session_exists(MAIN)
        assert gw.record_event(MAIN, "goal_changed", actor_type="human", summary="x") == 1
        assert gw.store.pragma("user_version") == schema.SCHEMA_VERSION


def test_migrations_run_in_order_in_one_transaction_and_are_logged(tmp_path, monkeypatch, caplog):
    path = tmp_path / "old.db"
    make_current_file(path)
    with raw(path) as db:
        db.execute("PRAGMA user_version = 1")
    db.close()
    applied: list[int] = []

    def step(version: int):
        def apply(db: sqlite3.Connection) -> None:
            applied.append(version)
            db.execute(f"CREATE TABLE probe_v{version} (x)")
        return Migration(version, f"probe table {version}", apply)

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(migrations, "MIGRATIONS", (step(2), step(3)))
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(str(path)) as gw:
            with raw(path) as db:  # a second connection: the store's own is private
                names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            assert gw.store.pragma("user_version") == 3
            assert gw.session_status(MAIN)["stateVersion"] == 2  # data kept: its `created` (R27), the goal
    assert applied == [2, 3] and {"probe_v2", "probe_v3"} <= names
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        "migrating schema version 1 -> 2: probe table 2",
        "migrating schema version 2 -> 3: probe table 3",
    ]


def test_a_failing_migration_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    make_current_file(path)
    with raw(path) as db:
        db.execute("PRAGMA user_version = 1")
    db.close()
    before = snapshot(path)

    def good(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE probe (x)")

    def bad(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE no_such_table ADD COLUMN y")

    monkeypatch.setattr(schema, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(migrations, "MIGRATIONS", (Migration(2, "good", good), Migration(3, "bad", bad)))
    with pytest.raises(StorageUnavailable, match="no_such_table"):
        Gateway.open(str(path))
    assert snapshot(path) == before


def test_the_migration_list_has_no_gaps():
    assert steps_between(1, schema.SCHEMA_VERSION, migrations.MIGRATIONS) == list(migrations.MIGRATIONS)
    noop = lambda db: None  # noqa: E731
    with pytest.raises(ValueError, match=r"^migration versions must be 2, 3, \.\.\. in order; got \[3\]$"):
        steps_between(1, 3, (Migration(3, "skips 2", noop),))
    with pytest.raises(ValueError, match=r"^schema version 3 needs migrations up to it; the last is 2$"):
        steps_between(1, 3, (Migration(2, "stops early", noop),))


# -- item 2: same names, other columns -------------------------------------------------------


def test_tables_with_our_names_and_other_columns_fail_and_change_nothing(tmp_path, caplog):
    path = tmp_path / "foreign.db"
    with raw(path) as db:
        db.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO sessions (name) VALUES ('theirs')")
    db.close()
    before = snapshot(path)
    with pytest.raises(SchemaMismatch) as raised, caplog.at_level(logging.WARNING, logger="sessionstate"):
        Gateway.open(str(path))
    # Issue 20: the refusal was preceded by "migrating schema version 1 -> 2" warnings.
    assert "migrating" not in caplog.text
    assert str(path) in raised.value.message and "sessions" in raised.value.message
    assert "session_key" in raised.value.message  # a column it lacks
    assert snapshot(path) == before
    with raw(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # WAL not switched
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["sessions"]
    db.close()


def test_a_mismatch_in_a_feature_table_of_a_current_file_is_refused_too(tmp_path):
    path = tmp_path / "tampered.db"
    make_current_file(path)
    with raw(path) as db:
        db.execute("ALTER TABLE agent_runs ADD COLUMN extra TEXT")
    db.close()
    before = snapshot(path)
    with pytest.raises(SchemaMismatch, match="agent_runs.*unexpected columns: extra"):
        Gateway.open(str(path))
    assert snapshot(path) == before


def test_unrelated_tables_are_left_in_place(tmp_path):
    path = tmp_path / "shared.db"
    with raw(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
    db.close()
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
    with raw(path) as db:
        assert db.execute("SELECT count(*) FROM notes").fetchone()[0] == 0
        assert db.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    db.close()


def test_migrations_2_and_3_leave_a_version_1_file_without_the_pump_index(tmp_path):
    path = tmp_path / "v1.db"
    make_current_file(path)
    with raw(path) as db:
        db.execute("PRAGMA user_version = 1")
    db.close()
    with Gateway.open(str(path)) as gw:
        with raw(path) as db:  # a second connection: the store's own is private
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        db.close()
        assert "ix_cursors_pending_notified" not in names and "ix_cursors_target" in names
        assert gw.store.pragma("user_version") == schema.SCHEMA_VERSION


def test_migration_3_drops_the_index_version_2_added(tmp_path):
    path = tmp_path / "v2.db"
    make_current_file(path)
    with raw(path) as db:
        db.execute(
            "CREATE INDEX ix_cursors_pending_notified ON session_watch_cursors (notified_sequence)"
            " WHERE notified_sequence > last_seen_sequence"
        )
        db.execute("PRAGMA user_version = 2")
    db.close()
    with Gateway.open(str(path)) as gw:
        with raw(path) as db:  # a second connection: the store's own is private
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        db.close()
        assert "ix_cursors_pending_notified" not in names


def test_a_file_name_longer_than_the_file_system_allows_is_storage_unavailable(tmp_path):
    # Found by the arbitrary-URL property test: pathlib's exists() raised ENAMETOOLONG.
    url = f"sqlite:///{tmp_path / ('x' * 300)}"
    with pytest.raises(StorageUnavailable, match="too long"):
        Gateway.open(url)
    assert list(tmp_path.iterdir()) == []


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


def test_a_refused_current_file_names_itself_and_every_column_problem(tmp_path):
    """A current file whose tables have other columns is refused with one message naming
    the file, then each table's missing and unexpected columns (comma-separated, "none" for
    an empty side), the tables separated by semicolons; the file is left as it was."""
    path = tmp_path / "tampered.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session(MAIN)
    db = raw(path)
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
    db = raw(path)
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
    db = raw(path)
    db.execute("PRAGMA user_version = 3")  # older: the open must migrate, so it writes
    db.close()
    newer = schema.SCHEMA_VERSION + 1

    class StampedMeanwhile(sqlite3.Connection):
        """The open's connection; just before its write transaction begins, another
        connection (a newer release) stamps the file."""

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql.upper().startswith("BEGIN"):
                other = raw(path)
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
    db = raw(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == newer  # the other release's stamp stands
    finally:
        db.close()

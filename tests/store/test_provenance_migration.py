"""Migration 4 (spec R25): a version-3 database gets the cursors' provenance column, its
spawn-edge cursors become ``spawn`` and every other one ``explicit``; both backends."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from sessionstate import Gateway
from sessionstate.store.postgres import postgres_url

MAIN = "agent:main:main"
CHILD = "agent:main:subagent:c"
GROUP = "agent:main:group:g"


def make_version_3(url: str) -> None:
    """A database as release 3 left it: no provenance column, stamped 3."""
    with Gateway.open(url) as gw:
        gw.create_session(MAIN)
        gw.create_session(CHILD, kind="subagent", parent=MAIN)
        gw.create_session(GROUP)
        gw.watch(MAIN, GROUP)
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)) as db:
            db.execute("ALTER TABLE session_watch_cursors DROP COLUMN provenance")
            db.execute("PRAGMA user_version = 3")
        return
    engine = create_engine(postgres_url(url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE session_watch_cursors DROP COLUMN provenance")
            conn.exec_driver_sql("UPDATE sessionstate_schema SET version = 3")
    finally:
        engine.dispose()


def test_a_version_3_database_is_migrated_to_cursor_provenance(db_url, caplog):
    make_version_3(db_url)
    with caplog.at_level(logging.WARNING, logger="sessionstate"):
        with Gateway.open(db_url) as gw:
            assert gw.ops.cursor_positions(MAIN, CHILD).provenance == "spawn"
            assert gw.ops.cursor_positions(MAIN, GROUP).provenance == "explicit"
            gw.watch(GROUP, CHILD, ambient=True)  # the new column takes writes
            assert gw.ops.cursor_positions(GROUP, CHILD).provenance == "ambient"
    assert any("3 -> 4: cursor provenance" in r.getMessage() for r in caplog.records)
    with Gateway.open(db_url) as gw:  # opened again: current, nothing to migrate
        assert gw.ops.cursor_positions(GROUP, CHILD).provenance == "ambient"

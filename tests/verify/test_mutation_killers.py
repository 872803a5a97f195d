"""Tests added for mutants that survived the first mutation run (docs/verification.md)."""

from __future__ import annotations

import sqlite3

import pytest

from sessionstate import ProtocolError
from sessionstate.statemachine import NOTIFYING_KINDS, Positions, derive_state
from sessionstate.store import SqliteStore, sqlite_path
from sessionstate.store.schema import SCHEMA_VERSION


@pytest.mark.parametrize("positions", [(1, 1, 2), (2, 1, 1), (1, 2, 1), (3, 2, 2)])
def test_positions_outside_the_protocol_raise(positions):
    with pytest.raises(ProtocolError):
        derive_state(Positions(*positions))


def test_sqlite_path_of_memory_and_file_urls(tmp_path):
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path(f"sqlite:///{tmp_path / 'x.db'}") == tmp_path / "x.db"


def test_a_store_creates_its_directory_and_stamps_the_schema_version(tmp_path):
    path = tmp_path / "a" / "b" / "state.db"
    store = SqliteStore(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS)
    try:
        assert path.exists()
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        store.close()


def test_atomic_takes_the_write_lock_at_once(tmp_path):
    # BEGIN IMMEDIATE: another writer is refused before this transaction has written anything.
    path = tmp_path / "state.db"
    store = SqliteStore(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with store.atomic():
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
        store.close()

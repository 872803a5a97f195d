"""Tests added for mutants that survived the first mutation run (docs/verification.md)."""

from __future__ import annotations

import sqlite3

import pytest

from sessionstate import ProtocolError
from sessionstate.errors import StorageError
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
        assert store.pragma("user_version") == SCHEMA_VERSION
    finally:
        store.close()


def test_atomic_takes_the_write_lock_at_once(tmp_path):
    # BEGIN IMMEDIATE: another writer is refused before this transaction has written anything.
    path = tmp_path / "state.db"
    store = SqliteStore(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with store.transaction():
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
        store.close()


def _store(tmp_path) -> SqliteStore:
    from sessionstate.store import SessionRecord

    store = SqliteStore(f"sqlite:///{tmp_path / 'k.db'}", notifying_kinds=NOTIFYING_KINDS)
    with store.transaction():
        for key in ("agent:a:main", "agent:b:main"):
            store.insert_session(SessionRecord(key, key.split(":")[1], "main", None, None, None, 0.0, 0.0))
    return store


def _append(store: SqliteStore, key: str, at: float) -> int:
    with store.transaction():
        seq, _ = store.append_event(key, key.split(":")[1], "goal_changed", "human", None, None, "s", None, at, at, None)
    return seq


def test_sequences_are_never_reused_after_the_newest_row_goes(tmp_path):
    store = _store(tmp_path)
    try:
        assert _append(store, "agent:a:main", 1.0) == 1
        assert _append(store, "agent:b:main", 2.0) == 2
        with store.transaction():
            store.delete_session_data("agent:b:main", "b")
        assert _append(store, "agent:a:main", 3.0) == 3  # AUTOINCREMENT, not max(rowid) + 1
    finally:
        store.close()


def test_retention_pruning_runs_in_chunks_of_exactly_chunk_rows(tmp_path):
    store = _store(tmp_path)
    try:
        for i in range(10):
            _append(store, "agent:a:main", float(i))
        counts = store.prune_events(cutoff=100.0, max_rows=1_000, chunk_rows=3)
        assert counts == {"events": 10, "chunks": 4}
        assert store.head("agent:a:main", "a").pruned_max_sequence == 10
    finally:
        store.close()


def test_a_cursor_record_carries_its_updated_at(tmp_path):
    store = _store(tmp_path)
    try:
        with store.transaction():
            store.put_cursors("agent:b:main", "b", [("agent:a:main", (0, 0, 0))], 42.5)
        assert store.cursor("agent:a:main", "agent:b:main", "b").updated_at == 42.5
    finally:
        store.close()


def test_close_closes_the_connection(tmp_path):
    store = _store(tmp_path)
    store.close()
    with pytest.raises((sqlite3.ProgrammingError, StorageError)):
        store.pragma("user_version")


def test_every_transaction_after_the_first_still_takes_the_write_lock(tmp_path):
    store = _store(tmp_path)
    other = sqlite3.connect(tmp_path / "k.db", timeout=0, isolation_level=None)
    try:
        with store.transaction():
            with store.transaction():
                pass
        with store.transaction():
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()
        store.close()

"""What only the SQLite store promises, on a real file: pragmas, the schema stamp, dense
sequences never reused, the partial-index plan, the write lock taken at the start of every
transaction, pruning in chunks of exactly the size asked, a cursor's ``updated_at``, a closed
connection, and the file path of a URL. The backend-neutral contract (transactions, savepoints, dedupe,
pruning) runs on every backend in tests/store/test_conformance.py."""

from __future__ import annotations

import sqlite3

import pytest

from sessionstate import Gateway, UnsupportedBackend
from sessionstate.errors import StorageError
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, SqliteStore, schema, sqlite_path
from sessionstate.store.dialect import SQLITE
from sessionstate.store.schema import SCHEMA_VERSION
from sessionstate.store.statements import CoreStatements

CAUGHT_UP_WATCHERS_SQL = CoreStatements(SQLITE, sorted(NOTIFYING_KINDS)).caught_up_watchers


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(f"sqlite:///{tmp_path / 'store.db'}", notifying_kinds=NOTIFYING_KINDS)
    for key in ("agent:a:one", "agent:a:two"):
        s.insert_session(SessionRecord(key, "a", "main", None, None, None, 1.0, 1.0))
    yield s
    s.close()


def append(store, key="agent:a:one", kind="human_direct_message", dedupe=None, at=1.0):
    with store.transaction():
        return store.append_event(key, "a", kind, "human", None, None, "s", None, at, at, dedupe)


def test_wal_and_synchronous_normal(store):
    assert store.pragma("journal_mode") == "wal"
    assert store.pragma("synchronous") == 1  # NORMAL
    assert store.pragma("busy_timeout") == 10_000  # docs/operations.md


def test_schema_version_is_stamped_and_dedupe_keys_are_unique(store):
    # The on-disk format version later migrations will read; it is 1 for this schema.
    assert store.pragma("user_version") == schema.SCHEMA_VERSION
    append(store, dedupe="same")
    raw = sqlite3.connect(store.path)  # a second connection: the file's own constraint refuses it
    with raw, pytest.raises(sqlite3.IntegrityError):
        raw.execute(
            "INSERT INTO session_state_events (session_key, agent_id, kind, actor_type, summary,"
            " occurred_at, recorded_at, dedupe_key) VALUES ('agent:a:one', 'a', 'compacted',"
            " 'system', 's', 1, 1, 'same')"
        )


def test_only_sqlite_urls_are_accepted(tmp_path):
    with pytest.raises(UnsupportedBackend):
        SqliteStore("postgresql://localhost/x", notifying_kinds=NOTIFYING_KINDS)
    with pytest.raises(UnsupportedBackend):
        SqliteStore(f"sqlite:///{tmp_path / 'x.db'}", notifying_kinds=NOTIFYING_KINDS, synchronous="SOMETIMES")


def test_sequences_are_global_and_sparse_per_session(store):
    one = append(store)[0]
    two = append(store, key="agent:a:two")[0]
    three = append(store)[0]
    assert (one, two, three) == (1, 2, 3)
    assert [e.sequence for e in store.events_after("agent:a:one", "a", 0, 10)] == [1, 3]
    assert store.head("agent:a:one", "a").last_sequence == 3


def test_caught_up_lookup_reads_only_the_partial_index(store):
    with sqlite3.connect(store.path) as raw:
        plan = raw.execute("EXPLAIN QUERY PLAN " + CAUGHT_UP_WATCHERS_SQL, ("t", "a")).fetchall()
    assert "USING INDEX ix_cursors_target_caught_up" in " ".join(str(row) for row in plan)
    rows = [("w1", 1, 1, 1), ("w2", 1, 5, 5), ("w3", 2, 2, 2), ("w4", 2, 3, 9)]
    with store.transaction():
        store.put_cursors("t", "a", [(w, (l, n, m)) for w, l, n, m in rows], 1.0)
    assert store.caught_up_watchers("t", "a") == [("w1", (1, 1, 1), "explicit"), ("w3", (2, 2, 2), "explicit")]


def test_changes_page_is_200_and_says_truncated(tmp_path):
    with Gateway.open(str(tmp_path / "g.db")) as gw:
        gw.create_session("agent:a:one")
        created = gw.ops.state_version("agent:a:one")  # its own `created` (R27): the pages start after it
        seqs = [gw.record_event("agent:a:one", "compacted", actor_type="system", summary="c") for _ in range(205)]
        page = gw.session_status("agent:a:one", changes_since=created)["stateChanges"]
        assert [e["sequence"] for e in page["events"]] == seqs[:200]
        assert page["truncated"] is True
        rest = gw.session_status("agent:a:one", changes_since=seqs[199])["stateChanges"]
        assert [e["sequence"] for e in rest["events"]] == seqs[200:]
        assert rest["truncated"] is False


def test_a_second_process_sees_committed_events(tmp_path):
    path = tmp_path / "shared.db"
    with Gateway.open(str(path)) as gw:
        gw.create_session("agent:a:one")
        seq = gw.record_event("agent:a:one", "goal_changed", actor_type="human", summary="goal set")
        other = sqlite3.connect(path)
        assert other.execute("SELECT max(sequence) FROM session_state_events").fetchone()[0] == seq
        other.close()


def test_run_sql_uses_the_stores_connection_and_its_transaction(store):
    assert store.run_sql("SELECT count(*) FROM sessions") == [(2,)]
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.run_sql("DELETE FROM sessions WHERE session_key = ?", ("agent:a:one",))
            store.run_sql("INSERT INTO session_watch_cursors VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          [("w", "agent:a:two", "a", 0, 0, 0, 1.0, "explicit")], many=True)
            assert store.run_sql("SELECT count(*) FROM sessions") == [(1,)]  # the same connection
            raise RuntimeError("roll back")
    assert store.run_sql("SELECT count(*) FROM sessions") == [(2,)]  # rolled back with it
    assert store.all_cursors() == []


def test_each_prune_chunk_reads_its_own_range_not_the_session_index(store):
    # Left alone, the planner walks the whole (session, sequence) index to serve the chunk's
    # GROUP BY; the hints keep the row cap's chunk on the key range and the window's chunk on
    # ix_events_recorded_at (sqlite.py, _prune_chunk).
    with store.transaction():
        for n in range(40):
            key = ("agent:a:one", "agent:a:two")[n % 2]
            store.append_event(key, "a", "compacted", "system", None, None, f"e{n}", None, float(n), float(n), None)
    with store.trace_statements() as statements:
        store.prune_events(cutoff=30.0, max_rows=20)
    selects = [sql for sql in statements if "GROUP BY session_key" in sql]
    by_rows = [sql for sql in selects if "WHERE sequence" in sql]
    by_age = [sql for sql in selects if "WHERE recorded_at" in sql]
    assert by_rows and by_age, selects
    with sqlite3.connect(store.path) as raw:
        for sql in by_rows:
            plan = " ".join(str(row) for row in raw.execute("EXPLAIN QUERY PLAN " + sql))
            assert "USING INTEGER PRIMARY KEY" in plan and "INDEX" not in plan, plan
        for sql in by_age:
            plan = " ".join(str(row) for row in raw.execute("EXPLAIN QUERY PLAN " + sql))
            assert "ix_events_recorded_at" in plan, plan


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

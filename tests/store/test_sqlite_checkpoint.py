"""The SQLite store's WAL checkpoints run on a thread of their own (store/sqlite_checkpoint.py):
the commits reach the database file without a commit copying them, the thread ends with the
store, and a checkpoint that fails is logged and asked for again."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import time

import pytest

from sessionstate import StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, SqliteStore
from sessionstate.store.sqlite_checkpoint import BACKSTOP_PAGES, WalCheckpointer

KEY, AGENT = "agent:a:one", "a"


def open_store(path, query: str = "") -> SqliteStore:
    return SqliteStore(f"sqlite:///{path}{query}", notifying_kinds=NOTIFYING_KINDS)


def append(store: SqliteStore, count: int) -> None:
    for i in range(count):
        with store.transaction():
            store.append_event(KEY, AGENT, "human_direct_message", "human", None, None, f"e{i}", None, 1.0, 1.0, None)


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the checkpoint thread did not get there in time"
        time.sleep(0.01)


def events_in_file_alone(db_file, copy_dir) -> int:
    """The events the database file holds by itself: a copy without its -wal file."""
    copy = copy_dir / "copy.db"
    shutil.copyfile(db_file, copy)
    with sqlite3.connect(copy) as db:
        return int(db.execute("SELECT count(*) FROM session_state_events").fetchone()[0])


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "state.db")
    s.insert_session(SessionRecord(KEY, AGENT, "main", None, None, None, 1.0, 1.0))
    yield s
    s.close()


def test_commits_reach_the_file_through_the_thread(store, tmp_path):
    # The writer's own autocheckpoint is only a backstop, far above what ten commits write.
    assert store.pragma("wal_autocheckpoint") == BACKSTOP_PAGES
    assert store.checkpointer is not None and store.checkpointer.alive
    copies = tmp_path / "copies"
    copies.mkdir()
    append(store, 10)
    wait_until(lambda: events_in_file_alone(store.path, copies) == 10)
    assert store.checkpointer.checkpoints >= 1


def test_close_ends_the_thread_and_removes_the_wal(tmp_path):
    s = open_store(tmp_path / "state.db")
    s.insert_session(SessionRecord(KEY, AGENT, "main", None, None, None, 1.0, 1.0))
    append(s, 3)
    checkpointer = s.checkpointer
    assert checkpointer is not None
    s.close()
    assert not checkpointer.alive
    # The writer's connection closed last, so SQLite checkpointed everything and removed the WAL.
    assert not (tmp_path / "state.db-wal").exists()
    reopened = open_store(tmp_path / "state.db")
    try:
        assert reopened.event_count() == 3
    finally:
        reopened.close()


def test_read_only_and_in_memory_stores_run_no_thread(tmp_path):
    open_store(tmp_path / "state.db").close()
    for store in (open_store(tmp_path / "state.db", "?mode=ro&uri=true"), SqliteStore("sqlite://", notifying_kinds=NOTIFYING_KINDS)):
        try:
            assert store.checkpointer is None
        finally:
            store.close()


def test_requests_inside_the_interval_make_one_checkpoint(tmp_path):
    open_store(tmp_path / "state.db").close()
    checkpointer = WalCheckpointer(tmp_path / "state.db", synchronous="NORMAL", busy_timeout=1.0, interval=60.0)
    try:
        for _ in range(50):
            checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)
        for _ in range(50):
            checkpointer.request()
        time.sleep(0.2)
        assert checkpointer.checkpoints == 1
    finally:
        began = time.monotonic()
        checkpointer.close()
    # Closing does not sit out the interval.
    assert time.monotonic() - began < 30
    assert not checkpointer.alive


def test_a_failing_checkpoint_is_logged_and_the_next_request_tries_again(tmp_path, caplog):
    path = tmp_path / "state.db"
    open_store(path).close()
    failing = threading.Event()

    class Connection(sqlite3.Connection):
        def execute(self, sql, *args):
            if failing.is_set() and "wal_checkpoint" in sql:
                raise sqlite3.OperationalError("disk I/O error")
            return super().execute(sql, *args)

    caplog.set_level(logging.WARNING, logger="sessionstate")
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=0.1, interval=0.0,
                                   connect=lambda *a, **k: sqlite3.connect(*a, factory=Connection, **k))
    try:
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)  # connected, and a checkpoint went through
        failing.set()
        checkpointer.request()
        wait_until(lambda: sum("background WAL checkpoint failed" in r.getMessage() for r in caplog.records) >= 1)
        checkpointer.request()
        wait_until(lambda: sum("background WAL checkpoint failed" in r.getMessage() for r in caplog.records) >= 2)
        assert checkpointer.alive
        assert checkpointer.checkpoints == 1
    finally:
        checkpointer.close()


def test_a_thread_that_cannot_connect_says_so_and_closes(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sessionstate")
    checkpointer = WalCheckpointer(tmp_path / "no" / "such" / "dir.db", synchronous="NORMAL", busy_timeout=0.1)
    wait_until(lambda: not checkpointer.alive)
    assert any("no background WAL checkpoints" in r.getMessage() for r in caplog.records)
    checkpointer.request()  # nobody listens: harmless
    checkpointer.close()


def test_the_stores_own_checkpoint_copies_everything_and_refuses_unknown_modes(store):
    append(store, 5)
    busy, frames, copied = store.checkpoint()
    assert busy == 0 and frames > 0 and copied == frames
    assert store.checkpoint("TRUNCATE") == (0, 0, 0)  # the WAL emptied to nothing
    with pytest.raises(ValueError):
        store.checkpoint("PASSIVE); DROP TABLE sessions; --")
    store.close()
    with pytest.raises(StorageUnavailable):
        store.checkpoint()

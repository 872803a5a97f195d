"""The SQLite store's WAL checkpoints run on a thread of their own (store/sqlite_checkpoint.py):
the commits reach the database file without a commit copying them, the thread ends with the
store, and a checkpoint that fails is logged and asked for again."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from sessionstate import StorageUnavailable
from sessionstate.statemachine import NOTIFYING_KINDS
from sessionstate.store import SessionRecord, SqliteStore
from sessionstate.store import sqlite_checkpoint
from sessionstate.store.sqlite_checkpoint import BACKSTOP_PAGES, DEFAULT_AUTOCHECKPOINT_PAGES, RESTART_FRAMES, SETTLED_FRAMES, SETTLING_PASSES, THREAD_NAME, WRITE_TURN_POLLS, WalCheckpointer, wal_reset_fixed

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
    # The writer's own autocheckpoint: off where every checkpoint must hold the write lock
    # (it would checkpoint without it), else only a backstop far above what ten commits write.
    assert store.checkpointer is not None and store.checkpointer.alive
    assert store.pragma("wal_autocheckpoint") == (0 if store.checkpointer.guard else BACKSTOP_PAGES)
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
        failed = [r.getMessage() for r in caplog.records if "background WAL checkpoint failed" in r.getMessage()]
        assert failed[0] == f"{path}: background WAL checkpoint failed (disk I/O error)"
    finally:
        checkpointer.close()


def test_a_thread_that_cannot_connect_says_so_and_closes(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sessionstate")
    path = tmp_path / "no" / "such" / "dir.db"
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=0.1)
    wait_until(lambda: not checkpointer.alive)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: no background WAL checkpoints (unable to open database file); commits checkpoint by themselves"
    ]
    checkpointer.request()  # nobody listens: harmless
    checkpointer.close()


def test_a_thread_whose_connection_refuses_its_durability_level_says_so_and_closes(tmp_path, caplog):
    path = tmp_path / "state.db"
    open_store(path).close()
    connections: list[sqlite3.Connection] = []

    class Connection(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql.startswith("PRAGMA synchronous"):
                raise sqlite3.OperationalError("disk I/O error")
            return super().execute(sql, *args)

    def connect(*args, **kwargs):
        connections.append(sqlite3.connect(*args, factory=Connection, **kwargs))
        return connections[-1]

    caplog.set_level(logging.WARNING, logger="sessionstate")
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=0.1, connect=connect)
    wait_until(lambda: not checkpointer.alive)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: no background WAL checkpoints (disk I/O error); commits checkpoint by themselves"
    ]
    with pytest.raises(sqlite3.ProgrammingError):  # its connection was closed
        connections[0].total_changes
    checkpointer.close()


def test_the_stores_thread_syncs_at_the_stores_level_and_holds_its_write_turn(tmp_path):
    store = SqliteStore(f"sqlite:///{tmp_path / 'state.db'}", notifying_kinds=NOTIFYING_KINDS, synchronous="FULL")
    try:
        assert store.checkpointer is not None
        assert store.checkpointer.synchronous == "FULL"
        assert store.checkpointer.write_turn is store.lock
    finally:
        store.close()


def test_the_stores_own_checkpoint_copies_everything_and_refuses_unknown_modes(store):
    append(store, 5)
    busy, frames, copied = store.checkpoint()
    assert busy == 0 and frames > 0 and copied == frames
    assert store.checkpoint("TRUNCATE") == (0, 0, 0)  # the WAL emptied to nothing
    with pytest.raises(ValueError, match=r"checkpoint mode must be one of \('PASSIVE', 'FULL', 'RESTART', 'TRUNCATE'\)"):
        store.checkpoint("PASSIVE); DROP TABLE sessions; --")
    store.close()
    with pytest.raises(StorageUnavailable):
        store.checkpoint()


class RecordedTurn:
    """A write turn that remembers whether it is held and how often it was asked for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held = False
        self.asked = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.asked += 1
        taken = self._lock.acquire(blocking, timeout)
        if taken:
            self.held = True
        return taken

    def release(self) -> None:
        self.held = False
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def filler(path) -> sqlite3.Connection:
    """A connection that writes pages into the WAL and never checkpoints (its autocheckpoint
    off); open, it also keeps SQLite from removing the WAL when the others close."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA wal_autocheckpoint = 0")
    db.execute("CREATE TABLE IF NOT EXISTS filler (body BLOB)")
    return db


def long_wal(db: sqlite3.Connection, pages: int) -> None:
    """At least ``pages`` more frames in the WAL, in one commit."""
    db.execute("BEGIN")
    db.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * pages)
    db.execute("COMMIT")


def wal_frames(path) -> int:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        return int(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        db.close()


class FetchedRows:
    """A checkpoint's rows, read before the test's writer commits after it."""

    def __init__(self, rows):
        self.rows = rows

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return self.rows


@pytest.mark.parametrize("arriving, unlocked", [
    ([300, 50], 3),  # the third pass finds 50 new frames: settled, the next one takes the turn
    ([300, 300, 300, 300], 1 + SETTLING_PASSES),  # never settles: the turn after the last pass allowed
])
def test_a_long_wal_under_steady_commits_is_copied_to_its_end_under_the_write_turn(tmp_path, arriving, unlocked):
    """Commits arrive during every pass made without the write turn (a second connection's
    transaction, begun before the pass, commits after it); the passes go on while they find fewer new frames, the last one holds the
    turn, and the next commit starts the WAL over."""
    path = tmp_path / "state.db"
    open_store(path).close()
    writer = filler(path)
    long_wal(writer, RESTART_FRAMES + 200)
    turn = RecordedTurn()
    passes: list[tuple[bool, int]] = []
    arriving = list(arriving)  # frames committed during each pass made without the turn

    class Connection(sqlite3.Connection):
        def execute(self, sql, *args):
            if "wal_checkpoint" not in sql:
                return super().execute(sql, *args)
            held = turn.held
            during = not held and arriving
            if during:  # a commit under way while the pass runs: its snapshot taken before
                writer.execute("BEGIN")
                writer.execute("SELECT count(*) FROM filler").fetchall()
            rows = super().execute(sql, *args).fetchall()
            passes.append((held, rows[0][1]))
            if during:
                writer.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * arriving.pop(0))
                writer.execute("COMMIT")
            return FetchedRows(rows)

    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=1.0, interval=60.0, write_turn=turn,
                                   connect=lambda *a, **k: sqlite3.connect(*a, factory=Connection, **k), guard=False)
    try:
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)
    finally:
        checkpointer.close()
    assert [held for held, _ in passes] == [False] * unlocked + [True], passes
    frames = [f for _, f in passes]
    assert all(later > earlier for earlier, later in zip(frames, frames[1:unlocked])), passes  # no restart
    settled = frames[unlocked - 1] - frames[unlocked - 2] <= SETTLED_FRAMES
    assert settled == (unlocked <= SETTLING_PASSES), passes
    long_wal(writer, 1)  # the next commit starts the WAL over: it holds that commit's frames only
    assert wal_frames(path) < 10
    writer.close()


def test_a_short_wal_takes_no_write_turn(tmp_path):
    path = tmp_path / "state.db"
    open_store(path).close()
    writer = filler(path)
    long_wal(writer, 10)
    turn = RecordedTurn()
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=1.0, interval=60.0, write_turn=turn,
                                   guard=False)
    try:
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)
    finally:
        checkpointer.close()
        writer.close()
    assert turn.asked == 0


@pytest.fixture
def long_wal_file(tmp_path):
    """A database whose WAL is long enough that a checkpoint round asks for the write turn."""
    path = tmp_path / "state.db"
    open_store(path).close()
    writer = filler(path)
    long_wal(writer, RESTART_FRAMES + 10)
    yield path
    writer.close()


def started(path, turn: RecordedTurn, guard: bool = False) -> WalCheckpointer:
    """A checkpointer asked for one round (its next round an hour away)."""
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=1.0, interval=3600.0, write_turn=turn,
                                   guard=guard)
    checkpointer.request()
    return checkpointer


def test_a_held_write_turn_is_waited_for_a_while_then_left(long_wal_file):
    """A long transaction keeps the turn: the thread polls for it, gives up, and the round
    ends; the WAL is copied as far as the passes got."""
    turn = RecordedTurn()
    with turn:
        checkpointer = started(long_wal_file, turn)
        try:
            wait_until(lambda: checkpointer.checkpoints == 1)
            assert turn.asked == 1 + WRITE_TURN_POLLS  # the test's own acquire, then the polls
        finally:
            checkpointer.close()


def test_closing_while_holding_the_write_turn_does_not_wait_for_the_thread_to_get_it(long_wal_file):
    """Gateway.close closes the store holding its lock: a thread polling for that lock must
    see the store closing and stop, not wait for the lock."""
    turn = RecordedTurn()
    with turn:
        checkpointer = started(long_wal_file, turn)
        wait_until(lambda: turn.asked >= 2)  # polling for the turn this test holds
        began = time.monotonic()
        checkpointer.close()
        assert time.monotonic() - began < 5
    assert not checkpointer.alive
    assert turn.asked < 1 + WRITE_TURN_POLLS


def test_the_thread_is_named_and_checkpoints_at_the_stores_durability(tmp_path):
    """The thread's name is the one docs/operations.md gives; its connection syncs at the
    store's own level (a checkpoint's syncs are the WAL's durability at NORMAL)."""
    path = tmp_path / "state.db"
    open_store(path).close()
    connections: list[sqlite3.Connection] = []

    def connect(*args, **kwargs):
        connections.append(sqlite3.connect(*args, **{"check_same_thread": False, **kwargs}))
        return connections[-1]

    before = set(threading.enumerate())
    checkpointer = WalCheckpointer(path, synchronous="FULL", busy_timeout=1.0, interval=3600.0, connect=connect)
    try:
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)
        [thread] = set(threading.enumerate()) - before
        assert thread.name == THREAD_NAME == "sessionstate-wal-checkpoint"
        assert thread.daemon  # a store never closed does not keep the process alive
        assert connections[0].execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        checkpointer.close()


def test_every_round_is_counted(tmp_path):
    path = tmp_path / "state.db"
    open_store(path).close()
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=1.0, interval=0.0)
    try:
        for rounds in (1, 2, 3):
            checkpointer.request()
            wait_until(lambda: checkpointer.checkpoints == rounds)
    finally:
        checkpointer.close()


def test_without_a_write_turn_a_long_wal_gets_its_passes_alone(long_wal_file):
    """A checkpointer given no write turn (nothing to hold commits back) runs its passes and
    takes no last one; the round ends and the thread goes on."""
    checkpointer = WalCheckpointer(long_wal_file, synchronous="NORMAL", busy_timeout=1.0, interval=0.0, guard=False)
    try:
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 2)
        assert checkpointer.alive
    finally:
        checkpointer.close()


# -- SQLite's WAL-reset race (https://sqlite.org/wal.html#walresetbug) ------------------------
# A library with the race can lose committed transactions when a checkpoint runs while a writer
# of another connection begins the WAL anew. Where it is open, no checkpoint of the store's may
# run without the database's write lock.


def write_lock_held(path) -> bool:
    """Whether another connection holds the database's write lock right now."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert exc.sqlite_errorcode == 5, exc  # SQLITE_BUSY
        return True
    else:
        probe.execute("ROLLBACK")
        return False
    finally:
        probe.close()


@pytest.mark.parametrize("version, fixed", [
    ((3, 7, 0), False), ((3, 40, 1), False), ((3, 44, 5), False), ((3, 44, 6), True), ((3, 45, 0), False),
    ((3, 50, 6), False), ((3, 50, 7), True), ((3, 51, 2), False), ((3, 51, 3), True), ((3, 52, 0), True),
    ((3, 54, 1), True), ((4, 0, 0), True),
])
def test_the_releases_with_the_wal_reset_race_fixed(version, fixed):
    assert wal_reset_fixed(version) is fixed


@pytest.mark.parametrize("guard", [True, False])
def test_a_guarded_thread_checkpoints_only_holding_the_write_lock(tmp_path, guard):
    """Each of a guarded thread's passes finds the write lock held (by its own second
    connection); an unguarded thread's do not, which is what lets a writer begin the WAL anew
    under a checkpoint."""
    path = tmp_path / "state.db"
    open_store(path).close()
    writer = filler(path)
    long_wal(writer, RESTART_FRAMES + 10)
    held: list[bool] = []

    class Connection(sqlite3.Connection):
        def execute(self, sql, *args):
            if "wal_checkpoint" in sql:
                held.append(write_lock_held(path))
            return super().execute(sql, *args)

    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=1.0, interval=0.0, write_turn=RecordedTurn(),
                                   connect=lambda *a, **k: sqlite3.connect(*a, factory=Connection, **k), guard=guard)
    try:
        for rounds in (1, 2):
            long_wal(writer, 20)
            checkpointer.request()
            wait_until(lambda: checkpointer.checkpoints == rounds)
    finally:
        checkpointer.close()
        writer.close()
    assert held and all(h == guard for h in held), held
    assert wal_frames(path) == 0 or not guard  # the guarded passes copied everything there was


def test_a_guarded_round_that_finds_the_write_lock_taken_leaves_it_to_the_next_request(tmp_path, caplog):
    """Another process's transaction keeps the write lock: the round waits a moment, gives up
    without a warning, and the next request checkpoints."""
    path = tmp_path / "state.db"
    open_store(path).close()
    writer = filler(path)
    long_wal(writer, 10)
    caplog.set_level(logging.WARNING, logger="sessionstate")
    checkpointer = WalCheckpointer(path, synchronous="NORMAL", busy_timeout=1.0, interval=0.0, guard=True)
    try:
        checkpointer.started.wait()
        writer.execute("BEGIN IMMEDIATE")
        checkpointer.request()
        time.sleep(0.5)  # several of its waits for the lock
        assert checkpointer.checkpoints == 0
        writer.execute("ROLLBACK")
        checkpointer.request()
        wait_until(lambda: checkpointer.checkpoints == 1)
    finally:
        checkpointer.close()
        writer.close()
    assert caplog.records == []
    assert wal_frames(path) == 0


@pytest.mark.parametrize("guard", [True, False])
def test_the_writers_autocheckpoint_is_off_where_checkpoints_must_hold_the_write_lock(tmp_path, monkeypatch, guard):
    monkeypatch.setattr(sqlite_checkpoint, "WAL_RESET_GUARD", guard)
    store = open_store(tmp_path / "state.db")
    try:
        assert store.checkpointer is not None and store.checkpointer.guard is guard
        assert store.pragma("wal_autocheckpoint") == (0 if guard else BACKSTOP_PAGES)
    finally:
        store.close()


def test_without_its_thread_a_store_leaves_checkpoints_to_sqlite(tmp_path, monkeypatch, caplog):
    """The thread could not connect: the commits checkpoint by themselves, at SQLite's own
    default, as its warning says."""
    path = tmp_path / "state.db"
    open_store(path).close()
    real_connect = sqlite3.connect

    def refusing(*args, **kwargs):  # the thread's connections only
        if threading.current_thread().name == THREAD_NAME:
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(*args, **kwargs)

    caplog.set_level(logging.WARNING, logger="sessionstate")
    monkeypatch.setattr(sqlite_checkpoint.sqlite3, "connect", refusing)
    try:
        store = SqliteStore(f"sqlite:///{path}", notifying_kinds=NOTIFYING_KINDS)
    finally:
        monkeypatch.setattr(sqlite_checkpoint.sqlite3, "connect", real_connect)
    try:
        assert store.checkpointer is not None and not store.checkpointer.connected
        assert store.pragma("wal_autocheckpoint") == DEFAULT_AUTOCHECKPOINT_PAGES
        assert any("no background WAL checkpoints" in r.getMessage() for r in caplog.records)
    finally:
        store.close()


@pytest.mark.parametrize("guard", [True, False])
def test_the_stores_own_passive_checkpoint_holds_the_write_lock_where_the_race_is_open(tmp_path, monkeypatch, guard):
    """``SqliteStore.checkpoint`` (after reclaiming pages) runs inside the thread's
    ``write_locked`` where the race is open, and the lock is held there; elsewhere not."""
    monkeypatch.setattr(sqlite_checkpoint, "WAL_RESET_GUARD", guard)
    store = open_store(tmp_path / "state.db")
    store.insert_session(SessionRecord(KEY, AGENT, "main", None, None, None, 1.0, 1.0))
    held: list[bool] = []
    try:
        append(store, 5)
        checkpointer = store.checkpointer
        assert checkpointer is not None
        real_write_locked = checkpointer.write_locked

        @contextlib.contextmanager
        def write_locked(*args, **kwargs):
            with real_write_locked(*args, **kwargs):
                if threading.current_thread().name != THREAD_NAME:  # the store's, not a round of the thread's
                    held.append(write_lock_held(store.path))
                yield

        monkeypatch.setattr(checkpointer, "write_locked", write_locked)
        busy, frames, copied = store.checkpoint()
        assert busy == 0 and copied == frames
    finally:
        store.close()
    assert held == ([True] if guard else [])


# Seconds of writing in the test below (the study in docs/operations.md, "WAL checkpoints",
# is the unguarded side: it corrupted the file in 30-60 s on SQLite 3.40.1).
RACE_SECONDS = float(os.environ.get("SESSIONSTATE_WAL_RACE_SECONDS", "10"))
RACE_WRITERS = 3


def write_beside_a_checkpointer(path: str, writer: int, seconds: float, guard: bool, results) -> None:
    """One process: small commits for ``seconds``, each numbered one past the newest row it
    reads, each asking its own ``WalCheckpointer`` for a round; the rows it was told committed
    go back through ``results`` (with the error that stopped it, if one did)."""
    acknowledged: list[tuple[int, int]] = []
    failure = None
    checkpointer = WalCheckpointer(Path(path), synchronous="NORMAL", busy_timeout=10.0, interval=0.0, guard=guard)
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        checkpointer.started.wait()
        db.execute(f"PRAGMA wal_autocheckpoint = {0 if guard else DEFAULT_AUTOCHECKPOINT_PAGES}")  # as the store sets it
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and failure is None:
            try:
                db.execute("BEGIN IMMEDIATE")
                (newest,) = db.execute("SELECT coalesce(max(seq), 0) FROM numbered").fetchone()
                db.execute("INSERT INTO numbered VALUES (?, ?, ?, randomblob(600))", (newest + 1, writer, len(acknowledged)))
                db.execute("COMMIT")
            except sqlite3.OperationalError:  # busy past the timeout: not acknowledged
                if db.in_transaction:
                    db.execute("ROLLBACK")
                continue
            except sqlite3.DatabaseError as exc:  # a duplicate number, a malformed file
                failure = str(exc)
                break
            acknowledged.append((newest + 1, len(acknowledged)))
            checkpointer.request()
    finally:
        checkpointer.close()
        db.close()
        results.put((writer, acknowledged, failure))


def test_processes_writing_beside_guarded_checkpointers_keep_every_acknowledged_row(tmp_path):
    """Several processes commit while each one's guarded thread checkpoints after every
    commit: every row a writer was told committed is in the file, under the number it was
    given, and the file is sound."""
    guard = True
    path = str(tmp_path / "race.db")
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE numbered (seq INTEGER PRIMARY KEY, writer INTEGER, nth INTEGER, body BLOB)")
    setup.close()
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    writers = [spawn.Process(target=write_beside_a_checkpointer, args=(path, w, RACE_SECONDS, guard, results))
               for w in range(RACE_WRITERS)]
    for process in writers:
        process.start()
    reports = [results.get(timeout=RACE_SECONDS + 120) for _ in writers]
    for process in writers:
        process.join(timeout=60)
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = {seq: (writer, nth) for seq, writer, nth in db.execute("SELECT seq, writer, nth FROM numbered")}
    finally:
        db.close()
    assert [failure for _, _, failure in reports] == [None] * RACE_WRITERS
    missing = [(writer, seq) for writer, acknowledged, _ in reports for seq, nth in acknowledged
               if rows.get(seq) != (writer, nth)]
    assert sum(len(acknowledged) for _, acknowledged, _ in reports) > 1_000  # the writers got going
    assert missing == []


def test_a_guarded_round_syncs_the_wal_before_it_takes_the_write_lock(tmp_path, monkeypatch):
    """Most of a pass's time is its sync of the WAL: done first, without the lock, it leaves
    the pass under the lock little to sync, so writers wait less; at synchronous=OFF nothing
    is synced."""
    path = tmp_path / "state.db"
    open_store(path).close()
    writer = filler(path)
    long_wal(writer, 50)
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), write_lock_held(path)))
        real_fsync(fd)

    monkeypatch.setattr(sqlite_checkpoint.os, "fsync", fsync)
    try:
        for level, expected in (("NORMAL", [(f"{path}-wal", False)]), ("OFF", [])):
            synced.clear()
            checkpointer = WalCheckpointer(path, synchronous=level, busy_timeout=1.0, interval=3600.0, guard=True)
            try:
                checkpointer.request()
                wait_until(lambda: checkpointer.checkpoints == 1)
            finally:
                checkpointer.close()
            assert synced == expected, level
            long_wal(writer, 50)
    finally:
        writer.close()

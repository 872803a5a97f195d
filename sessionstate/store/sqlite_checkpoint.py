"""WAL checkpoints on a thread of their own, so a commit never pays for one.

Left to itself, SQLite checkpoints inside the ``COMMIT`` that takes the WAL past
``wal_autocheckpoint`` pages: that commit copies the frames into the database file and, at
``synchronous=NORMAL``, waits for two fsyncs. Measured here (8 events per transaction) the
median commit took 72-75 µs and the mean 156-203 µs: one commit in a hundred, at about 4 ms,
was half of all commit time, and it fell on whichever caller committed then.

``WalCheckpointer`` runs a passive checkpoint on its own connection, in its own thread, at
most once per ``interval`` and only after a commit asked for one. A passive checkpoint never
takes the write lock, and ``sqlite3`` lets go of the interpreter while it copies and syncs,
so writers go on meanwhile. What it changes is who waits, not what is durable: the WAL is
still synced at each checkpoint, at the store's own ``synchronous`` level.

A passive checkpoint copies only the frames that were there when it began, and the WAL only
starts over (from its first frame) once it is copied to its end. Under commits without a
pause that never happens by itself: a long WAL (``RESTART_FRAMES``) gets a few more passes
while they find fewer new frames, then a last one holding the store's write turn, so no
commit of this process adds frames meanwhile; it has little left to copy, and the next commit
starts the WAL over. The writer's own autocheckpoint stays on as a backstop, at
``BACKSTOP_PAGES``, for what this thread cannot do: another process writing without a pause,
a thread that could not start.

**SQLite's WAL-reset race.** SQLite 3.7.0 to 3.51.2 (fixed in 3.51.3, and in 3.44.6 and 3.50.7)
can lose committed transactions when a checkpoint starts right after another one finished and,
while it starts, a writer begins the WAL anew (https://sqlite.org/wal.html#walresetbug). Passive
checkpoints in several processes, one after each burst of commits, are that race's best case.
On such a library (``WAL_RESET_GUARD``) every round is one passive pass made while the thread
holds the database's write lock through a second connection of its own (``BEGIN IMMEDIATE``)
and the store's write turn, so no writer of any process can begin the WAL anew meanwhile; the
store turns the writer's autocheckpoint off, since it would checkpoint without that lock. What
that costs is that writers wait for the pass; the thread syncs the WAL before it takes the lock,
so the pass has little of it left to sync.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("sessionstate")

# The writer's autocheckpoint (SQLite's default is 1,000 pages), a backstop: about 32 MB of
# WAL at 4 KB a page. Under steady commits one interval and one pass add about 3,500 frames
# here (a commit of one event writes 5-6 pages): at 4,000 the writer's backstop still fired
# now and then, a 15 ms commit; at 8,000 it does not (docs/performance-threads.md).
BACKSTOP_PAGES = 8_000
# SQLite's own autocheckpoint, left to the commits where the thread could not connect.
DEFAULT_AUTOCHECKPOINT_PAGES = 1_000
# At most one background checkpoint per interval: a checkpoint syncs the file, so one per
# commit would trade a write for a sync.
CHECKPOINT_INTERVAL_SECONDS = 0.05
# A guarded round holds writers back while it copies and syncs the file, a cost each round pays
# however little it copies: a tight loop of commits ran at 0.92 of the unguarded rate with
# rounds 50 ms apart and at parity with 0.1 s (docs/operations.md, "WAL checkpoints").
GUARDED_INTERVAL_SECONDS = 0.1
THREAD_NAME = "sessionstate-wal-checkpoint"
# A WAL this long is copied to its end holding the store's write turn (as SQLite's default
# autocheckpoint would, inside a commit), so that the next commit starts it over.
RESTART_FRAMES = 1_000
# Passes without the turn first, at most SETTLING_PASSES more, until one finds no more than
# SETTLED_FRAMES new: writers then wait for a short copy and one sync of the file.
SETTLING_PASSES = 3
SETTLED_FRAMES = 100
# How long the thread waits for the write turn: at most 10 polls of 10 ms (a long transaction
# goes first, and the next request tries again), and never once the store is closing.
WRITE_TURN_POLL_SECONDS = 0.01
WRITE_TURN_POLLS = 10
# How long a guarded round waits for the database's write lock (another process's commit goes
# first) before it leaves the round to the next request.
WRITE_LOCK_WAIT_SECONDS = 0.1
# The releases that fixed the WAL-reset race, per line of backports: a version at or above the
# first, or at or above another on its own minor line, is safe.
WAL_RESET_FIXED = ((3, 51, 3), (3, 50, 7), (3, 44, 6))
_SQLITE_BUSY = 5


def wal_reset_fixed(version: tuple[int, int, int]) -> bool:
    """Whether a SQLite library of ``version`` has the WAL-reset race fixed."""
    newest = WAL_RESET_FIXED[0]
    if version >= newest:
        return True
    return any(version[:2] == fixed[:2] and version >= fixed for fixed in WAL_RESET_FIXED[1:])


# The library this process runs: whether every checkpoint must hold the write lock.
WAL_RESET_GUARD = not wal_reset_fixed(sqlite3.sqlite_version_info)


class WalCheckpointer:
    """A thread checkpointing the WAL of the database at ``path`` after ``wanted`` is set.

    ``request`` is what a commit calls: setting an event already set is skipped, so a commit
    costs one attribute read while a checkpoint is pending."""

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str,
        busy_timeout: float,
        interval: float | None = None,
        write_turn: Any = None,
        connect: Callable[..., sqlite3.Connection] | None = None,
        guard: bool | None = None,
    ) -> None:
        self._path = path
        # Every pass holds the database's write lock (the WAL-reset race): by default where
        # this process's SQLite library has the race.
        self.guard = WAL_RESET_GUARD if guard is None else guard
        self._lock_db: sqlite3.Connection | None = None  # the connection holding it (guarded)
        self.started = threading.Event()  # set once the thread is connected, or could not be
        self.connected = False
        self.write_turn = write_turn  # the store's lock: held, no commit of this process runs
        self.synchronous = synchronous  # the level the thread's connection syncs at (the store's)
        self._connect = connect or sqlite3.connect
        self._busy_timeout = busy_timeout
        if interval is None:
            interval = GUARDED_INTERVAL_SECONDS if self.guard else CHECKPOINT_INTERVAL_SECONDS
        self._interval = interval
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self.checkpoints = 0  # passive checkpoints run, for tests and diagnostics
        # Held while this thread checkpoints; the store's own checkpoints take it too, so two
        # never run at once (the second would find the WAL busy and leave frames behind).
        self.turn = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def request(self) -> None:
        """Ask for a checkpoint soon (called after each outermost commit)."""
        if not self._wanted.is_set():
            self._wanted.set()

    def close(self) -> None:
        """Stop the thread and close its connection; returns once both are done (a
        checkpoint under way is finished first)."""
        self._stopping.set()
        self._wanted.set()
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        db: sqlite3.Connection | None = None
        lock_db: sqlite3.Connection | None = None
        try:
            db = self._connect(str(self._path), timeout=self._busy_timeout, isolation_level=None)
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
            if self.guard:
                # Used under ``turn`` by this thread and by the store's own checkpoints.
                lock_db = self._connect(str(self._path), timeout=WRITE_LOCK_WAIT_SECONDS, isolation_level=None,
                                        check_same_thread=False)
        except sqlite3.Error as exc:
            for opened in (db, lock_db):
                if opened is not None:
                    opened.close()
            log.warning("%s: no background WAL checkpoints (%s); commits checkpoint by themselves", self._path, exc)
            self.started.set()
            return
        self._lock_db = lock_db
        self.connected = True
        self.started.set()
        try:
            while True:
                self._wanted.wait()
                if self._stopping.is_set():
                    return
                self._wanted.clear()
                self._checkpoint(db)
                if self._stopping.wait(self._interval):
                    return
        finally:
            db.close()
            if lock_db is not None:
                with self.turn:
                    lock_db.close()

    @contextmanager
    def write_locked(self, wait_seconds: float = WRITE_LOCK_WAIT_SECONDS) -> Iterator[None]:
        """The database's write lock, held through the thread's second connection for the
        block (called holding ``turn``). Raises ``sqlite3.OperationalError`` (busy) when
        another connection keeps it past ``wait_seconds``."""
        lock_db = self._lock_db
        assert lock_db is not None, "only a guarded, connected checkpointer holds the write lock"
        lock_db.execute(f"PRAGMA busy_timeout = {int(wait_seconds * 1000)}")
        lock_db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            if lock_db.in_transaction:
                lock_db.execute("ROLLBACK")

    def _checkpoint(self, db: sqlite3.Connection) -> None:
        if self.guard:
            self._guarded_round(db)
            return
        try:
            with self.turn:
                frames = self._settle(db)
            # The write turn before this thread's own turn, in the order a store's checkpoint
            # takes them (its caller may hold the write turn), so neither waits for the other.
            if frames >= RESTART_FRAMES and self._take_write_turn():
                assert self.write_turn is not None  # taken
                try:
                    with self.turn:
                        _passive(db)
                finally:
                    self.write_turn.release()
        except sqlite3.Error as exc:
            # The next commit asks again; the writer's backstop bounds the WAL meanwhile.
            log.warning("%s: background WAL checkpoint failed (%s)", self._path, exc)
        else:
            self.checkpoints += 1

    def _guarded_round(self, db: sqlite3.Connection) -> None:
        """One pass holding the store's write turn and the database's write lock, so no
        writer begins the WAL anew while it copies; a turn or lock that stays taken leaves the
        round to the next request."""
        self._sync_wal_ahead()
        took_turn = self.write_turn is not None
        if took_turn and not self._take_write_turn():
            return
        try:
            with self.turn, self.write_locked():
                _passive(db)
        except sqlite3.OperationalError as exc:
            if int(getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF != _SQLITE_BUSY:  # any busy's primary code
                log.warning("%s: background WAL checkpoint failed (%s)", self._path, exc)
            return  # busy: another writer's turn; the next commit asks again
        except sqlite3.Error as exc:
            log.warning("%s: background WAL checkpoint failed (%s)", self._path, exc)
            return
        finally:
            if took_turn:
                assert self.write_turn is not None
                self.write_turn.release()
        self.checkpoints += 1

    def _sync_wal_ahead(self) -> None:
        """Sync the WAL file before the write lock is taken, so that the pass's own sync of it,
        under the lock, finds only what was committed meanwhile: most of what writers would
        wait for is the WAL's data reaching the disk. The WAL holds no SQLite lock (those are
        on the database and ``-shm`` files), so opening and closing it here releases none."""
        if self.synchronous == "OFF":
            return
        try:
            fd = os.open(f"{self._path}-wal", os.O_RDONLY)
        except OSError:
            return  # no WAL yet, or gone: the pass finds nothing to sync either
        try:
            os.fsync(fd)
        except OSError:
            pass  # the pass's own sync reports a failing disk
        finally:
            os.close(fd)

    def _settle(self, db: sqlite3.Connection) -> int:
        """Passes while they find fewer new frames; the WAL's frames at the last one's start,
        or 0 once it is short or started over.

        A pass copies the frames that were there when it began; commits meanwhile add more,
        and the WAL only starts over once it is copied to its end. So a long WAL gets more
        passes, and then (``_checkpoint``) a last one holding the store's write turn: no commit
        of this process runs meanwhile, it has little left to copy, and the next commit starts
        the WAL over."""
        frames = _passive(db)
        for _ in range(SETTLING_PASSES):
            if frames < RESTART_FRAMES:
                return 0
            later = _passive(db)
            if later < frames:  # started over meanwhile
                return 0
            frames, new = later, later - frames
            if new <= SETTLED_FRAMES:
                break
        return frames

    def _take_write_turn(self) -> bool:
        """The store's write turn, waiting at most 0.1 s (``WRITE_TURN_POLLS`` polls; a long
        transaction goes first; the next request tries again) and never once the store is
        closing (``close`` may be called holding that turn, and waits for this thread)."""
        turn = self.write_turn
        if turn is None:
            return False
        for _ in range(WRITE_TURN_POLLS):
            if self._stopping.is_set():
                return False
            if turn.acquire(timeout=WRITE_TURN_POLL_SECONDS):
                return True
        return False


def _passive(db: sqlite3.Connection) -> int:
    """A passive checkpoint; the frames the WAL held when it began, all of them copied now
    (-1 when another connection's checkpoint was under way)."""
    return int(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])

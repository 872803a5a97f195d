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
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("sessionstate")

# The writer's autocheckpoint (SQLite's default is 1,000 pages), a backstop: about 32 MB of
# WAL at 4 KB a page. Under steady commits one interval and one pass add about 3,500 frames
# here (a commit of one event writes 5-6 pages): at 4,000 the writer's backstop still fired
# now and then, a 15 ms commit; at 8,000 it does not (docs/performance-threads.md).
BACKSTOP_PAGES = 8_000
# At most one background checkpoint per interval: a checkpoint syncs the file, so one per
# commit would trade a write for a sync.
CHECKPOINT_INTERVAL_SECONDS = 0.05
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
        interval: float = CHECKPOINT_INTERVAL_SECONDS,
        write_turn: Any = None,
        connect: Callable[..., sqlite3.Connection] = sqlite3.connect,
    ) -> None:
        self._path = path
        self.write_turn = write_turn  # the store's lock: held, no commit of this process runs
        self.synchronous = synchronous  # the level the thread's connection syncs at (the store's)
        self._connect = connect
        self._busy_timeout = busy_timeout
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
        try:
            db = self._connect(str(self._path), timeout=self._busy_timeout, isolation_level=None)
            db.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            if db is not None:
                db.close()
            log.warning("%s: no background WAL checkpoints (%s); commits checkpoint by themselves", self._path, exc)
            return
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

    def _checkpoint(self, db: sqlite3.Connection) -> None:
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

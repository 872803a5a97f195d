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

The writer's own autocheckpoint stays on, raised to ``BACKSTOP_PAGES``: a passive checkpoint
copies only the frames that were there when it began, so under commits without a pause the
WAL is never found all copied and would not start over; the writer's checkpoint, run between
two of its own transactions, then copies the rest and bounds the file.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("sessionstate")

# The writer's autocheckpoint (SQLite's default is 1,000 pages): about 16 MB of WAL at 4 KB a
# page before a commit checkpoints by itself.
BACKSTOP_PAGES = 4_000
# At most one background checkpoint per interval: a checkpoint syncs the file, so one per
# commit would trade a write for a sync.
CHECKPOINT_INTERVAL_SECONDS = 0.05
THREAD_NAME = "sessionstate-wal-checkpoint"


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
        connect: Callable[..., sqlite3.Connection] = sqlite3.connect,
    ) -> None:
        self._path = path
        self._connect = connect
        self._synchronous = synchronous
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
        try:
            db = self._connect(str(self._path), timeout=self._busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            log.warning("%s: no background WAL checkpoints (%s); commits checkpoint by themselves", self._path, exc)
            return
        try:
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as exc:
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
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            # The next commit asks again; the writer's backstop bounds the WAL meanwhile.
            log.warning("%s: background WAL checkpoint failed (%s)", self._path, exc)
        else:
            self.checkpoints += 1

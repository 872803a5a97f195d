"""The change feed on SQLite (R22): ``PRAGMA data_version`` on a dedicated connection.

``data_version`` changes only when another connection commits to the file, and reading it
takes no lock, so ``wait`` is nearly free. ``take`` reads, on the store's connection and in
one snapshot, what changed above two watermarks: the log's sequence (SQLite has one writer,
so sequence order is commit order and a range of the primary key holds every newer event)
and the cursor change log's stamp.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from ..errors import InvalidArgument
from .failures import translated
from .records import ChangeSet
from .serving import SqlServingTable


@translated
class SqliteChangeFeed:
    longest_wait = 0.25  # the poll's idle interval (R22)

    def __init__(
        self, path: Path | None, serving: SqlServingTable, kinds: tuple[str, ...], *, busy_timeout: float
    ) -> None:
        if path is None:
            raise InvalidArgument("a change feed needs a database file (an in-memory database has one connection)")
        self.storage_error = serving.storage_error
        self._serving = serving
        self._kinds = kinds
        self._after_sequence, self._after_stamp = serving.watermarks()
        self._resync = False
        self._stopped = threading.Event()
        # Autocommit, so every PRAGMA read sees the newest commit; used by the pump's thread only.
        try:
            self._db = sqlite3.connect(str(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False)
            self._version = self._data_version()
        except sqlite3.Error as exc:
            raise self.storage_error(exc) from exc

    def _data_version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def wait(self, timeout: float) -> bool:
        if self._stopped.wait(timeout):
            return False
        version = self._data_version()
        if version == self._version:
            return False
        self._version = version
        return True

    def take(self) -> ChangeSet:
        serving = self._serving
        snap = serving.read_sweep(self._after_sequence, self._after_stamp, self._kinds)
        material = serving.notifying_events_after(self._after_sequence, snap.log_sequence, self._kinds)
        self._after_sequence, self._after_stamp = snap.log_sequence, snap.change_stamp
        resync, self._resync = self._resync or snap.gap, False
        return ChangeSet(snap.frozen, snap.changed_watchers, material, resync)

    def sync(self) -> None:
        """Nothing to wait for: ``take`` reads the file as it stands."""

    def lost(self) -> None:
        self._resync = True

    def interrupt(self) -> None:
        self._stopped.set()

    def close(self) -> None:
        self._stopped.set()
        self._db.close()

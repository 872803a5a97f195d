"""The change pump for SQLite (spec R22): one thread, one long-lived dedicated connection.

``PRAGMA data_version`` on a connection changes only when another connection commits to the
file, and reading it takes no lock, so polling it is nearly free: the pump reads it every
50 ms after a change and doubles the interval to 250 ms while nothing changes. On a change it
takes the gateway lock and runs the incremental sweep (``Serving.sweep``); every 5 s it
refreshes this server's heartbeat and releases servers whose lease ran out.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Protocol

from .serving import HEARTBEAT_SECONDS, Serving
from .store import Store
from .store.sqlite import BUSY_TIMEOUT_MS


class Pumped(Protocol):
    """What the pump needs of the gateway it serves (``Gateway`` satisfies it)."""

    store: Store
    closed: bool

    @property
    def serving(self) -> Serving: ...

log = logging.getLogger("sessionstate")

MIN_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 0.25


class ChangePump:
    def __init__(
        self,
        gateway: Pumped,
        path: Path,
        *,
        min_interval: float = MIN_POLL_SECONDS,
        max_interval: float = MAX_POLL_SECONDS,
    ) -> None:
        self._gateway = gateway
        self._min = min_interval
        self._max = max_interval
        # Autocommit, so every PRAGMA read sees the newest commit.
        self._db = sqlite3.connect(
            str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        self._stop = threading.Event()
        self._version = self.data_version()
        self.polls = 0
        self.changes = 0
        self._thread = threading.Thread(target=self._run, name="sessionstate-pump", daemon=True)

    def data_version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread; call without holding the gateway lock."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._db.close()

    def poll_once(self) -> bool:
        """One poll: sweep if another connection committed since the last one."""
        self.polls += 1
        version = self.data_version()
        if version == self._version:
            return False
        self._version = version
        self.changes += 1
        with self._gateway.store.lock:
            if not self._gateway.closed:
                self._gateway.serving.sweep()
        return True

    def _run(self) -> None:
        interval = self._min
        next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        while not self._stop.wait(interval):
            try:
                interval = self._min if self.poll_once() else min(interval * 2, self._max)
                if time.monotonic() >= next_heartbeat:
                    next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
                    with self._gateway.store.lock:
                        if not self._gateway.closed:
                            self._gateway.serving.heartbeat()
            except Exception:  # a failed sweep must not end the pump; the next one retries
                log.exception("change pump sweep failed")
                interval = self._max


def start_pump(gateway: Pumped) -> ChangePump:
    """Register ``gateway`` as a server and start its pump (file databases only)."""
    from .errors import InvalidArgument

    path = getattr(gateway.store, "path", None)  # the SQLite backend's file
    if path is None:
        raise InvalidArgument("the change pump needs a database file (an in-memory database has one connection)")
    with gateway.store.lock:
        gateway.serving.register()
    pump = ChangePump(gateway, path)
    pump.start()
    return pump

"""The change pump (spec R22): one thread per server, waiting on the store's change feed.

The feed is the backend's (``Store.open_change_feed``): on SQLite a poll of ``PRAGMA
data_version``, on PostgreSQL a listening connection. The pump asks it every 50 ms after a
change, doubling the interval while nothing changes up to the feed's ``longest_wait``
(SQLite: 250 ms; PostgreSQL: the 5 s heartbeat, as a notification ends its wait at once, so
the interval only bounds how long it blocks), and no wait runs past the next heartbeat. On a
change it takes the gateway lock and sweeps (``Cluster.sweep``); every 5 s it refreshes this
server's heartbeat and releases servers whose lease ran out.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from .cluster import HEARTBEAT_SECONDS, Cluster
from ..store import ChangeFeed, Store


class Pumped(Protocol):
    """What the pump needs of the gateway it serves (the gateway hands it a ``_Pumped`` view)."""

    store: Store

    @property
    def closed(self) -> bool: ...

    @property
    def cluster(self) -> Cluster: ...

log = logging.getLogger("sessionstate")

MIN_POLL_SECONDS = 0.05
# After a failed sweep or heartbeat: the pause before the next step (well inside the 1 s in
# which a feed is live again after a server restart).
RETRY_SECONDS = 0.25


class ChangePump:
    def __init__(
        self,
        gateway: Pumped,
        feed: ChangeFeed,
        *,
        min_interval: float = MIN_POLL_SECONDS,
        max_interval: float | None = None,
    ) -> None:
        self._gateway = gateway
        self._feed = feed
        self._min = min_interval
        self._max = feed.longest_wait if max_interval is None else max_interval
        self._stop = threading.Event()
        self.polls = 0
        self.changes = 0
        self._thread = threading.Thread(target=self._run, name="sessionstate-pump", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and join the thread (within one interval); call without the gateway lock."""
        self._stop.set()
        self._feed.interrupt()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def poll_once(self, timeout: float = 0.0) -> bool:
        """One wait on the feed (at most ``timeout``); sweep if it reports a change."""
        self.polls += 1
        if not self._feed.wait(timeout):
            return False
        self.changes += 1
        with self._gateway.store.lock:
            if not self._gateway.closed:
                self._gateway.cluster.sweep(sync=False)
        return True

    def _run(self) -> None:
        interval = self._min
        next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        failures = 0  # failed steps in a row
        while not self._stop.is_set():
            try:
                # No wait outlasts the heartbeat that falls due during it (a PostgreSQL feed,
                # woken by the server, could otherwise sleep past the lease).
                wait = min(interval, max(0.0, next_heartbeat - time.monotonic()))
                interval = self._min if self.poll_once(wait) else min(interval * 2, self._max)
                if time.monotonic() >= next_heartbeat:
                    next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
                    with self._gateway.store.lock:
                        if not self._gateway.closed:
                            self._gateway.cluster.heartbeat()
                if failures:
                    log.warning("change pump: sweeping again after %d failed attempt(s)", failures)
                    failures = 0
            except Exception:  # a failed sweep must not end the pump; the next step retries
                # The failed sweep told the feed it lost track, so the next step resynchronises
                # at once; the retry is soon (a server back after a restart is served within
                # a second), and only the first failure of a run is logged in full.
                if not failures:
                    log.exception("change pump sweep failed; retrying every %.2f s", RETRY_SECONDS)
                failures += 1
                with self._gateway.store.lock:  # a failed heartbeat too: the next sweep is in full
                    self._feed.lost()
                self._stop.wait(RETRY_SECONDS)
                interval = self._min


def start_pump(gateway: Pumped) -> ChangePump:
    """Register ``gateway`` as a server (opening its change feed) and start its pump."""
    with gateway.store.lock:
        gateway.cluster.register()
        feed = gateway.cluster.feed
    assert feed is not None
    pump = ChangePump(gateway, feed)
    pump.start()
    return pump

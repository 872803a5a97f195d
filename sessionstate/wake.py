"""Heartbeat wakes for main-style watchers, coalesced per watcher (R12)."""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("sessionstate")

WAKE_COALESCE_SECONDS = 20.0


class WakeCoalescer:
    def __init__(self, on_wake: Callable[[str, str], None] | None, clock: Callable[[], float]) -> None:
        self._on_wake = on_wake
        self._clock = clock
        self._last: dict[str, float] = {}
        self.sent = 0
        self.dropped = 0

    def wake(self, watcher: str, reason: str) -> bool:
        """Call ``on_wake`` unless this watcher was woken less than 20 s ago."""
        if self._on_wake is None:
            return False
        now = self._clock()
        last = self._last.get(watcher)
        if last is not None and now - last < WAKE_COALESCE_SECONDS:
            self.dropped += 1
            return False
        self._last[watcher] = now
        self.sent += 1
        try:
            self._on_wake(watcher, reason)
        except Exception:  # a broken hook must not fail the turn that recorded the event
            log.exception("on_wake(%r) failed", watcher)
        return True

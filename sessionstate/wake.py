"""Heartbeat wakes for main-style watchers, coalesced per watcher (R12, R23)."""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("sessionstate")

WAKE_COALESCE_SECONDS = 20.0

# (watcher, now, window) -> (won, the slot's time): the durable slot shared by all processes.
WakeSlot = Callable[[str, float, float], tuple[bool, float]]


class WakeCoalescer:
    def __init__(
        self,
        on_wake: Callable[[str, str], None] | None,
        clock: Callable[[], float],
        take_slot: WakeSlot | None = None,
    ) -> None:
        self._on_wake = on_wake
        self._clock = clock
        self.take_slot = take_slot
        self._last: dict[str, float] = {}
        self.sent = 0
        self.dropped = 0

    @property
    def enabled(self) -> bool:
        return self._on_wake is not None

    def last(self, watcher: str) -> float | None:
        """When this process last saw the watcher woken (by itself or, through the slot, by
        another process)."""
        return self._last.get(watcher)

    def wake(self, watcher: str, reason: str) -> bool:
        """Call ``on_wake`` unless this watcher was woken less than 20 s ago in any process."""
        if self._on_wake is None:
            return False
        now = self._clock()
        last = self._last.get(watcher)
        if last is not None and now - last < WAKE_COALESCE_SECONDS:
            self.dropped += 1
            return False
        if self.take_slot is not None:  # R23: the durable slot decides across processes
            won, slot_time = self.take_slot(watcher, now, WAKE_COALESCE_SECONDS)
            if not won:
                self._last[watcher] = slot_time
                self.dropped += 1
                return False
        self._last[watcher] = now
        self.sent += 1
        try:
            self._on_wake(watcher, reason)
        except Exception:  # a broken hook must not fail the turn that recorded the event
            log.exception("on_wake(%r) failed", watcher)
        return True

"""Retention that applies itself (spec R30): R13's prune, run by the gateway on its own.

``AutoPrune`` runs the protocol's own ``prune`` (the same chunks, the same write-back of R7, the
same expiry) once when the gateway opens, before the startup sweep, and then from one timer
thread whenever ``interval`` seconds of the gateway's clock have passed since the last run
began. Recording never looks at it: the thread sleeps on a condition until the due time by the
gateway's clock, re-reading that clock at least every ``max_sleep`` seconds (a fake clock in a
test, a wall clock that jumps), so no event pays for the schedule. ``poke`` makes it re-read
the clock at once (a test that moved its fake clock).

A gateway on a database it cannot write never prunes (``store.read_only``, checked at every
run). Several processes on one database each keep their own schedule: there is no claim,
because pruning is idempotent (a run with nothing past the window or over the row cap deletes
nothing) and R13's chunks lock the heads they touch (spec section 16), so runs that overlap
delete each event once, each under the watermark its chunk wrote.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ..shared.clock_timer import ClockTimer

log = logging.getLogger("sessionstate")

AUTO_PRUNE_INTERVAL = 3600.0  # R30: at most once an hour of the gateway's clock
MAX_SLEEP_SECONDS = 60.0  # the longest real-time wait before the clock is read again


class AutoPrune:
    """R30's schedule for one gateway: ``run_due`` prunes when due; ``start`` runs the timer."""

    def __init__(
        self,
        prune: Callable[[], dict[str, int]],
        clock: Callable[[], float],
        *,
        read_only: Callable[[], bool],
        interval: float = AUTO_PRUNE_INTERVAL,
        max_sleep: float = MAX_SLEEP_SECONDS,
    ) -> None:
        self._prune = prune  # the protocol's own prune (R13), which takes the gateway's lock
        self._read_only = read_only
        self._clock = clock
        self.interval = interval
        self.next_due: float | None = None  # None: due now (the run at open)
        self.runs = 0
        self.failures = 0
        self.last: dict[str, int] | None = None  # the counts of the last run that succeeded
        self._deciding = threading.Lock()
        self._timer = ClockTimer("sessionstate-prune", next_due=self._due, clock=clock, fire=self.run_due,
                                 max_sleep=max_sleep, retry=max_sleep)

    def run_due(self) -> dict[str, int] | None:
        """Prune if the schedule is due by the gateway's clock; the counts, else ``None``.

        A failed run is logged and counted, never raised (the open it runs in, or the timer,
        goes on); it is due again ``interval`` later, like a run that succeeded."""
        with self._deciding:  # one decision at a time: the timer and a direct call never both run
            now = self._clock()
            if self.next_due is not None and now < self.next_due:
                return None
            self.next_due = now + self.interval
        if self._read_only():
            return None
        try:
            counts = self._prune()
        except Exception:
            if self._read_only():  # the write was refused and the file found read-only: skipped
                return None
            self.failures += 1
            log.exception("automatic prune failed; it runs again in %.0f s of the gateway's clock", self.interval)
            return None
        self.runs += 1
        self.last = counts
        return counts

    def start(self) -> None:
        """Start the timer thread (after the run at open)."""
        self._timer.start()

    def poke(self) -> None:
        """Read the gateway's clock again now (its due time may have come)."""
        self._timer.poke()

    def stop(self) -> None:
        """Stop and join the timer; call without the gateway's lock (a run takes it)."""
        self._timer.stop()

    def _due(self) -> float:
        due = self.next_due
        return self._clock() if due is None else due

"""One background thread that runs a task when it falls due by the gateway's clock.

The owed-wake timer (R12, LIV1) and the automatic prune (R30) both need it: the due time is
read from the gateway's clock (a fake one in tests, a wall clock that may jump), never from
the thread's own sleep, so the thread waits on a condition for at most ``max_sleep`` real
seconds before it reads the clock again, and ``poke`` makes it read it at once. No due time
(``next_due`` returns ``None``) means nothing is planned: the thread waits until poked.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("sessionstate")


class ClockTimer:
    """Calls ``fire`` from its own thread whenever ``next_due()`` has come by ``clock()``.

    A ``fire`` that raises is logged and tried again ``retry`` real seconds later; the timer
    stops only on ``stop``.
    """

    def __init__(
        self,
        name: str,
        *,
        next_due: Callable[[], float | None],
        clock: Callable[[], float],
        fire: Callable[[], object],
        max_sleep: float,
        retry: float,
    ) -> None:
        self._next_due = next_due
        self._clock = clock
        self._fire = fire
        self._max_sleep = max_sleep
        self._retry = retry
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Read the due time and the clock again now (something was planned, or the clock moved)."""
        with self._cond:
            self._cond.notify()

    def stop(self) -> None:
        """Stop and join; call without the locks ``fire`` takes."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopped

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                due = self._next_due()
                if due is None:
                    self._cond.wait()
                    continue
                delay = due - self._clock()
                if delay > 0:
                    self._cond.wait(min(delay, self._max_sleep))
                    continue
            try:
                self._fire()
            except Exception:  # e.g. the gateway closed under it, or storage failed: retried
                log.exception("%s failed; tried again in %.1f s", self._thread.name, self._retry)
                with self._cond:
                    if not self._stopped:
                        self._cond.wait(self._retry)

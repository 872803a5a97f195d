"""Background execution of runner turns: threads, real timeouts, cancellation.

Each job runs in its own daemon thread with a ``RunContext``. A timeout is a timer that
cancels the context and calls ``on_timeout`` at once, whether or not the runner notices:
the terminal record does not wait for a misbehaving runner. ``wait_idle`` joins every job
(tests and shutdown use it).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .base import RunContext

log = logging.getLogger("sessionstate.runner")

Job = Callable[[RunContext], None]


class RunExecutor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._contexts: dict[str, RunContext] = {}
        self._timers: dict[str, threading.Timer] = {}

    def start(
        self,
        job_id: str,
        job: Job,
        *,
        timeout: float | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> RunContext:
        ctx = RunContext()

        def body() -> None:
            try:
                job(ctx)
            except Exception:  # a job reports its own failures; this is the last resort
                log.exception("background job %s failed", job_id)
            finally:
                with self._lock:
                    self._threads.pop(job_id, None)
                    self._contexts.pop(job_id, None)
                    timer = self._timers.pop(job_id, None)
                if timer is not None:
                    timer.cancel()

        thread = threading.Thread(target=body, name=f"sessionstate-{job_id}", daemon=True)
        with self._lock:
            self._threads[job_id] = thread
            self._contexts[job_id] = ctx
            if timeout:
                timer = threading.Timer(timeout, self._expire, args=(job_id, ctx, on_timeout))
                timer.daemon = True
                self._timers[job_id] = timer
                timer.start()
        thread.start()
        return ctx

    def _expire(self, job_id: str, ctx: RunContext, on_timeout: Callable[[], None] | None) -> None:
        ctx.cancel("timeout")
        if on_timeout is not None:
            try:
                on_timeout()
            except Exception:
                log.exception("timeout handler of %s failed", job_id)

    def context(self, job_id: str) -> RunContext | None:
        with self._lock:
            return self._contexts.get(job_id)

    def active(self) -> list[str]:
        with self._lock:
            return list(self._threads)

    def wait_for(self, job_id: str, timeout: float = 10.0) -> bool:
        """Join one job; ``True`` when it is not (or no longer) running."""
        with self._lock:
            thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Join every job (including jobs started while waiting); ``False`` on timeout."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads.values())
            if not threads:
                return True
            for thread in threads:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                thread.join(remaining)

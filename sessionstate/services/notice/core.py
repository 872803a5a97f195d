"""The notice service's state and its plumbing: the store, the clock, the in-memory queue, the
wake coalescer and its timer (R12), the claims of this process (section 6a), and session
resolution. Every other part of the service builds on this one.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence  # the ABCs: isinstance on typing's aliases is slow
from typing import Any, Callable, TypedDict, Unpack

from ...errors import InvalidArgument, UnknownSession
from ...shared.keys import SessionRef, check_key, resolve_agent_id
from ...shared.clock_timer import ClockTimer
from ...shared.timefmt import DAY_SECONDS
from ...store import Store
from ..cluster import SERVE_ALL
from ..locking import locked
from ..observing import Observers
from ..retention import AutoPrune
from ..trace import Tracer
from .queue import SystemEventQueue
from .wakes import DEFAULT_WAKE_WINDOW, WakeCoalescer, start_wake_timer

log = logging.getLogger("sessionstate")

OCCURRED_AT_WINDOW = DAY_SECONDS  # R16
APPEND_ATTEMPTS = 3  # a burst that rolled back whole (conflict, lost connection) runs again
RETRY_PAUSE_SECONDS = 0.05

Clock = Callable[[], float]
# (watcher, reason); what it returns is ignored. A coroutine function is refused here (it would
# never run): AsyncGateway.open takes one and relays it to its loop.
WakeHook = Callable[[str, str], object]

class ProtocolOptions(TypedDict, total=False):
    """The notice protocol's settings, written once: ``NoticeCore`` reads them and
    ``Gateway(store, ...)`` passes them on (``Unpack[ProtocolOptions]``)."""

    on_wake: WakeHook | None  # called at most once per wake window per watcher (R12)
    retention_days: float  # R13, 30 by default
    max_rows: int  # R13, 50 000 by default
    serve: Sequence[str]  # R19, every session (SERVE_ALL) by default
    wake_window: float  # R12, R23, DEFAULT_WAKE_WINDOW by default


class NoticeCore:
    """The notice service's state: what every part below reads and writes."""

    def __init__(self, store: Store, *, clock: Clock, **options: Unpack[ProtocolOptions]) -> None:
        if unknown := sorted(options.keys() - ProtocolOptions.__optional_keys__):
            raise TypeError(f"unexpected keyword arguments {unknown}")
        on_wake = options.get("on_wake")
        if on_wake is not None and (not callable(on_wake) or inspect.iscoroutinefunction(on_wake)):
            raise InvalidArgument("on_wake must be a plain function (a coroutine function: use AsyncGateway.open)")
        retention_days = options.get("retention_days", 30)
        max_rows = options.get("max_rows", 50_000)
        serve = options.get("serve", SERVE_ALL)
        wake_window = options.get("wake_window", DEFAULT_WAKE_WINDOW)
        if isinstance(retention_days, bool) or not isinstance(retention_days, (int, float)) or retention_days <= 0:
            raise InvalidArgument("retention_days must be a positive number")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
            raise InvalidArgument("max_rows must be a non-negative integer")
        self.store = store
        self.clock = clock
        self.retention_days = retention_days
        self.max_rows = max_rows
        self.queue = SystemEventQueue()
        self.wakes = WakeCoalescer(
            on_wake, clock, window=wake_window,
            holds_waking_after=self.queue.holds_waking_after, queue_mark=self.queue.mark,
        )
        self.wakes.start_timer = self._start_wake_timer  # R12: one timer, started by the first owed wake
        self.wakes.fired_hooks.append(self._trace_wake)  # the trace's, before any observer's
        self.observers = Observers(self.queue, self.wakes)  # services/observing.py
        self._wakes_stopped = False
        self.stats = {"append_failures": 0, "events_recorded": 0, "notices_enqueued": 0}
        self.serve = serve  # section 6a: which watchers this process serves (``cluster``, in release)
        self.tracer: Tracer | None = None  # the protocol trace (spec section 15), when on
        # R27, both on by default (see Gateway.open): log `created` for every new session;
        # announce it to the agent's main session.
        self.record_created = True
        self.notify_on_create = True
        self.auto_prune: AutoPrune | None = None  # R30: the schedule Gateway.open starts

    @locked
    def fire_due_wakes(self) -> int:
        """Fire the owed wakes that are due by the gateway's clock; returns how many fired.

        The wake timer calls this when the earliest owed wake falls due; a test with a fake
        clock moves the clock past the window's end and calls it to fire them at once."""
        return self.wakes.fire_due()

    def stop_wakes(self) -> None:
        """Stop the wake timer (closing; call without the lock: a firing round takes it)."""
        self._wakes_stopped = True
        self.wakes.start_timer = None
        timer = self.wakes.timer
        if timer is not None:
            timer.stop()

    def _start_wake_timer(self) -> ClockTimer:
        return start_wake_timer(self.wakes, self.clock, self._fire_from_timer)

    def _fire_from_timer(self) -> None:
        with self.store.lock:
            if not self._wakes_stopped:
                self.wakes.fire_due()

    def _trace_wake(self, watcher: str, at: float, due: float | None) -> None:
        if self.tracer is not None:
            self.tracer.wake(watcher, at, self.wakes.window, due)

    @locked
    def resolve(self, key: Any, agent_id: Any = None) -> SessionRef:
        """(key, agent id) of an existing session, or ``UnknownSession``."""
        check_key(key)
        agent = resolve_agent_id(key, agent_id)
        if agent is None:
            agents = self.store.agents_with_session_key(key)
            if len(agents) != 1:
                detail = "unknown" if not agents else f"ambiguous across agents {agents}; give agent_id"
                raise UnknownSession(f"session {key!r} is {detail}")
            agent = agents[0]
        elif self.store.get_session(key, agent) is None:
            raise UnknownSession(f"unknown session {key!r} (agent {agent!r})")
        return key, agent

    def resolve_any_agent(self, key: str) -> None:
        agent = resolve_agent_id(key, None)
        known = self.store.get_session(key, agent) is not None if agent else bool(self.store.agents_with_session_key(key))
        if not known:
            raise UnknownSession(f"unknown session {key!r}")

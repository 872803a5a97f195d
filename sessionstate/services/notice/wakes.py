"""Wakes for main-style watchers: at most one per window per watcher, and a suppressed wake
is owed, not dropped (R12, R23, LIV1).

``WakeCoalescer.wake`` is asked once per group of lines that entered a watcher's queue. Outside
the watcher's window it calls ``on_wake`` at once (after winning the durable slot shared by all
processes). Inside it, the watcher is *owed* one wake, due when the window ends: one entry in
a heap of due times. ``fire_due`` pops what is due by the gateway's clock and, for a watcher
whose queue here still holds a line that entered after this process's own last wake of it,
tries again (the same slot decides). One timer thread per gateway (``start_wake_timer``) calls ``fire_due``
when the heap's earliest entry falls due; it is started by the first owed wake and blocks
without a timeout while nothing is owed.
"""

from __future__ import annotations

import heapq
import logging
from typing import Callable

from ...shared.clock_timer import ClockTimer
from ...shared.keys import SessionRef

log = logging.getLogger("sessionstate")

DEFAULT_WAKE_WINDOW = 20.0
# The timer never sleeps longer than this while something is owed, so a clock that jumps (or
# a test's fake clock that is moved) is noticed within a second: LIV1's "at most 1 s late".
TIMER_MAX_SLEEP_SECONDS = 1.0
# A due wake whose slot could not be read (storage failure) is tried again this much later.
RETRY_SECONDS = 1.0

# (watcher, now, window) -> (won, the slot's time): the durable slot shared by all processes.
WakeSlot = Callable[[str, float, float], tuple[bool, float]]
# (watcher, mark) -> whether a waking line entered the watcher's queue after ``mark``.
HoldsWakingAfter = Callable[[str, int], bool]


def check_window(window: object) -> float:
    from ...errors import InvalidArgument

    if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window < float("inf"):
        raise InvalidArgument("wake_window must be a positive finite number of seconds")
    return float(window)


class WakeCoalescer:
    def __init__(
        self,
        on_wake: Callable[[str, str], object] | None,
        clock: Callable[[], float],
        take_slot: WakeSlot | None = None,
        *,
        window: float = DEFAULT_WAKE_WINDOW,
        holds_waking_after: HoldsWakingAfter | None = None,
        queue_mark: Callable[[], int] | None = None,
    ) -> None:
        self._on_wake = on_wake
        self._clock = clock
        self.take_slot = take_slot
        self.window = check_window(window)
        self._holds_waking_after = holds_waking_after
        self._queue_mark = queue_mark
        self._last: dict[str, float] = {}  # the last wake seen, by this process or the slot
        self._own_mark: dict[str, int] = {}  # the queue's entry mark at this process's own last wake
        self._owed: dict[str, tuple[float, str]] = {}  # watcher -> (due, reason)
        self._heap: list[tuple[float, str]] = []  # (due, watcher); stale entries skipped on pop
        self.timer: ClockTimer | None = None
        self.start_timer: Callable[[], ClockTimer] | None = None  # set by the owner (it holds the lock)
        # Called in order, the owner's first: (watcher, at, due) for each wake sent (the trace,
        # an observer; due is the owed wake's due time, None for a wake at once), and
        # (watcher, due) when a wake became owed (not an owed one moved: a retry or a lost
        # slot; an observer). services/observing.py adds and removes the observers' hooks.
        self.fired_hooks: list[Callable[[str, float, float | None], None]] = []
        self.owed_hooks: list[Callable[[str, float], None]] = []
        self.sent = 0
        self.dropped = 0  # asked inside the window (now owed)
        self.owed_cancelled = 0  # fell due with nothing new held: the watcher drained meanwhile

    @property
    def enabled(self) -> bool:
        return self._on_wake is not None

    def last(self, watcher: str) -> float | None:
        """When this process last saw the watcher woken (by itself or, through the slot, by
        another process)."""
        return self._last.get(watcher)

    def owed(self) -> dict[str, float]:
        """Watcher -> due time of each owed wake."""
        return {w: due for w, (due, _) in self._owed.items()}

    def next_due(self) -> float | None:
        """The earliest due time in the heap (possibly of a superseded entry, which
        ``fire_due`` skips); read without the gateway lock by the timer, so it only peeks."""
        try:
            return self._heap[0][0]
        except IndexError:
            return None

    def wake(self, watcher: str, reason: str) -> bool:
        """Lines asking for a wake entered the watcher's queue: wake it now unless its window
        is open in any process; then the wake is owed, due when the window ends. ``True``
        when ``on_wake`` was called."""
        if self._on_wake is None:
            return False
        return self._attempt(watcher, reason, self._clock(), owed=False)

    def wake_for_notices(self, watchers: dict[str, SessionRef]) -> None:
        """``wake`` for each watcher given the target of its first notice among lines queued
        together (the release after a commit). Inside the window with the wake owed as early
        already, the usual case for a main-style watcher between two of its turns, only the
        count changes, as ``_attempt`` and ``_owe`` would leave it, without their calls (and
        the reason's text) per notice."""
        if self._on_wake is None:
            return
        last_woken, owed, window = self._last, self._owed, self.window
        now = self._clock()  # the lines entered together: one time for all their wakes
        for watcher, target in watchers.items():
            last = last_woken.get(watcher)
            if last is not None and now - last < window:
                held = owed.get(watcher)
                if held is not None and held[0] <= last + window:
                    self.dropped += 1
                    continue
            self._attempt(watcher, f"session-state: {target[0]}", now, owed=False)

    def fire_due(self, now: float | None = None) -> int:
        """Fire the owed wakes due by ``now`` (default: the clock) whose watcher still holds a
        line that entered after this process's own last wake of it; returns how many fired."""
        if now is None:
            now = self._clock()
        fired = 0
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, watcher = heapq.heappop(heap)
            entry = self._owed.get(watcher)
            if entry is None or entry[0] != due:
                continue  # superseded by a wake or a later due time
            del self._owed[watcher]
            if not self.holds_unwoken(watcher):
                self.owed_cancelled += 1
                continue
            try:
                fired += self._attempt(watcher, entry[1], now, owed=True, due=due)
            except Exception:  # the slot could not be read: try again shortly, never drop
                log.exception("owed wake of %r failed; retrying", watcher)
                self._owe(watcher, entry[1], now + RETRY_SECONDS)
        return fired

    # -- internals --------------------------------------------------------------------------

    def holds_unwoken(self, watcher: str) -> bool:
        """Whether the watcher's queue here holds a waking line that entered after this
        process's own last wake of it (what an owed wake fires for, LIV1)."""
        if self._holds_waking_after is None:
            return True
        return self._holds_waking_after(watcher, self._own_mark.get(watcher, -1))

    def _attempt(self, watcher: str, reason: str, now: float, *, owed: bool, due: float | None = None) -> bool:
        window = self.window
        last = self._last.get(watcher)
        if last is not None and now - last < window:
            self.dropped += not owed
            self._owe(watcher, reason, last + window, new=not owed)
            return False
        if self.take_slot is not None:  # R23: the durable slot decides across processes
            won, slot_time = self.take_slot(watcher, now, window)
            if not won:
                self._last[watcher] = slot_time
                self.dropped += not owed
                # Another process woke it at slot_time; that wake may be lost with its process,
                # so this one stays owed while the lines are held (R23).
                due = slot_time + window
                self._owe(watcher, reason, due if due > now else now + RETRY_SECONDS, new=not owed)
                return False
        self._last[watcher] = now
        if self._queue_mark is not None:
            self._own_mark[watcher] = self._queue_mark()
        self._owed.pop(watcher, None)
        self.sent += 1
        for fired in list(self.fired_hooks):
            fired(watcher, now, due)
        try:
            self._on_wake(watcher, reason)  # type: ignore[misc]
        except Exception:  # a broken hook must not fail the turn that recorded the event
            log.exception("on_wake(%r) failed", watcher)
        return True

    def _owe(self, watcher: str, reason: str, due: float, *, new: bool = False) -> None:
        """Owe the watcher a wake at ``due``; ``new`` when asked by ``wake`` (a fresh owed wake
        if none is held), not when an owed wake that fell due is owed again."""
        held = self._owed.get(watcher)
        if held is not None and held[0] <= due:
            return  # already owed, as early: one heap entry per watcher and window
        self._owed[watcher] = (due, reason)
        heapq.heappush(self._heap, (due, watcher))
        if new and held is None and self.owed_hooks:
            for owed in list(self.owed_hooks):
                owed(watcher, due)
        timer = self.timer
        if timer is None and self.start_timer is not None:
            timer = self.timer = self.start_timer()
        if timer is not None:
            timer.poke()


def start_wake_timer(wakes: WakeCoalescer, clock: Callable[[], float], fire: Callable[[], object]) -> ClockTimer:
    """One thread per gateway that fires owed wakes when they fall due (R12).

    ``fire`` takes the gateway's lock and calls ``WakeCoalescer.fire_due``. While nothing is
    owed the thread waits without a timeout; otherwise until the earliest due time by the
    gateway's clock, re-read at least every ``TIMER_MAX_SLEEP_SECONDS`` (LIV1's 1 s).
    """
    timer = ClockTimer("sessionstate-wakes", next_due=wakes.next_due, clock=clock, fire=fire,
                       max_sleep=TIMER_MAX_SLEEP_SECONDS, retry=RETRY_SECONDS)
    timer.start()
    return timer

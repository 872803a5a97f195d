"""What ``close`` promises of the wake timer, found by mutmut (``services/notice/core.py``,
``NoticeCore.stop_wakes``; docs/mutants/services-notice-hot-path-2.md):

- R12, LIV1 at shutdown: once ``close`` has begun stopping the wake timer, no owed wake fires,
  not even one whose firing round was already waiting for the gateway's lock when ``close``
  began (the round checks, under the lock, whether the wakes were stopped).

The timer thread is held at that point by a second thread holding the gateway's lock, and
each step waits on an event set by the code under test (the round's ``fire`` and the timer's
``stop``, wrapped on this gateway's timer only): nothing is timed.
"""

from __future__ import annotations

import threading

from sessionstate import Gateway
from tests.gateway.test_mutants_wakes import Clock, human

MANAGER, CHILD = "agent:main:main", "agent:main:subagent:child"
WINDOW = 20.0
# A bound on a hang, not a timing: each wait ends as soon as the other thread gets there.
STUCK_SECONDS = 30.0


def test_a_firing_round_waiting_for_the_lock_when_close_begins_fires_no_wake(db_url):
    clock = Clock()
    woken: list[str] = []
    gw = Gateway.open(db_url, clock=clock, wake_window=WINDOW, on_wake=lambda watcher, reason: woken.append(watcher))
    try:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        start = clock.now
        human(gw, CHILD)                    # wakes MANAGER at once
        assert gw.drain_system_events(MANAGER)
        clock.now = start + 5
        human(gw, CHILD)                    # inside the window: owed at start + WINDOW, timer started
        assert woken == [MANAGER] and gw.ops.diagnostics().owed_wakes == {MANAGER: start + WINDOW}
        timer = gw.ops.wakes.timer
        assert timer is not None

        round_began, stopping, lock_held = threading.Event(), threading.Event(), threading.Event()
        fire, stop = timer._fire, timer.stop

        def fire_reporting() -> object:
            round_began.set()
            return fire()

        def stop_reporting() -> None:
            stopping.set()
            stop()

        timer._fire, timer.stop = fire_reporting, stop_reporting

        def hold_the_lock_until_close_stops_the_timer() -> None:
            with gw.locked():
                lock_held.set()
                stopping.wait(STUCK_SECONDS)

        holder = threading.Thread(target=hold_the_lock_until_close_stops_the_timer)
        holder.start()
        assert lock_held.wait(STUCK_SECONDS)
        clock.now = start + WINDOW          # the owed wake is due: the timer's round begins
        timer.poke()
        assert round_began.wait(STUCK_SECONDS), "the timer never began a firing round"
    except BaseException:
        gw.close()
        raise
    gw.close()                              # the round is let in only once close stops the timer
    holder.join(STUCK_SECONDS)
    assert stopping.is_set(), "close never stopped the wake timer"
    assert woken == [MANAGER], "an owed wake fired while the gateway was closing"

"""The shared timer thread behind the owed wakes (R12) and the automatic prune (R30): it runs
its task when the due time comes by the given clock, not by its own sleep."""

from __future__ import annotations

import threading

from sessionstate.shared.clock_timer import ClockTimer


class Plan:
    def __init__(self) -> None:
        self.now = 100.0
        self.due: float | None = None
        self.fired = 0
        self.failures_left = 0
        self.fired_event = threading.Event()

    def fire(self) -> None:
        self.fired += 1
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("storage went away")
        self.due = None  # done: nothing planned until the next one
        self.fired_event.set()


def timer_for(plan: Plan, max_sleep: float = 0.05) -> ClockTimer:
    timer = ClockTimer("test-timer", next_due=lambda: plan.due, clock=lambda: plan.now, fire=plan.fire,
                       max_sleep=max_sleep, retry=0.01)
    timer.start()
    return timer


def test_it_fires_when_the_clock_reaches_the_due_time_and_not_before():
    plan = Plan()
    timer = timer_for(plan)
    try:
        plan.due = 105.0
        timer.poke()
        assert not plan.fired_event.wait(0.3)        # the fake clock has not moved: never fired
        assert plan.fired == 0
        plan.now = 105.0                              # no poke: noticed within max_sleep
        assert plan.fired_event.wait(5)
        assert plan.fired == 1
    finally:
        timer.stop()
    assert not timer.running


def test_nothing_planned_waits_until_poked():
    plan = Plan()
    timer = timer_for(plan, max_sleep=0.01)
    try:
        assert not plan.fired_event.wait(0.2)
        plan.due = plan.now
        timer.poke()
        assert plan.fired_event.wait(5)
    finally:
        timer.stop()


def test_a_failing_run_is_tried_again_and_the_thread_lives_on():
    plan = Plan()
    plan.failures_left = 2
    timer = timer_for(plan)
    try:
        plan.due = plan.now
        timer.poke()
        assert plan.fired_event.wait(5)
        assert plan.fired == 3                        # two failures, then the run that held
        assert timer.running
    finally:
        timer.stop()


def test_stop_before_start_and_twice_is_harmless():
    plan = Plan()
    timer = ClockTimer("never-started", next_due=lambda: None, clock=lambda: 0.0, fire=plan.fire,
                       max_sleep=1.0, retry=1.0)
    timer.stop()
    timer.stop()
    assert plan.fired == 0 and not timer.running

"""The wake coalescer alone (``WakeCoalescer``, and R23's heal on it, ``Rewaker``), built
without a gateway so that no timer thread races the count ``fire_due`` answers; a fake clock,
nothing is timed:

- ``fire_due`` looks at every due entry in one call: a superseded entry or a cancelled owed
  wake (nothing new held) does not stop the ones after it, and each cancellation is counted;
- the hooks hear an owed wake with its due time; a slot that cannot be read while an owed wake
  fires is logged and the wake owed again one retry later, with its reason (never dropped);
- every owed wake due fires in one call and is counted; one whose slot another process took
  meanwhile is owed again at that wake's window end, and observers are not told twice;
- an ``on_wake`` that raises is logged by watcher and the wake still counts as sent;
- a heal whose wake lost the durable slot to another process is filed at that process's wake,
  and ``on_material`` answers how many watchers it woke.
"""

from __future__ import annotations

import logging

from sessionstate.services.notice.rewake import Rewaker
from sessionstate.services.notice.wakes import RETRY_SECONDS, WakeCoalescer
from tests.helpers import Clock

MANAGER, CHILD = "agent:main:main", "agent:main:subagent:child"
PEER, ELSEWHERE = "agent:x:main", "agent:y:main"  # PEER sorts after MANAGER: heap ties pop MANAGER


# -- the coalescer alone: fire_due's loop, its hooks and its failures -----------------------------

WINDOW = 20.0
FIRST, SECOND = "agent:a:main", "agent:b:main"  # FIRST sorts first: heap ties pop it first


class Coalesced:
    """A coalescer with a fake clock, a slot that always wins unless told to fail, and queues
    described by which watchers still hold a line newer than their last wake."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.woken: list[tuple[str, str, float]] = []
        self.holding: set[str] = set()
        self.slot_fails = 0  # how many slot reads fail next
        self.slot_taken_at: float | None = None  # another process's wake the next slot read finds

        def take_slot(watcher: str, now: float, window: float) -> tuple[bool, float]:
            if self.slot_fails:
                self.slot_fails -= 1
                raise OSError("slot unreadable")
            taken, self.slot_taken_at = self.slot_taken_at, None
            return (True, now) if taken is None else (False, taken)

        self.wakes = WakeCoalescer(lambda w, r: self.woken.append((w, r, self.clock.now)), self.clock,
                                   take_slot, window=WINDOW,
                                   holds_waking_after=lambda w, mark: w in self.holding)

    def owe_both(self) -> float:
        """Both watchers woken at t=0 and owed at t=20 by a second line at t=5; returns t=0."""
        start = self.clock.now
        for watcher in (FIRST, SECOND):
            assert self.wakes.wake(watcher, f"first {watcher}")
        self.clock.now = start + 5
        for watcher in (FIRST, SECOND):
            assert not self.wakes.wake(watcher, f"owed {watcher}")
        assert self.wakes.owed() == {FIRST: start + WINDOW, SECOND: start + WINDOW}
        return start


def test_a_cancelled_owed_wake_does_not_stop_the_next_due_one_and_each_is_counted():
    c = Coalesced()
    start = c.owe_both()
    c.holding = {SECOND}                  # FIRST drained meanwhile: its owed wake is cancelled
    c.clock.now = start + WINDOW
    assert c.wakes.fire_due() == 1
    assert c.woken[2:] == [(SECOND, f"owed {SECOND}", start + WINDOW)]
    assert c.wakes.owed_cancelled == 1

    c.clock.now = start + WINDOW + 5      # both owed again; this time both drain
    assert c.wakes.wake(FIRST, "again")   # (FIRST's window ended at t=20: woken at once)
    assert not c.wakes.wake(SECOND, "again")
    c.clock.now = start + WINDOW + 10
    assert not c.wakes.wake(FIRST, "again")
    assert c.wakes.owed() == {SECOND: start + 2 * WINDOW, FIRST: start + 2 * WINDOW + 5}
    c.holding = set()
    c.clock.now = start + 2 * WINDOW + 5
    assert c.wakes.fire_due() == 0
    assert c.wakes.owed_cancelled == 3
    assert c.wakes.owed() == {}


def test_a_superseded_heap_entry_does_not_stop_the_next_due_one():
    c = Coalesced()
    start = c.owe_both()
    c.holding = {FIRST, SECOND}
    c.clock.now = start + WINDOW
    assert c.wakes.wake(FIRST, "a new line at the window's end")  # woken at once: its entry is stale
    assert c.wakes.fire_due() == 1        # the stale entry is skipped, SECOND's fires
    assert [w for w, _, _ in c.woken] == [FIRST, SECOND, FIRST, SECOND]
    assert c.wakes.owed() == {}


def test_the_fired_hooks_hear_an_owed_wake_with_its_due_time_and_a_wake_at_once_without():
    c = Coalesced()
    heard: list[tuple[str, float, float | None]] = []
    c.wakes.fired_hooks.append(lambda watcher, at, due: heard.append((watcher, at, due)))
    start = c.owe_both()
    c.holding = {FIRST}
    c.clock.now = start + WINDOW + 0.5    # fired a little late: at and due differ
    assert c.wakes.fire_due() == 1
    assert heard == [(FIRST, start, None), (SECOND, start, None),
                     (FIRST, start + WINDOW + 0.5, start + WINDOW)]


def test_an_owed_wake_whose_slot_cannot_be_read_is_logged_and_owed_again_one_retry_later(caplog):
    c = Coalesced()
    start = c.owe_both()
    c.holding = {FIRST}
    c.clock.now = start + WINDOW
    c.slot_fails = 1
    with caplog.at_level(logging.ERROR, logger="sessionstate"):
        assert c.wakes.fire_due() == 0    # not tried again in the same call
    assert [r.getMessage() for r in caplog.records] == [f"owed wake of {FIRST!r} failed; retrying"]
    assert c.wakes.owed() == {FIRST: start + WINDOW + RETRY_SECONDS}
    c.clock.now = start + WINDOW + RETRY_SECONDS
    assert c.wakes.fire_due() == 1
    assert c.woken[2:] == [(FIRST, f"owed {FIRST}", start + WINDOW + RETRY_SECONDS)]


def test_an_on_wake_that_raises_is_logged_by_watcher_and_the_wake_still_counts(caplog):
    clock = Clock()

    def broken(watcher: str, reason: str) -> None:
        raise RuntimeError("the hook broke")

    wakes = WakeCoalescer(broken, clock, window=WINDOW)
    with caplog.at_level(logging.ERROR, logger="sessionstate"):
        assert wakes.wake(FIRST, "a line")
    assert [r.getMessage() for r in caplog.records] == [f"on_wake({FIRST!r}) failed"]
    assert wakes.last(FIRST) == clock.now  # the window opened: the next line inside it is owed
    clock.now += 1
    assert not wakes.wake(FIRST, "a second line")
    assert wakes.owed() == {FIRST: clock.now - 1 + WINDOW}


def test_every_due_owed_wake_fires_in_one_call_and_a_lost_slot_owes_again_untold():
    c = Coalesced()
    told: list[tuple[str, float]] = []
    c.wakes.owed_hooks.append(lambda watcher, due: told.append((watcher, due)))
    start = c.owe_both()
    assert told == [(FIRST, start + WINDOW), (SECOND, start + WINDOW)]
    c.holding = {FIRST, SECOND}
    c.clock.now = start + WINDOW
    assert c.wakes.fire_due() == 2
    assert [w for w, _, _ in c.woken] == [FIRST, SECOND, FIRST, SECOND]

    c.clock.now = start + WINDOW + 5      # FIRST owed again, due at t=40
    assert not c.wakes.wake(FIRST, "owed again")
    assert told[2:] == [(FIRST, start + 2 * WINDOW)]
    c.slot_taken_at = start + 2 * WINDOW - 1  # another process woke FIRST just before
    c.clock.now = start + 2 * WINDOW
    assert c.wakes.fire_due() == 0
    assert c.wakes.owed() == {FIRST: start + 3 * WINDOW - 1}  # that wake's window end
    assert told[3:] == []                 # the same owed wake, moved: not news to observers
    assert c.wakes.last(FIRST) == start + 2 * WINDOW - 1  # the other process's wake is seen
    c.clock.now = start + 3 * WINDOW - 1
    assert c.wakes.fire_due() == 1
    assert c.woken[-1] == (FIRST, "owed again", start + 3 * WINDOW - 1)

    c.slot_taken_at = c.clock.now + 5 - 1  # a fresh line whose slot another process holds
    c.clock.now += 5
    assert not c.wakes.wake(SECOND, "a fresh line")
    assert told[3:] == [(SECOND, c.clock.now - 1 + WINDOW)]  # a new owed wake: told once


# -- R23's heal through a gateway: the rewaker's heap per target ---------------------------------


def test_a_heal_that_lost_the_slot_comes_again_one_window_after_the_other_process_wake():
    coalesced = Coalesced()
    rewaker = Rewaker(coalesced.wakes, lambda watcher, target: True)
    target = (CHILD, "child")
    start = coalesced.clock.now
    assert coalesced.wakes.wake(FIRST, "first")
    rewaker.track(FIRST, target)
    coalesced.slot_taken_at = start + WINDOW + 8  # another process woke FIRST at t=28
    coalesced.clock.now = start + WINDOW + 10
    assert rewaker.on_material(target, None, coalesced.clock.now) == 0
    coalesced.clock.now = start + 2 * WINDOW + 8  # one window after that wake: healed here
    assert rewaker.on_material(target, None, coalesced.clock.now) == 1
    assert coalesced.woken[1:] == [(FIRST, f"session-state: {CHILD}", start + 2 * WINDOW + 8)]


def test_a_heal_answers_how_many_watchers_it_woke():
    coalesced = Coalesced()
    rewaker = Rewaker(coalesced.wakes, lambda watcher, target: True)
    target = (CHILD, "child")
    assert rewaker.on_material(target, None, coalesced.clock.now) == 0  # nobody filed for it
    for watcher in (FIRST, SECOND):
        assert coalesced.wakes.wake(watcher, "first")
        rewaker.track(watcher, target)
    coalesced.clock.now += WINDOW
    assert rewaker.on_material(target, FIRST, coalesced.clock.now) == 1  # FIRST's own event
    assert rewaker.on_material(target, None, coalesced.clock.now) == 1  # SECOND inside its window
    coalesced.clock.now += WINDOW
    assert rewaker.on_material(target, None, coalesced.clock.now) == 2

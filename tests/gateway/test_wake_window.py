"""The wake window in a gateway (R12, R23, LIV1; both backends, a fake clock, nothing is timed):

- an owed wake fires only for a waking line that entered after this process's own last wake
  of the watcher, and ``diagnostics().unwoken`` says the same;
- a gateway that restarts inside the window (it never woke the watcher itself) owes the wake
  for the notice its startup sweep queued, and fires it when the window ends;
- the first line inside a window makes the wake owed: observers hear of it once, and the
  owed wake names that line's target; later lines of the window change nothing;
- a notice still pending one window after its wake is woken again by the next material event
  on its target, not by the watcher's own event, and not again inside that window (R23's heal,
  in full in test_wake_heal.py);
- the gateway's own timer is one thread named ``sessionstate-wakes``, started by the first owed
  wake, told of every later one (an owed wake after it went idle still fires by itself), and
  gone after ``close``; once ``close`` has begun stopping it, no owed wake fires, not even one
  whose firing round was already waiting for the gateway's lock;
- on a read-only database, where no durable slot can be taken, the gateway's own window still
  coalesces: a second line inside it is owed, not woken at once (claims.take_wake_slot);
- a plain system line wakes a main-style session with the reason ``system-event``, is owed
  inside the window and fired when it ends, and a line already queued wakes nobody again;
- an owed wake does not fire for the line it was woken for, nor for an R27 announcement, and a
  plain line queued again is no new line (R5);
- a window shorter than a second is accepted and honoured; a bad one is refused with what it
  must be.
"""

from __future__ import annotations

import threading

import pytest

from sessionstate import Gateway, InvalidArgument
from tests.gateway.helpers import BEHIND, CAUGHT_UP, PLAIN, WATCHER, human, human_upstream, read_only_url
from tests.helpers import Clock

MANAGER, CHILD, OTHER = "agent:main:main", "agent:main:subagent:child", "agent:x:main"
WINDOW = 20.0


@pytest.fixture
def gw(db_url, clock, wakes):
    gateway = Gateway.open(db_url, clock=clock, wake_window=WINDOW,
                           on_wake=lambda w, r: wakes.append((w, r, clock.now)))
    gateway.create_session(MANAGER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER)
    gateway.create_session(OTHER)
    gateway.watch(MANAGER, OTHER)
    yield gateway
    gateway.close()


# -- owed wakes count only lines newer than this process's own last wake (R12, LIV1) ----------


def test_a_line_queued_before_the_last_wake_is_not_unwoken(gw, clock, wakes):
    start = clock.now
    human(gw, CHILD)                      # queued, then woken at once
    assert [w[0] for w in wakes] == [MANAGER]
    assert gw.ops.diagnostics().unwoken == frozenset()  # the wake came after the line
    clock.now = start + 5
    human(gw, OTHER)                      # a second line, inside the window: owed
    assert gw.ops.diagnostics().unwoken == frozenset({MANAGER})


def test_an_owed_wake_whose_newer_line_was_withdrawn_does_not_fire_for_the_older_one(gw, clock, wakes):
    start = clock.now
    human(gw, CHILD)                      # t=0: the child's notice, woken
    clock.now = start + 5
    human(gw, OTHER)                      # t=5: the other's notice, owed at t=20
    assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + WINDOW}
    gw.unwatch(MANAGER, OTHER)            # its notice is withdrawn; the child's stays queued
    assert [e.target[0] for e in gw.ops.queued_events(MANAGER)] == [CHILD]
    clock.now = start + WINDOW
    assert gw.ops.fire_due_wakes() == 0   # the child's notice was already woken for
    assert len(wakes) == 1
    assert gw.ops.diagnostics().owed_wakes_cancelled == 1


def test_a_gateway_restarted_inside_the_window_fires_the_owed_wake_when_it_ends(db_url, clock, wakes):
    def on_wake(watcher: str, reason: str) -> None:
        wakes.append((watcher, reason, clock.now))

    start = clock.now
    with Gateway.open(db_url, clock=clock, wake_window=WINDOW, on_wake=on_wake) as first:
        first.create_session(MANAGER)
        first.create_session(CHILD, kind="subagent", parent=MANAGER)
        human(first, CHILD)               # woken at t=0; the slot's time is durable
    clock.now = start + 5
    with Gateway.open(db_url, clock=clock, wake_window=WINDOW, on_wake=on_wake) as second:
        # The startup sweep queued the notice: its first line, inside the first gateway's window.
        assert [e.target[0] for e in second.ops.queued_events(MANAGER)] == [CHILD]
        diagnostics = second.ops.diagnostics()
        assert diagnostics.owed_wakes == {MANAGER: start + WINDOW}
        assert diagnostics.unwoken == frozenset({MANAGER})
        clock.now = start + WINDOW
        second.ops.fire_due_wakes()       # (its timer may fire it first: the lock orders them)
    assert wakes == [(MANAGER, f"session-state: {CHILD}", start),
                     (MANAGER, f"session-state: {CHILD}", start + WINDOW)]


class OwedWakes:
    """An observer that writes down only the wakes it hears became owed."""

    def __init__(self) -> None:
        self.owed: list[tuple[str, float]] = []

    def recorded(self, kinds, sequences, seconds) -> None:
        pass

    def spawned(self) -> None:
        pass

    def queued(self) -> None:
        pass

    def drained(self, count: int) -> None:
        pass

    def wake_fired(self, watcher: str, at: float, due: float | None) -> None:
        pass

    def wake_owed(self, watcher: str, due: float) -> None:
        self.owed.append((watcher, due))


def test_the_first_line_inside_the_window_makes_the_wake_owed_and_later_ones_add_nothing(gw, clock, wakes):
    observer = OwedWakes()
    gw.ops.observe(observer)
    start = clock.now
    human(gw, CHILD)                      # t=0: woken at once
    assert gw.drain_system_events(MANAGER)
    clock.now = start + 5
    human(gw, OTHER)                      # t=5: the other's notice makes the wake owed
    clock.now = start + 10
    human(gw, CHILD)                      # t=10: a second line in the same window
    assert len(gw.ops.queued_events(MANAGER)) == 2
    assert observer.owed == [(MANAGER, start + WINDOW)]
    assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + WINDOW}
    clock.now = start + WINDOW
    gw.ops.fire_due_wakes()               # (the timer may fire it first: the lock orders them)
    assert wakes == [(MANAGER, f"session-state: {CHILD}", start),
                     (MANAGER, f"session-state: {OTHER}", start + WINDOW)]


# -- a read-only database: the in-memory window alone coalesces (R12) ---------------------------


def test_on_a_read_only_database_the_window_still_coalesces_wakes(backend, db_url, clock, wakes):
    with Gateway.open(db_url) as writer:
        writer.create_session(MANAGER)
    start = clock.now
    with Gateway.open(read_only_url(db_url), create=False, clock=clock, wake_window=WINDOW,
                      on_wake=lambda w, r: wakes.append((w, r, clock.now))) as gw:
        assert gw.store.read_only
        gw.ops.enqueue_system_event(MANAGER, "first line")   # woken at once: no slot, still a wake
        clock.now = start + 5
        gw.ops.enqueue_system_event(MANAGER, "second line")  # inside this process's window: owed
        assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + WINDOW}
        assert wakes == [(MANAGER, "system-event", start)]
        clock.now = start + WINDOW
        gw.ops.fire_due_wakes()           # (the timer may fire it first: the lock orders them)
        assert wakes == [(MANAGER, "system-event", start), (MANAGER, "system-event", start + WINDOW)]


# -- the wake timer: one thread per gateway (R12, LIV1) -----------------------------------------

TIMER_THREAD = "sessionstate-wakes"
# How long a test waits for the timer thread before calling it stuck: a bound on a hang, not a
# measurement (the thread re-reads the fake clock at least once a second).
STUCK_AFTER_SECONDS = 30.0


def wake_timer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == TIMER_THREAD}


def test_one_timer_thread_fires_every_owed_wake_by_itself_and_stops_on_close(db_url, clock):
    woken: list[float] = []
    arrived = threading.Semaphore(0)

    def on_wake(watcher: str, reason: str) -> None:
        woken.append(clock.now)
        arrived.release()

    before = wake_timer_threads()
    with Gateway.open(db_url, clock=clock, wake_window=WINDOW, on_wake=on_wake) as gw:
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        start = clock.now
        for window in range(3):           # each round: a wake at once or by the timer, then one owed
            opened = start + window * WINDOW
            human(gw, CHILD)
            if window == 0:
                assert arrived.acquire(timeout=STUCK_AFTER_SECONDS)  # at once, on this thread
            assert gw.drain_system_events(MANAGER)
            clock.now = opened + 5
            human(gw, CHILD)              # inside the window: owed, due when it ends
            assert gw.ops.diagnostics().owed_wakes == {MANAGER: opened + WINDOW}
            clock.now = opened + WINDOW   # nobody calls fire_due_wakes: the timer must
            assert arrived.acquire(timeout=STUCK_AFTER_SECONDS), f"owed wake {window + 1} never fired"
            assert gw.ops.diagnostics().owed_wakes == {}
        assert woken == [start, start + WINDOW, start + 2 * WINDOW, start + 3 * WINDOW]
        assert len(wake_timer_threads() - before) == 1
    assert wake_timer_threads() - before == set()


# -- plain system lines (enqueue_system_event) -----------------------------------------------


def test_a_system_line_wakes_a_main_session_with_the_system_event_reason(gw, clock, wakes):
    assert gw.ops.enqueue_system_event(MANAGER, "deploy finished")
    assert wakes == [(MANAGER, "system-event", clock.now)]


def test_a_system_line_inside_the_window_is_woken_when_the_window_ends(gw, clock, wakes):
    start = clock.now
    human(gw, CHILD)                      # t=0: woken for the notice
    assert gw.drain_system_events(MANAGER)
    clock.now = start + 5
    assert gw.ops.enqueue_system_event(MANAGER, "deploy finished")  # owed at t=20
    assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + WINDOW}
    clock.now = start + WINDOW
    assert gw.ops.fire_due_wakes() == 1
    assert wakes[1:] == [(MANAGER, "system-event", start + WINDOW)]


def test_a_system_line_already_queued_wakes_nobody_again(gw, clock, wakes):
    start = clock.now
    assert gw.ops.enqueue_system_event(MANAGER, "deploy finished")
    clock.now = start + 5                 # inside the window: the duplicate is not owed
    assert not gw.ops.enqueue_system_event(MANAGER, "deploy finished")
    assert gw.ops.diagnostics().owed_wakes == {}
    clock.now = start + 3 * WINDOW        # outside it: the duplicate still enters nothing
    assert not gw.ops.enqueue_system_event(MANAGER, "deploy finished")
    assert wakes == [(MANAGER, "system-event", start)]
    assert [e.text for e in gw.ops.queued_events(MANAGER)] == ["deploy finished"]


# -- the window's own bounds, and which lines an owed wake fires for (R5, R12, R27, WAKE1) ------


def test_a_window_shorter_than_a_second_is_accepted_and_honoured(db_url):
    clock = Clock()
    woken: list[float] = []
    with Gateway.open(db_url, clock=clock, wake_window=0.5,
                      on_wake=lambda watcher, reason: woken.append(clock.now)) as gw:
        assert gw.ops.wake_window == 0.5
        gw.create_session(MANAGER)
        gw.create_session(CHILD, kind="subagent", parent=MANAGER)
        start = clock.now
        human(gw, CHILD)
        assert gw.drain_system_events(MANAGER)
        clock.now = start + 0.25          # inside the half second: owed
        human(gw, CHILD)
        assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + 0.5}
        assert gw.drain_system_events(MANAGER)
        clock.now = start + 0.75          # past it: at once
        human(gw, CHILD)
        assert woken[0] == start and woken[-1] == start + 0.75


@pytest.mark.parametrize("window", [0, "20"])
def test_a_bad_window_is_refused_with_what_it_must_be(db_url, window):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, wake_window=window)
    assert str(refused.value) == "wake_window must be a positive finite number of seconds"


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


def test_an_owed_wake_whose_new_notice_was_withdrawn_does_not_fire(db_url):
    """Woken for BEHIND's notice; CAUGHT_UP's notice, inside the window, is owed a wake and
    then withdrawn by an unwatch: what is left is the line the watcher was woken for."""
    clock, woken = Clock(), []
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (WATCHER, BEHIND, CAUGHT_UP):
            gw.create_session(key)
        gw.watch(WATCHER, BEHIND)
        gw.watch(WATCHER, CAUGHT_UP)
        start = clock.now
        human_upstream(gw, BEHIND)
        assert woken == [f"session-state: {BEHIND}"]
        clock.now = start + 5
        human_upstream(gw, CAUGHT_UP)
        assert gw.ops.diagnostics().owed_wakes == {WATCHER: start + WINDOW}
        clock.now = start + 10
        gw.unwatch(WATCHER, CAUGHT_UP)
        assert [line.split('"')[1] for line in gw.pending_system_events(WATCHER)] == [BEHIND]
        clock.now = start + WINDOW
        assert gw.ops.fire_due_wakes() == 0
        assert woken == [f"session-state: {BEHIND}"]


def test_an_announcement_after_the_drain_does_not_fire_an_owed_wake(db_url):
    """R27's line never asks for a wake, so it cannot be what an owed wake fires for."""
    clock, woken = Clock(), []
    manager, worker = "agent:main:main", "agent:main:worker"
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        for key in (manager, BEHIND):
            gw.create_session(key)
        gw.watch(manager, BEHIND)
        start = clock.now
        human_upstream(gw, BEHIND)
        assert len(woken) == 1
        clock.now = start + 5
        assert len(gw.drain_system_events(manager)) == 1
        clock.now = start + 8
        human_upstream(gw, BEHIND)  # inside the window: owed
        assert gw.ops.diagnostics().owed_wakes == {manager: start + WINDOW}
        clock.now = start + 10
        assert len(gw.drain_system_events(manager)) == 1
        clock.now = start + 12
        gw.create_session(worker)
        assert gw.pending_system_events(manager) == ['[session created] "agent:main:worker" (kind main)']
        clock.now = start + WINDOW
        assert gw.ops.fire_due_wakes() == 0
        assert len(woken) == 1


def test_a_plain_line_queued_again_is_no_new_line_and_wakes_nobody(db_url):
    clock, woken = Clock(), []
    with Gateway.open(db_url, clock=clock, on_wake=lambda watcher, reason: woken.append(reason)) as gw:
        gw.create_session(WATCHER)
        assert gw.ops.enqueue_system_event(WATCHER, PLAIN) is True
        assert woken == ["system-event"]
        clock.now += 3 * WINDOW  # the window is long over: only the line's being new could wake
        assert gw.ops.enqueue_system_event(WATCHER, PLAIN) is False
        assert woken == ["system-event"] and gw.pending_system_events(WATCHER) == [PLAIN]


def test_a_pending_notice_is_woken_again_by_a_material_event_once_its_window_passed(gw, clock, wakes):
    reason = f"session-state: {CHILD}"
    start = clock.now
    human(gw, CHILD)                      # t=0: the notice, woken; the turn never drains it
    clock.now = start + 5
    human(gw, CHILD)                      # still pending: no new line, no wake, nothing owed
    assert gw.ops.diagnostics().owed_wakes == {}
    clock.now = start + WINDOW + 5
    assert gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="mine",
                           actor_id=MANAGER)  # the watcher's own event is not material to it (R2)
    assert wakes == [(MANAGER, reason, start)]
    human(gw, CHILD)                      # past the window: the heal wakes it again
    assert wakes == [(MANAGER, reason, start), (MANAGER, reason, start + WINDOW + 5)]
    clock.now = start + WINDOW + 10
    human(gw, CHILD)                      # inside the heal's own window: nothing more
    assert len(wakes) == 2
    assert [e.target[0] for e in gw.ops.queued_events(MANAGER)] == [CHILD]

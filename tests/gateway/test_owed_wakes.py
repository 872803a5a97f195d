"""R12, R23, LIV1, WAKE1 in one process (both backends): a wake the window suppresses is owed
and fires when the window ends, by the gateway's own timer or by ``fire_due_wakes`` under a
fake clock; a watcher that drained meanwhile is not woken; never two wakes in one window.

The issue's first scenario: t=0 a human message on the child wakes the manager, t=5 its turn
drains, t=10 another message queues a notice inside the window: the manager is woken at t=20.
"""

from __future__ import annotations

import threading
import time

import pytest

from sessionstate import Gateway, InvalidArgument

MANAGER, CHILD, OTHER = "agent:main:main", "agent:main:subagent:child", "agent:x:main"
SUB_WATCHER = "agent:main:subagent:observer"
REASON = f"session-state: {CHILD}"


def human(gw: Gateway, key: str = CHILD) -> None:
    assert gw.record_event(key, "human_direct_message", actor_type="human", summary="hi")


def build(gw: Gateway) -> None:
    gw.create_session(MANAGER)
    gw.create_session(CHILD, kind="subagent", parent=MANAGER)


@pytest.fixture
def gw(db_url, clock, wakes):
    gateway = Gateway.open(db_url, clock=clock, on_wake=lambda w, r: wakes.append((w, r, clock.now)))
    build(gateway)
    yield gateway
    gateway.close()


def test_a_notice_inside_the_window_is_woken_when_the_window_ends(gw, clock, wakes):
    start = clock.now
    human(gw)                              # t=0: queued, woken
    assert wakes == [(MANAGER, REASON, start)]
    clock.now = start + 5
    assert gw.drain_system_events(MANAGER)  # t=5: the turn drains
    clock.now = start + 10
    human(gw)                              # t=10: queued inside the window: owed at t=20
    assert len(wakes) == 1 and gw.ops.diagnostics().owed_wakes == {MANAGER: start + 20}
    clock.now = start + 15
    assert gw.ops.fire_due_wakes() == 0        # not due yet
    clock.now = start + 20
    gw.ops.fire_due_wakes()  # (the timer thread may have fired it first: the lock orders them)
    assert len(wakes) == 2 and wakes[1][:2] == (MANAGER, REASON) and wakes[1][2] - (start + 20) <= 1.0
    for later in (30, 60, 600):             # nothing more is owed: no further wake
        clock.now = start + later
        gw.ops.fire_due_wakes()
        gw.cluster.sweep()
    assert len(wakes) == 2


def test_a_watcher_that_drained_meanwhile_is_not_woken(gw, clock, wakes):
    start = clock.now
    human(gw)
    gw.drain_system_events(MANAGER)
    clock.now = start + 10
    human(gw)                              # owed at t=20
    clock.now = start + 12
    assert gw.drain_system_events(MANAGER)  # drained before the window ends
    clock.now = start + 21
    gw.ops.fire_due_wakes()
    assert len(wakes) == 1
    assert gw.ops.diagnostics().owed_wakes_cancelled == 1


def test_no_two_wakes_within_a_window(gw, clock, wakes):
    gw.create_session(OTHER)
    gw.watch(MANAGER, OTHER)
    start = clock.now
    human(gw)
    gw.drain_system_events(MANAGER)
    for step in range(1, 40):              # a notice every half second, drained every other
        clock.now = start + step * 0.5
        human(gw, CHILD if step % 2 else OTHER)
        if step % 4 == 0:
            gw.drain_system_events(MANAGER)
        gw.ops.fire_due_wakes()
    assert len(wakes) == 1                 # nothing due before t=20
    clock.now = start + 20
    gw.ops.fire_due_wakes()                    # the owed wake of the whole window: one
    clock.now = start + 39.9
    gw.ops.fire_due_wakes()
    times = [at for w, _, at in wakes if w == MANAGER]
    assert times == [start, start + 20]


def test_lines_queued_together_ask_for_one_wake(gw, clock, wakes):
    gw.create_session(OTHER)
    gw.watch(MANAGER, OTHER)
    gw.record_events([
        {"session_key": CHILD, "kind": "human_direct_message", "actor_type": "human", "summary": "a"},
        {"session_key": OTHER, "kind": "human_direct_message", "actor_type": "human", "summary": "b"},
    ])
    assert len(wakes) == 1 and gw.ops.diagnostics().owed_wakes == {}
    clock.now += 21
    gw.ops.fire_due_wakes()
    assert len(wakes) == 1  # both lines entered before the wake


def test_a_sub_agent_watcher_owes_nothing(gw, clock, wakes):
    gw.create_session(SUB_WATCHER, kind="subagent", parent=MANAGER)
    gw.watch(SUB_WATCHER, CHILD)
    human(gw)
    assert [w for w in wakes if w[0] == SUB_WATCHER] == []
    assert SUB_WATCHER not in gw.ops.diagnostics().owed_wakes


def test_the_window_is_configurable(db_url, clock, wakes):
    with Gateway.open(db_url, clock=clock, wake_window=3.0,
                      on_wake=lambda w, r: wakes.append((w, r, clock.now))) as gw:
        assert gw.ops.wake_window == 3.0
        build(gw)
        start = clock.now
        human(gw)
        gw.drain_system_events(MANAGER)
        clock.now = start + 1
        human(gw)
        assert gw.ops.diagnostics().owed_wakes == {MANAGER: start + 3.0}
        clock.now = start + 3
        gw.ops.fire_due_wakes()
        gw.drain_system_events(MANAGER)
        clock.now = start + 6.5           # outside the 3 s window: at once
        human(gw)
        assert [at for _, _, at in wakes] == [start, start + 3, start + 6.5]


@pytest.mark.parametrize("window", [0, -1, float("inf"), float("nan"), True, "20"])
def test_a_bad_window_is_refused(db_url, window):
    with pytest.raises(InvalidArgument):
        Gateway.open(db_url, wake_window=window)


LATE_ON_A_LOADED_BOX = 3.0


@pytest.mark.parametrize("pump", [False, True])
def test_the_timer_fires_an_owed_wake_by_itself(db_url, pump):
    """No further event, call or tick: the gateway's own timer fires the owed wake, with or
    without the change pump, on the real clock: never before the window ends, and late by at
    most LATE_ON_A_LOADED_BOX (LIV1's 1 s, plus 2 s of scheduling slack on a loaded 2-core
    machine; tests/multiproc/test_owed_wakes_processes.py holds the 1 s itself)."""
    window = 1.5
    woken: list[float] = []
    arrived = threading.Event()
    opened: list[Gateway] = []

    def on_wake(watcher: str, reason: str) -> None:
        # WAKE1 spaces the times the wake took its durable slot, not the hook's own later time
        # (on a loaded machine the hook runs some milliseconds after the slot).
        slot = opened[0].ops.wakes.last(watcher) if opened else None
        woken.append(time.time() if slot is None else slot)
        if len(woken) == 2:
            arrived.set()

    with Gateway.open(db_url, on_wake=on_wake, wake_window=window, pump=pump) as gw:
        opened.append(gw)
        build(gw)
        human(gw)
        gw.drain_system_events(MANAGER)
        human(gw)                          # inside the window: owed
        assert len(woken) == 1
        assert arrived.wait(window + 10), "the owed wake never fired"
        lateness = woken[1] - (woken[0] + window)
        assert lateness >= -0.01           # never inside the window (WAKE1)
        assert lateness <= LATE_ON_A_LOADED_BOX, f"the owed wake came {lateness:.2f} s after the window"
        assert gw.ops.diagnostics().wake_timer_running

"""R23: wakes fire in the serving process, once per 20 s per watcher across processes (a
durable slot); a still-pending main-style watcher is re-woken by a later material event once
its window has passed, at a cost flat in the number of pending watchers."""

from __future__ import annotations

import pytest

from sessionstate import Gateway
from sessionstate.services.notice.rewake import Rewaker
from sessionstate.services.notice.wakes import WakeCoalescer
from tests.helpers import Clock

W, T, T2 = "agent:a:main", "agent:b:main", "agent:c:main"
REASON = f"session-state: {T}"


@pytest.fixture
def setup(db_url):
    url = db_url
    clock = Clock()
    with Gateway.open(url, clock=clock) as gw:
        for key in (W, T, T2):
            gw.create_session(key)
        gw.watch(W, T)
        gw.watch(W, T2)
    return url, clock


def human(gw: Gateway, target: str = T, actor_id: str | None = None) -> None:
    assert gw.record_event(target, "human_direct_message", actor_type="human", summary="hi", actor_id=actor_id)


def test_two_serving_processes_wake_a_watcher_once_per_window(setup):
    url, clock = setup
    wakes: list[tuple[str, str, str]] = []
    with Gateway.open(url, clock=clock, on_wake=lambda w, r: wakes.append(("a", w, r))) as a, \
         Gateway.open(url, clock=clock, on_wake=lambda w, r: wakes.append(("b", w, r))) as b:
        human(a)
        b.cluster.sweep()  # b serves W too and queues the notice; the slot is taken
        assert b.pending_system_events(W) and wakes == [("a", W, REASON)]
        clock.now += 21
        human(b, T2)        # a new notice in b after the window: b wins the slot
        assert wakes[-1] == ("b", W, f"session-state: {T2}") and len(wakes) == 2


def test_a_later_material_event_re_wakes_a_pending_watcher_after_its_window(setup):
    url, clock = setup
    wakes: list[tuple[str, str]] = []
    with Gateway.open(url, clock=clock, on_wake=lambda w, r: wakes.append((w, r))) as gw:
        human(gw)
        assert wakes == [(W, REASON)]
        clock.now += 5
        human(gw)                 # within the window: coalesced
        clock.now += 20
        human(gw, actor_id=W)     # W's own event is not material to it (R2)
        assert len(wakes) == 1
        human(gw)                 # the window has passed: the heal
        assert wakes == [(W, REASON)] * 2
        gw.drain_system_events(W)
        gw.drain_system_events(W)
        clock.now += 60
        assert gw.pending_system_events(W) == []
        human(gw, T2, actor_id="agent:c:main")  # a new episode on another target wakes as R12 says
        assert len(wakes) == 3


def test_the_window_survives_a_restart(setup):
    url, clock = setup
    wakes: list[str] = []
    with Gateway.open(url, clock=clock, on_wake=lambda w, r: wakes.append(w)) as gw:
        human(gw)
    clock.now += 5
    with Gateway.open(url, clock=clock, on_wake=lambda w, r: wakes.append(w)) as gw:
        assert gw.pending_system_events(W)  # the startup sweep re-queued it, within the window
    assert wakes == [W]


def test_the_serving_process_is_re_woken_by_another_process_event(setup):
    url, clock = setup
    wakes: list[tuple[str, str]] = []
    with Gateway.open(url, clock=clock, serve=[]) as recorder, \
         Gateway.open(url, clock=clock, serve=[W], on_wake=lambda w, r: wakes.append((w, r))) as server:
        human(recorder)
        server.cluster.sweep()
        assert wakes == [(W, REASON)]
        clock.now += 25
        human(recorder)  # pending: nothing is written, only the log grows
        server.cluster.sweep()
        assert wakes == [(W, REASON)] * 2


def test_an_event_inspects_only_the_top_of_the_pending_watchers():
    clock = Clock()
    woken: list[str] = []
    coalescer = WakeCoalescer(lambda w, r: woken.append(w), clock)
    checks = []

    def still_pending(watcher: str, target: tuple[str, str]) -> bool:
        checks.append(watcher)
        return True

    rewaker = Rewaker(coalescer, still_pending)
    target = (T, "b")
    for i in range(1000):
        watcher = f"agent:w{i}:main"
        coalescer.wake(watcher, "first")
        rewaker.track(watcher, target)
        clock.now += 0.001
    woken.clear()
    for _ in range(100):  # nobody is due: the top's stamp says so, nothing is read
        rewaker.on_material(target, None, clock.now)
    assert woken == [] and checks == []
    clock.now += 20
    checks.clear()
    assert rewaker.on_material(target, None, clock.now) == 1000  # all due: each woken once
    assert rewaker.on_material(target, None, clock.now) == 0
    assert len(woken) == 1000 and len(set(woken)) == 1000

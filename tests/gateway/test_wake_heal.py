"""R23's heal (``Rewaker.on_material``) in a gateway: a watcher whose notice is still pending
one window after its wake is woken again by the next material event on its target, at exactly
one window and again one window later; not for a target it stopped watching, not when woken
since for another target (neither waking nor owing a wake); filed again by its next notice
after a drain; one passed over on a target does not keep the next pending watcher from its
heal. The heal on the coalescer alone is in test_wake_coalescer.py. A fake clock: nothing is
timed."""

from __future__ import annotations

from sessionstate import Gateway
from tests.gateway.helpers import human
from tests.helpers import Clock

MANAGER, CHILD = "agent:main:main", "agent:main:subagent:child"
PEER, ELSEWHERE = "agent:x:main", "agent:y:main"  # PEER sorts after MANAGER: heap ties pop MANAGER
WINDOW = 20.0


def healing_gateway(db_url: str, clock: Clock, woken: list[tuple[str, float]]) -> Gateway:
    gw = Gateway.open(db_url, clock=clock, wake_window=WINDOW,
                      on_wake=lambda watcher, reason: woken.append((watcher, clock.now)))
    gw.create_session(MANAGER)
    gw.create_session(CHILD, kind="subagent", parent=MANAGER)
    gw.create_session(PEER)
    gw.create_session(ELSEWHERE)
    gw.watch(PEER, CHILD)
    return gw


def test_the_heal_comes_at_exactly_one_window_and_again_one_window_later(db_url):
    clock, woken = Clock(), []
    with healing_gateway(db_url, clock, woken) as gw:
        start = clock.now
        human(gw, CHILD)                  # both woken at t=0; neither turn drains
        for window in (1, 2):
            clock.now = start + window * WINDOW
            human(gw, CHILD)
        assert woken == [(watcher, start + n * WINDOW) for n in range(3) for watcher in (MANAGER, PEER)]


def passed_over_then_peer_healed(db_url: str, pass_over) -> list[tuple[str, float]]:
    """Both watchers woken for CHILD at t=0; ``pass_over(gw, start)`` makes MANAGER's entry, the
    first one the heap looks at, one it passes over; then a material event at t=25."""
    clock, woken = Clock(), []
    with healing_gateway(db_url, clock, woken) as gw:
        start = clock.now
        human(gw, CHILD)
        actor = pass_over(gw, clock, start)
        clock.now = start + WINDOW + 5
        assert gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="hi",
                               actor_id=actor)
        return [(watcher, at - start) for watcher, at in woken]


def test_a_watcher_passed_over_for_its_own_event_does_not_keep_the_next_from_its_heal(db_url):
    woken = passed_over_then_peer_healed(db_url, lambda gw, clock, start: MANAGER)
    assert woken == [(MANAGER, 0), (PEER, 0), (PEER, WINDOW + 5)]


def test_a_watcher_woken_since_for_another_target_does_not_keep_the_next_from_its_heal(db_url):
    def woken_for_elsewhere(gw: Gateway, clock: Clock, start: float) -> None:
        gw.watch(MANAGER, ELSEWHERE)
        clock.now = start + WINDOW + 1
        human(gw, ELSEWHERE)              # MANAGER woken at t=21: its CHILD entry is re-filed

    woken = passed_over_then_peer_healed(db_url, woken_for_elsewhere)
    assert woken == [(MANAGER, 0), (PEER, 0), (MANAGER, WINDOW + 1), (PEER, WINDOW + 5)]


def test_a_watcher_whose_notice_is_gone_does_not_keep_the_next_from_its_heal(db_url):
    def drained(gw: Gateway, clock: Clock, start: float) -> str:
        assert gw.drain_system_events(MANAGER)
        return MANAGER                    # its own event: no new notice for it either

    woken = passed_over_then_peer_healed(db_url, drained)
    assert woken == [(MANAGER, 0), (PEER, 0), (PEER, WINDOW + 5)]


def test_a_watcher_passed_over_before_one_still_inside_its_window_stays_filed(db_url):
    clock, woken = Clock(), []
    with healing_gateway(db_url, clock, woken) as gw:
        gw.unwatch(PEER, CHILD)
        start = clock.now
        human(gw, CHILD)                  # MANAGER woken at t=0
        clock.now = start + 10
        gw.watch(PEER, CHILD)
        human(gw, CHILD)                  # PEER woken at t=10
        clock.now = start + WINDOW + 5    # MANAGER's own event: passed over; PEER still inside
        assert gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="mine",
                               actor_id=MANAGER)
        clock.now = start + WINDOW + 11
        human(gw, CHILD)                  # both past their windows: both healed
        assert [(watcher, at - start) for watcher, at in woken] == [
            (MANAGER, 0), (PEER, 10), (MANAGER, WINDOW + 11), (PEER, WINDOW + 11)]


def times_woken(woken: list[tuple[str, float]], watcher: str, start: float) -> list[float]:
    """The watcher's wakes, in seconds after ``start``."""
    return [at - start for who, at in woken if who == watcher]


def test_a_watcher_dropped_with_its_drained_notice_is_healed_again_after_its_next_notice(db_url):
    clock, woken = Clock(), []
    with healing_gateway(db_url, clock, woken) as gw:
        start = clock.now
        human(gw, CHILD)                  # MANAGER and PEER woken at t=0
        assert gw.drain_system_events(MANAGER)
        clock.now = start + WINDOW + 5    # MANAGER's own event: its entry (notice gone) dropped
        assert gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="mine",
                               actor_id=MANAGER)
        clock.now = start + 2 * WINDOW + 10
        human(gw, CHILD)                  # a new notice for MANAGER: woken at once, filed again
        clock.now = start + 3 * WINDOW + 10
        human(gw, CHILD)                  # still pending one window later: healed
        assert times_woken(woken, MANAGER, start) == [0, 2 * WINDOW + 10, 3 * WINDOW + 10]
        assert times_woken(woken, PEER, start) == [0, WINDOW + 5, 2 * WINDOW + 10, 3 * WINDOW + 10]


def test_a_watcher_that_stopped_watching_is_not_healed_for_that_target(db_url):
    clock, woken = Clock(), []
    with healing_gateway(db_url, clock, woken) as gw:
        start = clock.now
        human(gw, CHILD)                  # MANAGER and PEER woken at t=0
        assert gw.unwatch(PEER, CHILD)    # PEER's notice is withdrawn with its cursor
        clock.now = start + WINDOW + 5
        human(gw, CHILD)
        assert times_woken(woken, MANAGER, start) == [0, WINDOW + 5]
        assert times_woken(woken, PEER, start) == [0]


def test_a_heal_that_finds_the_watcher_woken_since_neither_wakes_nor_owes_a_wake(db_url):
    clock, woken = Clock(), []
    with healing_gateway(db_url, clock, woken) as gw:
        gw.unwatch(PEER, CHILD)
        gw.watch(MANAGER, ELSEWHERE)
        start = clock.now
        human(gw, CHILD)                  # MANAGER woken at t=0 for CHILD
        clock.now = start + WINDOW + 1
        human(gw, ELSEWHERE)              # and at t=21 for ELSEWHERE
        clock.now = start + WINDOW + 5    # CHILD's entry is due by its stamp, not by the last wake
        human(gw, CHILD)
        assert times_woken(woken, MANAGER, start) == [0, WINDOW + 1]
        # An owed wake here would be one no line asked for (observers would count it).
        assert gw.ops.diagnostics().owed_wakes == {}

"""Tests from the third mutmut run over services/notice/{wakes,release,rewake}.py (tests/gateway
as the selection; a fake clock, nothing is timed). Each pins one behaviour the suite did not
hold; the first five are R23's heal (``Rewaker.on_material``), the others the release of
notices and lines after a commit (``NoticeRelease``) and the window's refusal:

- a watcher whose entry was dropped because its notice was drained is filed again by its next
  notice, and healed one window after that notice's wake;
- a watcher that stopped watching a target is not healed for it (its notice went with the
  cursor), while the target's other pending watcher is;
- a heal that finds the watcher woken since (for another target) waits for that wake's window:
  it neither wakes nor owes a wake;
- a heal whose wake lost the durable slot to another process is filed at that process's wake,
  so the next heal comes one window after it, not one window after the lost attempt;
- ``on_material`` answers how many watchers it woke: none for a target nobody is filed for;
- a restart's sweep queues each target's notice under that target's name, even where one
  target's agent id is another's key and both notices share their ``since``;
- a notice whose watcher another process serves (R19) does not keep the next watcher of the
  same event from its notice;
- a notice opened while its pair was ambient is not woken when the pair is promoted later in
  the same transaction (R25, R26: the provenance the notice's own read found decides); the
  heal wakes for it;
- a deleted session's own queued lines, notices and plain lines alike, go with it: the key
  created again starts with none (R14);
- an event nobody watches is in the trace file when ``record_event`` returns (spec 15.3: its
  batch waits for the commit's notices, and an empty list of notices must still release it);
- a bad ``wake_window`` is refused with a message naming the option and what it must be.
"""

from __future__ import annotations

import pytest

from sessionstate import Gateway, InvalidArgument
from sessionstate.services.notice.rewake import Rewaker
from sessionstate.shared.formats import notice_text
from tests.gateway.test_mutants_trace_locking import lines_of
from tests.gateway.test_mutants_wakes import Clock, human
from tests.gateway.test_mutants_wakes_rest import (
    CHILD, ELSEWHERE, FIRST, MANAGER, PEER, SECOND, WINDOW, Coalesced, healing_gateway,
)


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


@pytest.mark.parametrize("window", [0, "20"])
def test_a_bad_window_is_refused_with_what_it_must_be(db_url, window):
    with pytest.raises(InvalidArgument) as refused:
        Gateway.open(db_url, wake_window=window)
    assert str(refused.value) == "wake_window must be a positive finite number of seconds"


def test_a_restart_queues_each_notice_under_its_own_target_when_keys_and_agent_ids_cross(db_url):
    # Unqualified keys with their agent ids: alpha's agent id is beta's key, beta's key is
    # gamma's agent id. Without creation events every pair was last seen at 0, so the sweep's
    # notices (one batch) share their ``since``; each must still name its own target.
    targets = [("alpha", "beta"), ("beta", "x"), ("gamma", "alpha")]
    with Gateway.open(db_url, record_created=False) as gw:
        gw.create_session(MANAGER)
        for key, agent in targets:
            gw.create_session(key, agent_id=agent)
            gw.watch(MANAGER, key, target_agent_id=agent)
        for key, agent in targets:
            assert gw.record_event(key, "human_direct_message", actor_type="human", summary="hi",
                                   agent_id=agent)
    with Gateway.open(db_url) as gw:
        assert sorted(gw.pending_system_events(MANAGER)) == sorted(notice_text(key, 0) for key, _ in targets)


def test_a_watcher_served_elsewhere_does_not_keep_the_next_from_its_notice(db_url):
    target, served = "agent:t:main", "agent:m:main"
    watchers = ["agent:a:main", served, "agent:y:main"]  # served here: only the middle one
    with Gateway.open(db_url, serve=["agent:m:*"]) as gw:
        for key in [*watchers, target]:
            gw.create_session(key)
        for watcher in watchers:
            gw.watch(watcher, target)
        human(gw, target)
        queued = {watcher: gw.pending_system_events(watcher) for watcher in watchers}
    assert [len(lines) for lines in queued.values()] == [0, 1, 0]
    assert queued[served][0].startswith(f'Session "{target}" changed')


def test_a_notice_opened_while_ambient_is_not_woken_by_a_promotion_in_its_transaction(db_url):
    watcher, target = "agent:w:main", "agent:t:main"
    clock, woken = Clock(), []
    with Gateway.open(db_url, clock=clock, wake_window=WINDOW,
                      on_wake=lambda who, reason: woken.append((who, clock.now))) as gw:
        start = clock.now
        gw.create_session(watcher)
        gw.create_session(target)
        gw.watch(watcher, target, ambient=True)
        with gw.transaction():
            human(gw, target)             # the notice opens while the pair is ambient ...
            gw.watch(watcher, target)     # ... and the pair is promoted before the commit
        assert woken == [] and len(gw.pending_system_events(watcher)) == 1
        clock.now = start + WINDOW + 5
        human(gw, target)                 # the heal wakes for it
        assert woken == [(watcher, start + WINDOW + 5)]


def test_a_deleted_session_takes_its_queued_lines_with_it(db_url):
    watcher, target = "agent:w:main", "agent:t:main"
    with Gateway.open(db_url) as gw:
        gw.create_session(watcher)
        gw.create_session(target)
        gw.watch(watcher, target)
        human(gw, target)
        assert gw.ops.enqueue_system_event(watcher, "a plain line")
        assert len(gw.pending_system_events(watcher)) == 2
        gw.ops.delete_session(watcher)
        gw.create_session(watcher)        # the same key, a new session: nothing is owed to it
        assert gw.pending_system_events(watcher) == []


def test_an_event_nobody_watches_is_in_the_trace_when_it_returns(db_url, tmp_path):
    trace = tmp_path / "trace.jsonl"
    with Gateway.open(db_url, trace=trace) as gw:
        gw.create_session("agent:lone:main")
        human(gw, "agent:lone:main")
        assert len(lines_of(trace, "event", kind="human_direct_message")) == 1

"""R26 in the explorer: the configuration's ambient cursor (A on C) is delivered like the
others but never asks to wake A; the checks are witnessed (not vacuous) and can fail."""

from __future__ import annotations

from sessionstate.verify.modelcheck import initial_node, run_modelcheck, step
from sessionstate.verify.replay import replay_trace
from sessionstate.verify.world import AMBIENT, PAIRS, all_actions


def test_the_configuration_has_exactly_one_ambient_cursor_among_its_pairs():
    assert len(AMBIENT) == 1 and AMBIENT <= set(PAIRS)
    watcher = next(iter(AMBIENT))[0]
    assert any(p[0] == watcher and p not in AMBIENT for p in PAIRS)  # the same watcher also wakes
    assert ("watch", "A", "C", "ambient") in all_actions() and ("watch", "A", "B", "explicit") in all_actions()


def test_the_ambient_cursor_is_delivered_and_never_asks_a_wake_in_every_state_to_depth_5():
    report, _ = run_modelcheck(5)
    assert report.ok, report.violation.render()
    assert report.ambient_delivered > 0  # drains delivered its notice in explored states
    assert report.wake_requests > 0  # explicit pairs did ask (the comparison is not empty)


def test_two_processes_deliver_the_ambient_cursor_without_waking():
    report, _ = run_modelcheck(4, processes=2)
    assert report.ok, report.violation.render()
    assert report.ambient_delivered > 0 and report.wake_requests > 0


def test_one_step_shows_the_split_per_pair():
    node = initial_node()
    node, messages = step(node, ("event", "C", None, True))  # A (ambient) and B (explicit) freeze on C
    assert messages == []
    assert node.mach.woken == [("B", "C")] and node.ref.model.wake_requests == [("B", "C")]
    assert {n[:2] for n in node.ref.queue} == {("A", "C"), ("B", "C")}  # both queued


def test_a_machine_path_that_wakes_ambient_pairs_is_caught_with_a_one_step_trace():
    report, _ = run_modelcheck(3, ambient_wakes=True)
    assert not report.ok
    assert len(report.violation.trace) == 1 and "R26" in report.violation.render()


def test_the_real_gateway_never_wakes_the_ambient_pair_on_a_replayed_trace(tmp_path):
    trace = [("event", "C", None, True), ("drain", "A"), ("event", "C", None, True),
             ("restart",), ("event", "C", "B", True), ("drain", "A"), ("drain", "B")]
    assert replay_trace(trace, tmp_path) == []


def test_the_replay_sees_a_gateway_that_wakes_the_ambient_pair(tmp_path, monkeypatch):
    from sessionstate.services.notice.protocol import NoticeProtocol

    monkeypatch.setattr(NoticeProtocol, "wakes_for", lambda self, watcher, target, provenance=None: True)
    diff = replay_trace([("event", "C", None, True)], tmp_path)
    assert any("R26" in line for line in diff), diff

"""The exhaustive model check: fast profile in CI, the issue's depth in the slow profile."""

from __future__ import annotations

import pytest

from sessionstate.verify.modelcheck import initial_node, run_modelcheck, sample_traces, step
from sessionstate.verify.replay import replay_trace


def test_fast_profile_explores_every_state_to_depth_5_without_a_violation():
    report, parents = run_modelcheck(5)
    assert report.ok, report.violation.render()
    assert report.depth_reached == 5 and report.states == len(parents) > 10_000
    # LIV1 had obligations to check: states in which a wake is owed (a wake layer that never
    # owes, the behaviour before R12's owed wakes, leaves none; see the test below).
    assert report.owing_states > 100, report.owing_states


def test_every_fire_agrees_with_the_bound_transitions_machine():
    report, _ = run_modelcheck(3, check_bound=True)
    assert report.ok, report.violation.render()


def test_a_missing_prune_write_back_is_caught_with_the_shortest_trace():
    # R7/R13 broken on purpose: pruning deletes the events the lazy watermark is read from.
    report, _ = run_modelcheck(6, write_back_on_prune=False)
    assert not report.ok
    assert [a[0] for a in report.violation.trace] == ["event", "event", "prune", "prune"]
    assert "1. material/self event on B by human" in report.violation.render()


def test_a_broken_ack_is_caught_by_the_invariants(monkeypatch):
    from sessionstate.verify import refmodel

    def advance_to_head(self, watcher):  # R8 violated: ack to the head, dropping the follow-up
        for target, _ in self.queues.pop(watcher, {}).values():
            cursor = self.cursors[(watcher, target)]
            cursor.last_seen = cursor.notified = cursor.material
            self.owed = {o for o in self.owed if not (o[:2] == (watcher, target) and o[2] <= cursor.material)}
        return []

    monkeypatch.setattr(refmodel.Model, "drain", advance_to_head)
    report, _ = run_modelcheck(5)
    assert not report.ok and len(report.violation.trace) <= 5


def test_invariant_checks_see_a_dropped_notice():
    node = initial_node()
    node, messages = step(node, ("event", "B", None, True))
    assert messages == []
    node.ref.model.queues.clear()
    node.mach.queue.clear()
    _, messages = step(node, ("event", "B", "A", False))
    assert any(m.startswith("INV4") for m in messages) and any(m.startswith("INV6") for m in messages)


def test_sampled_traces_replay_equal_on_the_real_store(tmp_path):
    _, parents = run_modelcheck(4)
    traces = list(sample_traces(parents, 30, seed=1))
    assert len(traces) == 30 and max(map(len, traces)) == 4
    for trace in traces:
        assert replay_trace(trace, tmp_path) == []


def test_replay_reports_a_difference(tmp_path, monkeypatch):
    from sessionstate.verify import refmodel

    monkeypatch.setattr(refmodel.Model, "restart", lambda self: self.queues.clear())  # no sweep
    trace = [("event", "B", None, True), ("restart",)]
    assert any("queue of A" in line for line in replay_trace(trace, tmp_path))


@pytest.mark.slow
def test_slow_profile_depth_10():
    report, parents = run_modelcheck(10)
    assert report.ok, report.violation.render()
    assert report.depth_reached == 10 or report.exhausted
    for trace in sample_traces(parents, 1000, seed=0):
        assert replay_trace(trace) == []


def test_a_dropped_wake_strands_a_notice_with_the_shortest_trace():
    # The wake as it was before owed wakes (R12): suppressed inside the window, remembered by
    # nobody. A notice for A, then a restart inside A's window: the sweep queues it again as a
    # new line (R23) and its wake is dropped. (A's cursor on C is ambient, R26: an event on C
    # asks no wake, so two events no longer make the shortest trace.)
    report, _ = run_modelcheck(5, owed_wakes=False)
    assert not report.ok
    assert [a[0] for a in report.violation.trace] == ["event", "restart"]
    assert any(m.startswith("LIV1") for m in report.violation.messages)


def test_an_owed_wake_fires_when_the_window_passes_and_not_after_a_drain():
    node = initial_node()
    node, messages = step(node, ("event", "B", None, True))
    assert messages == [] and node.wakes.open_windows == {"A"} and node.wakes.owed == (frozenset(),)
    node, messages = step(node, ("event", "C", None, True))  # A's ambient cursor: no wake (R26)
    assert messages == [] and node.wakes.owed == (frozenset(),)
    node, _ = step(node, ("drain", "A"))
    node, messages = step(node, ("event", "B", None, True))  # inside the window: owed
    assert messages == [] and node.wakes.owed == (frozenset({"A"}),)
    ticked, messages = step(node, ("tick",))
    assert messages == [] and ticked.wakes.owed == (frozenset(),) and ticked.wakes.new == (frozenset(),)
    assert ticked.wakes.open_windows == {"A"}  # the owed wake took the slot
    drained, _ = step(node, ("drain", "A"))
    drained, messages = step(drained, ("tick",))
    assert messages == [] and drained.wakes.open_windows == frozenset()  # nothing held: no wake


def test_a_crash_that_loses_the_wake_leaves_the_restarted_process_owing_it():
    node = initial_node()
    node, _ = step(node, ("event", "B", None, True))
    node, _ = step(node, ("tick",))               # the window passed without a turn
    node, messages = step(node, ("crash",))       # took the slot for a re-wake, then died
    assert messages == []
    assert node.wakes.owed == (frozenset({"A"}),) and node.wakes.open_windows == {"A"}
    node, messages = step(node, ("tick",))
    assert messages == [] and node.wakes.owed == (frozenset(),)


def test_a_wake_layer_that_never_owes_leaves_liv1_nothing_to_check(monkeypatch):
    from sessionstate.verify import wakemodel

    monkeypatch.setattr(wakemodel._Draft, "wake_or_owe",
                        lambda self, process, watcher, *, owed_wakes, lost=False: None)
    report, _ = run_modelcheck(3)
    assert report.owing_states == 0

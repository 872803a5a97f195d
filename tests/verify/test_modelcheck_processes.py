"""The exhaustive model check with two processes on one database (spec section 6a): INV10 on
every drain, INV11 in every process that has swept the newest commit, and planted bugs that
the check must find."""

from __future__ import annotations

import pytest

from sessionstate.statemachine.table import DRAIN
from sessionstate.verify.machinepath import SharedMachWorld
from sessionstate.verify.modelcheck import initial_node, run_modelcheck, sample_traces, step
from sessionstate.verify.refmodel import Notice
from sessionstate.verify.replay import replay_two_process_trace
from sessionstate.verify.world import all_actions, describe, process_of

# Issue 12's report, as a trace: A's notice for B reaches both processes (A has no claim, so
# both serve it); a drain in each; a second episode recorded in process 0, drained there.
ISSUE_TRACE = [
    ("event", "B", None, True, 0),
    ("sweep", 1),
    ("drain", "A", 1),
    ("event", "B", None, True, 0),
    ("drain", "A", 0),
]


def drain_from_the_local_queue(self: SharedMachWorld, watcher: str, process: int) -> list[Notice]:
    """The drain before R21: it delivers what this process queued, not what the cursors owe
    (it acknowledges by the cursor, so the only symptom is in the lines delivered)."""
    lines = sorted(n for n in self.queues[process] if n[0] == watcher)
    for target in sorted({t for _, t, _ in lines}):
        positions = self.effective((watcher, target))
        if positions is not None and positions.last_seen < positions.notified:
            fired = self._fire((watcher, target), positions, DRAIN)
            self._write((watcher, target), fired.positions)
            if fired.notice_since is not None:
                self.queue.add((watcher, target, fired.notice_since))
    self.queues[process] -= set(lines)
    self._release(process)
    return lines


def walk(trace):
    node, seen = initial_node(2), []
    for action in trace:
        node, messages = step(node, action)
        seen.append(messages)
    return node, seen


def test_two_process_actions_name_their_process_where_a_queue_is_touched():
    actions = all_actions(2)
    assert len(actions) == len(set(actions))
    for action in actions:
        touches_no_queue = action[0] in ("watch", "prune", "tick") or (action[0] == "event" and not action[3])
        assert (process_of(action) is None) == touches_no_queue, action
    assert describe(("drain", "A", 1)) == "drain A in process 1"
    assert describe(("event", "B", None, True, 0)) == "material/self event on B by human in process 0"


@pytest.fixture(scope="module")
def depth_4():
    return run_modelcheck(4, processes=2)


def test_two_processes_depth_4_without_a_violation(depth_4):
    report, parents = depth_4
    assert report.ok, report.violation.render()
    assert report.depth_reached == 4 and report.states == len(parents) > 20_000
    assert report.liveness_checked == report.states - 1


def test_sampled_two_process_traces_replay_equal_on_two_real_gateways(depth_4, tmp_path):
    traces = list(sample_traces(depth_4[1], 40, seed=1))  # 40: the wake layer's actions dilute 30
    assert len(traces) == 40 and max(map(len, traces)) == 4
    assert {a[0] for t in traces for a in t} >= {"event", "drain", "sweep", "attach", "tick"}
    for trace in traces:
        assert replay_two_process_trace(trace, tmp_path) == []
    assert replay_two_process_trace(ISSUE_TRACE, tmp_path) == []


def test_the_two_process_replay_reports_a_difference(monkeypatch, tmp_path):
    monkeypatch.setattr(SharedMachWorld, "sweep", lambda self, process: None)  # R22 left out
    diff = replay_two_process_trace(ISSUE_TRACE[:2], tmp_path)
    assert diff[:2] == ["1. material/self event on B by human in process 0", "2. sweep in process 1"]
    assert any(line.startswith("queue of A in process 1: real ['Session") for line in diff), diff


def test_the_issue_trace_delivers_each_episode_once_by_the_durable_cursor():
    node, seen = walk(ISSUE_TRACE)
    assert seen == [[]] * len(ISSUE_TRACE)
    # Process 0 never swept after process 1's drain: it still held the first episode's notice
    # when the second's entered and replaced it (R5); the R21 drain delivered the second and
    # left nothing queued.
    assert node.mach.queues[0] == set() and node.ref.queue == set()
    assert node.fresh == (False, False)  # neither has swept the other's last commit
    node, messages = step(node, ("sweep", 0))
    assert messages == [] and node.fresh == (True, False)


def test_a_notice_entering_a_process_queue_replaces_its_pairs_earlier_text(tmp_path):
    """R5 across processes: process 0 holds A's notice on B when process 1 drains it (ending
    that episode) before process 0's sweep; the next episode's notice, recorded in process 0,
    replaces the first one's text there, in the machine path and on the real gateways."""
    trace = ISSUE_TRACE[:4]
    node, seen = walk(trace[:3])
    assert node.mach.queues == [{("A", "B", 0)}, set()]  # the first episode's text, stale in process 0
    node, seen = walk(trace)
    assert seen == [[]] * len(trace)
    assert node.mach.queues == [{("A", "B", 1)}, set()]  # one text for the pair: the second episode's
    assert replay_two_process_trace(trace, tmp_path) == []  # each gateway's queue is its process's


def test_a_drain_from_the_local_queue_is_caught_with_the_shortest_trace(monkeypatch):
    monkeypatch.setattr(SharedMachWorld, "drain", drain_from_the_local_queue)
    report, _ = run_modelcheck(4, processes=2)
    assert not report.ok
    # Shortest: two episodes recorded in process 0; the liveness drains (round 0 in process 0,
    # round 1 in process 1) leave the follow-up in process 0, and process 1 delivers nothing.
    assert [describe(a) for a in report.violation.trace] == ["material/self event on B by human in process 0"] * 2
    assert any(m.startswith("while draining: INV10: drain A in process 1: the machine path delivered []")
               for m in report.violation.messages), report.violation.render()


def test_a_drain_from_the_local_queue_delivers_a_line_another_process_acknowledged(monkeypatch):
    # Process 0 still holds A's notice on B when process 1 has drained it (before 0's sweep):
    # the local-queue drain delivers it again, where R21 delivers only what the cursors owe.
    # (ISSUE_TRACE's two lines for one target no longer arise: R5 replaces the stale text.)
    stale = [("event", "B", None, True, 0), ("sweep", 1), ("drain", "A", 1), ("drain", "A", 0)]
    monkeypatch.setattr(SharedMachWorld, "drain", drain_from_the_local_queue)
    _, seen = walk(stale)
    assert seen[:-1] == [[]] * (len(stale) - 1)
    assert any("INV10: drain A in process 0: the machine path delivered [('A', 'B', 0)], the pending episodes"
               " were []" in m for m in seen[-1]), seen[-1]


def test_a_sweep_that_does_not_learn_the_claims_breaks_inv11(monkeypatch):
    def sweep_with_stale_claims(self: SharedMachWorld, process: int) -> None:
        for watcher in sorted(self.sessions | {n[0] for n in self.queues[process]}):
            self._reconcile(process, watcher)

    monkeypatch.setattr(SharedMachWorld, "sweep", sweep_with_stale_claims)
    report, _ = run_modelcheck(4, processes=2)
    assert not report.ok
    assert any(m.startswith("INV11: process") and "does not serve" in m for m in report.violation.messages), \
        report.violation.render()


def test_two_process_fires_agree_with_the_bound_transitions_machine():
    report, _ = run_modelcheck(2, processes=2, check_bound=True)
    assert report.ok, report.violation.render()
    assert report.states == 225  # 222 before the wake layer (tick, crash); 232 with it before A's cursor on C became ambient (its notices never wake, R26), 224 before an attach queued its lines afresh (R23)


@pytest.mark.slow
def test_slow_profile_two_processes_depth_5():
    report, parents = run_modelcheck(5, processes=2)
    assert report.ok, report.violation.render()
    assert report.depth_reached == 5 or report.exhausted
    for trace in sample_traces(parents, 1000, seed=0):
        assert replay_two_process_trace(trace) == []


def test_a_self_event_that_queues_a_notice_is_caught_in_any_process(monkeypatch):
    real_event = SharedMachWorld.event

    def event_ignoring_self_suppression(self, target, actor, notifying, process=None):  # R2 broken
        seq = real_event(self, target, actor, notifying, process)
        if process is not None and (actor, target) in self.cursors:
            self.queues[process].add((actor, target, self.cursors[(actor, target)][0]))
        return seq

    monkeypatch.setattr(SharedMachWorld, "event", event_ignoring_self_suppression)
    node, seen = walk([("event", "B", None, True, 0), ("event", "B", "A", True, 1)])
    assert node.fresh == (True, False)  # process 1 is out of step: only the per-process INV5 sees it
    assert seen[1] == ["INV5: material/self event on B by A in process 1 opened a notice for (A, B) in process 1"]

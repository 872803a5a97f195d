"""Spec 15.2's merge of tied units (transactions without events that read the same commit key
in different processes) looks past each process's next unit, and puts a drain after the removal
of a pending pair it skipped.

Found by the nemesis (trials/nemesis.py, SQLite, seed 1): process A committed, at one commit
key, a drain of one pair and then a ``watch`` of another pair that kept its positions (a seed
``keep``); process B drained that other pair at the same key, after A's ``keep``. Looking only
at each process's next unit, the merge took B's drain first (A's next unit, on a disjoint pair,
still fitted after it), and A's ``keep`` then started from positions the pair had left: a
false T3 on a trace the real commit order explains.
"""

from __future__ import annotations

from sessionstate import Gateway
from sessionstate.verify.trace_check import TraceChecker
from sessionstate.verify.trace_read import TraceLine, Unit, merge, read_trace
from tests.verify.helpers import read_lines, write_lines

P, Q = ("w1", ("t1", "a")), ("w2", ("t2", "a"))


def unit(pid: int, tx: int, key: int, steps: list[tuple[tuple, tuple, tuple]]) -> Unit:
    made = Unit((pid, f"g{pid}"), tx, key, tx)
    for pair, before, after in steps:
        made.lines.append(TraceLine("t", tx, {"op": "step", "pair": pair, "before": before, "after": after}))
    return made


def test_a_tied_unit_behind_another_of_its_process_keeps_its_place_before_a_move_of_its_pair():
    positions = {P: (1, 1, 1), Q: (1, 2, 3)}

    def fits(u: Unit, overlay: dict) -> bool:
        seen = set()
        for line in u.lines:
            pair = line.data["pair"]
            if pair not in seen and overlay.get(pair, positions[pair]) != line.data["before"]:
                return False
            seen.add(pair)
        return True

    def outcome(u: Unit) -> dict:
        return {line.data["pair"]: line.data["after"] for line in u.lines}

    # B is the smaller process id: the merge looks at it first.
    a = [unit(2, 1, 10, [(P, (1, 1, 1), (1, 1, 1))]), unit(2, 2, 10, [(Q, (1, 2, 3), (1, 2, 3))])]  # drain, keep
    b = [unit(1, 1, 10, [(Q, (1, 2, 3), (2, 3, 3))])]  # the drain of Q that A's keep came before
    order = []
    for chosen in merge({1: b, 2: a}, fits, outcome):
        assert fits(chosen, {}), f"{chosen.proc} tx {chosen.tx} merged where it does not fit"
        positions.update(outcome(chosen))
        order.append((chosen.proc[0], chosen.tx))
    assert order == [(2, 1), (2, 2), (1, 1)]


def test_a_drain_merges_after_another_process_removed_a_pending_pair_it_then_skipped(tmp_path):
    # Found by the nemesis (SQLite, the long profile, seed 20261205): W held two pending pairs;
    # process B unwatched one, then process A's drain delivered the other, both at one commit
    # key. Taken first (A's process id sorts first), the drain left a pending pair undelivered:
    # a false R21. Spec 15.2: a drain fits only where it delivers every pending pair of W.
    url = f"sqlite:///{tmp_path / 'state.db'}"
    w, t1, t2 = "agent:w:main", "agent:t1:main", "agent:t2:main"
    with Gateway.open(url, trace=tmp_path / "a.jsonl", notify_on_create=False) as a:
        for key in (w, t1, t2):
            a.create_session(key)
        a.watch(w, t1)
        a.watch(w, t2)
        for target in (t1, t2):
            assert a.record_event(target, "goal_changed", actor_type="human", summary="new goal")
        with Gateway.open(url, trace=tmp_path / "b.jsonl", notify_on_create=False) as b:
            assert b.unwatch(w, t2)
        lines = a.drain_system_events(w)
        assert len(lines) == 1 and t1 in lines[0]
    traces = []
    for name, pid in (("a", 1), ("b", 2)):  # A's process first in the merge's order
        rewritten = [{**line, "pid": pid} for line in read_lines(tmp_path / f"{name}.jsonl")]
        traces.append(read_trace(write_lines(tmp_path / f"{name}-{pid}.jsonl", rewritten)))
    summary = TraceChecker().run(traces)
    assert summary.steps > 0


def test_a_prune_merges_after_another_process_drain_whose_positions_it_wrote(tmp_path):
    # Found by the nemesis (SQLite, the long profile, seed 20261205): process B drained a pair
    # (a follow-up episode left it pending), then process A pruned its target, both at one
    # commit key; taken first, the prune wrote positions the pair had not reached: a false R7.
    # Spec 15.2: a prune fits only where each pending pair of its sessions stands where it wrote.
    url = f"sqlite:///{tmp_path / 'state.db'}"
    w, t = "agent:w:main", "agent:t:main"
    with Gateway.open(url, trace=tmp_path / "a.jsonl", notify_on_create=False, max_rows=2) as a:
        for key in (w, t):
            a.create_session(key)
        a.watch(w, t)
        assert a.record_event(t, "goal_changed", actor_type="human", summary="first")
        assert a.record_event(t, "goal_changed", actor_type="human", summary="second")
        with Gateway.open(url, trace=tmp_path / "b.jsonl", notify_on_create=False) as b:
            assert len(b.drain_system_events(w)) == 1  # the first episode; the second opens
        a.prune()
    traces = []
    for name, pid in (("a", 1), ("b", 2)):  # A's process (the prune) first in the merge's order
        rewritten = [{**line, "pid": pid} for line in read_lines(tmp_path / f"{name}.jsonl")]
        assert name == "b" or any(line["op"] == "prune" for line in rewritten)
        traces.append(read_trace(write_lines(tmp_path / f"{name}-{pid}.jsonl", rewritten)))
    assert TraceChecker().run(traces).steps > 0


def test_of_two_prunes_at_one_commit_key_the_one_that_raised_the_watermark_less_merges_first(tmp_path):
    # Found by the nemesis (SQLite, the long profile, seed 20261205): two processes pruned one
    # session at one commit key, the second deeper; taken first, the deeper prune's watermark
    # was followed by the shallower one's: a false INV7 (the watermark "fell"). Spec 15.2: a
    # prune fits only where each watermark it recorded is at or above the replayed one (R13).
    url = f"sqlite:///{tmp_path / 'state.db'}"
    t = "agent:t:main"
    with Gateway.open(url, trace=tmp_path / "shallow.jsonl", notify_on_create=False, max_rows=3) as shallow:
        shallow.create_session(t)
        for i in range(5):
            assert shallow.record_event(t, "goal_changed", actor_type="human", summary=f"goal {i}")
        shallow.prune()
        with Gateway.open(url, trace=tmp_path / "deep.jsonl", notify_on_create=False, max_rows=1) as deep:
            deep.prune()
    marks = {}
    traces = []
    for name, pid in (("deep", 1), ("shallow", 2)):  # the deeper prune's process first in the merge's order
        rewritten = [{**line, "pid": pid} for line in read_lines(tmp_path / f"{name}.jsonl")]
        [prune] = [line for line in rewritten if line["op"] == "prune"]
        marks[name] = (prune["c"], prune["heads"][0][2])
        traces.append(read_trace(write_lines(tmp_path / f"{name}-{pid}.jsonl", rewritten)))
    assert marks["deep"][0] == marks["shallow"][0]  # tied: no event between them
    assert marks["deep"][1] > marks["shallow"][1]
    assert TraceChecker().run(traces).units > 0


def test_two_restart_sweeps_at_one_commit_key_chain_on_a_pair_taken_again(tmp_path):
    # Found by the nemesis (SQLite, seed 1, in CI): a gateway killed without its `close` line
    # makes every pair resynchronised (spec 15.3), so events after it no longer move the
    # replayed positions; two gateways restarting then swept one pair at one commit key, the
    # first moving it on, the second finding it moved. Judged against the stale replayed
    # positions neither sweep fitted, the merge took the second first: a false T3. Spec 15.3: a
    # pair taken again fits any first step, unless a tied unit placed before stepped it.
    url = f"sqlite:///{tmp_path / 'state.db'}"
    w, t = "agent:w:main", "agent:t:main"
    with Gateway.open(url, trace=tmp_path / "lost.jsonl", notify_on_create=False) as lost:
        for key in (w, t):
            lost.create_session(key)
        lost.watch(w, t)
        assert lost.record_event(t, "goal_changed", actor_type="human", summary="first")  # notified
        with Gateway.open(url, trace=tmp_path / "on.jsonl", notify_on_create=False) as going_on:
            # The lost gateway's last batch comes after the other's sweep: from there on the
            # pair is taken again, and the event after it moves no replayed position.
            assert lost.record_event(t, "goal_changed", actor_type="human", summary="second")
            assert going_on.record_event(t, "goal_changed", actor_type="human", summary="third")
    with Gateway.open(url, trace=tmp_path / "first.jsonl", notify_on_create=False):
        pass  # its restart sweep notifies at the second event
    with Gateway.open(url, trace=tmp_path / "second.jsonl", notify_on_create=False):
        pass  # its sweep finds the pair already there
    lines = {name: read_lines(tmp_path / f"{name}.jsonl") for name in ("lost", "on", "first", "second")}
    lines["lost"] = [line for line in lines["lost"] if line["op"] != "close"]  # killed before its close
    sweeps = {name: [line for line in lines[name] if line["op"] == "step" and line["trigger"] == "restart_sweep"]
              for name in ("first", "second")}
    assert sweeps["first"][0]["c"] == sweeps["second"][0]["c"]  # tied
    assert sweeps["first"][0]["before"] != sweeps["first"][0]["after"] == sweeps["second"][0]["before"]
    traces = []
    for name, pid in (("lost", 1), ("on", 2), ("second", 3), ("first", 4)):  # the second sweep first in order
        rewritten = [{**line, "pid": pid} for line in lines[name]]
        traces.append(read_trace(write_lines(tmp_path / f"{name}-{pid}.jsonl", rewritten)))
    summary = TraceChecker().run(traces)
    assert summary.resynced > 0 and summary.steps > 0, summary

"""Fixed replays of falsifying sequences the tools' state machine once found, step by step
with every invariant after each step (as Hypothesis runs them). Shrinking found each only
after minutes of search: a replay keeps the path covered on every run.

Both were wrong predictions of the test, not of the gateway:

- a run whose requester key was deleted and spawned again at the maximum depth: the new
  session is a leaf, so `subagents kill` is refused (tool_not_allowed) and the run goes on;
- a wake sent while a pair's cursor was a spawn edge, then the watcher reset (R14 removes the
  cursor) and watched ambiently: the new ambient cursor never woke (R26), the old wake stays
  in the wake list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import Phase, given, settings, strategies as st

from tests.backends import Backend
from tests.tools.test_stateful_tools import ToolsVersusModel

MAIN, B_MAIN, PEER, GLOBAL = "agent:a:main", "agent:b:main", "agent:a:peer", "global"


def child(name: str) -> str:
    return f"agent:a:subagent:{name}"


class Draws:
    """Stands in for Hypothesis's ``data``: each draw returns the next of the given values."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: object, label: str | None = None) -> Any:
        return self.values.pop(0)


Step = Callable[[ToolsVersusModel], None]


def replay(backend: Backend, steps: Sequence[Step], check: Step) -> None:
    """Runs the steps, then ``check`` on the machine before its teardown."""
    machine_class = type(f"ToolsVersusModel_{backend.name}", (ToolsVersusModel,), {"backend": backend})
    invariants = sorted(name for name in dir(machine_class) if name[:3] == "inv" and name[3:4].isdigit())
    ran: list[bool] = []

    # Inside a Hypothesis test so the rules' note() calls work; one example, no search.
    @settings(max_examples=1, database=None, phases=[Phase.generate], deadline=None)
    @given(st.none())
    def run(_: None) -> None:
        machine = machine_class()
        try:
            machine.start_with_a_manager()
            for step in steps:
                for name in invariants:
                    getattr(machine, name)()
                step(machine)
            for name in invariants:
                getattr(machine, name)()
            check(machine)
            ran.append(True)
        finally:
            machine.teardown()

    run()
    assert ran == [True]


def test_kill_by_a_requester_key_spawned_again_as_a_leaf_is_refused(backend: Backend) -> None:
    replay(backend, [
        lambda m: m.spawn_via_tool(Draws(MAIN)),  # run-t0001
        lambda m: m.spawn_child(Draws(child("c1"), MAIN)),  # depth 1: an orchestrator
        lambda m: m.spawn_via_tool(Draws(child("c1"))),  # run-t0002, requested by c1
        lambda m: m.spawn_via_tool(Draws(child("t0001"))),  # t0003 at depth 2
        lambda m: m.delete(Draws(child("c1"))),
        lambda m: m.spawn_child(Draws(child("c1"), child("t0003"))),  # c1 again, at depth 3: a leaf
        lambda m: m.kill_via_tool(Draws("run-t0002")),
    ], check=refused_and_still_running)


def refused_and_still_running(machine: ToolsVersusModel) -> None:
    assert machine.gw.registry.session_meta(child("c1")).spawn_depth == 3
    assert "run-t0002" in machine.active_runs  # the prediction: refused, not killed
    assert "run-t0002" in {run.run_id for run in machine.gw.runs.active_runs() if (run.requester_key, run.requester_agent_id) == (child("c1"), "a")}


def test_a_wake_before_reset_does_not_count_against_a_later_ambient_cursor(backend: Backend) -> None:
    replay(backend, [
        lambda m: m.spawn_via_tool(Draws(MAIN)),  # spawn cursor main -> t0001
        lambda m: m.record_event(Draws(child("t0001"), None), kind="human_direct_message", actor_type="human",
                                 summary="human message via telegram", dedupe=None, skew=None),
        lambda m: m.reset(Draws(MAIN)),  # R14: the spawn cursor goes
        lambda m: m.watch(Draws(MAIN, child("t0001"), True)),  # a new, ambient cursor
        lambda m: m.advance_clock(hours=1),  # past R12's wake window: only R26 can keep it quiet
        lambda m: m.record_event(Draws(child("t0001"), None), kind="human_direct_message", actor_type="human",
                                 summary="human message via telegram", dedupe=None, skew=None),
    ], check=only_the_spawn_cursor_woke)


def only_the_spawn_cursor_woke(machine: ToolsVersusModel) -> None:
    pair = (MAIN, f"session-state: {child('t0001')}")
    assert machine.wakes == [pair]  # the spawn cursor's wake only: the ambient one queued silently
    assert machine.gw.ops.cursor_positions(MAIN, child("t0001")).provenance == "ambient"
    assert machine.gw.pending_system_events(MAIN)

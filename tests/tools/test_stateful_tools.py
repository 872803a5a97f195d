"""The core's stateful test, with tool-level rules: the same interleavings now also go
through ``sessions_send`` (with ``watch``), ``sessions_spawn`` and ``subagents kill``, mirrored
into the reference model. Every core invariant (INV1-INV9) still holds after every step.

Runs never finish on their own here (the runner blocks until cancelled), so every run end is
a kill or the shutdown before a restart: both are mirrored exactly.
"""

from __future__ import annotations

from hypothesis import note, strategies as st
from hypothesis.stateful import precondition, rule

from sessionstate import Gateway
from sessionstate.shared.keys import agent_of
from sessionstate.runner import Rule, ScriptedRunner
from sessionstate.shared.policy import ToolPolicy
from tests.backends import stateful_test_cases
from tests.gateway.test_stateful import GatewayVersusModel

MAX_DEPTH = 3
POLICY = ToolPolicy(visibility="all", agent_to_agent=True, max_spawn_depth=MAX_DEPTH)


class ToolsVersusModel(GatewayVersusModel):
    def __init__(self) -> None:
        self.active_runs: dict[str, tuple[str, str]] = {}  # run id -> (requester, child)
        self.ids_used = 0
        super().__init__()

    def _open(self) -> Gateway:
        gw = super()._open()
        def next_id() -> str:  # deterministic ids: Hypothesis must see the same keys on replay
            self.ids_used += 1
            return f"t{self.ids_used:04d}"

        gw.configure_tools(POLICY, runner=ScriptedRunner([Rule("*", "task", ["done"], delay=3600)]), id_factory=next_id)
        return gw

    def teardown(self) -> None:
        self.gw.runs.stop_runs()
        super().teardown()

    def _depth(self, key: str) -> int:
        # Read from the registry's parent chain: the model does not track parents.
        return self.gw.registry.session_meta(key).spawn_depth

    def _end_runs_for_restart(self) -> None:
        for run_id in self.gw.runs.stop_runs():
            requester, child = self.active_runs[run_id]
            self.model.record_run_event(
                child, "run_failed", "system", None, f"run cancelled ({run_id})",
                {"outcome": "cancelled"}, f"run-terminal:{run_id}", run_id,
            )
        self.active_runs.clear()

    # -- tool rules -----------------------------------------------------------------------------

    @precondition(lambda self: len(self.model.sessions) >= 2)
    @rule(data=st.data())
    def send_with_watch(self, data) -> None:
        sender = data.draw(st.sampled_from(sorted(self.model.sessions)), label="sender")
        target = data.draw(st.sampled_from([k for k in sorted(self.model.sessions) if k != sender]), label="target")
        note(f"tool: {sender} sessions_send watch -> {target}")
        got: list[dict] = []
        self._step(lambda: got.append(self.gw.call_tool(
            sender, "sessions_send", {"sessionKey": target, "message": "sync?", "timeoutSeconds": 0, "watch": True})))
        result = got[0]
        if self._depth(sender) >= 1:  # sub-agents have no sessions_send (leaf or orchestrator)
            assert result["error"]["code"] == "tool_not_allowed", result
            return
        assert result["status"] == "accepted" and result["sessionKey"] == target, result
        assert result["watched"] == (agent_of(sender) is not None)
        if result["watched"]:
            self.model.watch(sender, target)
        self.gw.runs.executor.wait_for(result["runId"])

    @precondition(lambda self: bool(self.model.sessions))
    @rule(data=st.data())
    def spawn_via_tool(self, data) -> None:
        caller = data.draw(st.sampled_from(sorted(self.model.sessions)), label="caller")
        note(f"tool: {caller} sessions_spawn")
        got: list[dict] = []
        self._step(lambda: got.append(self.gw.call_tool(caller, "sessions_spawn", {"task": "work"})))
        result = got[0]
        if self._depth(caller) >= MAX_DEPTH:
            assert result["error"]["code"] == "tool_not_allowed", result
            return
        assert result["status"] == "accepted", result
        child, run_id = result["childSessionKey"], result["runId"]
        self.model.create(child, parent=caller, run_id=run_id, kind="subagent")  # its created says so (R27)
        self.active_runs[run_id] = (caller, child)

    @precondition(lambda self: any(r in self.model.sessions and c in self.model.sessions
                                   for r, c in self.active_runs.values()))
    @rule(data=st.data())
    def kill_via_tool(self, data) -> None:
        live = sorted(run for run, (r, c) in self.active_runs.items() if r in self.model.sessions and c in self.model.sessions)
        run_id = data.draw(st.sampled_from(live), label="run")
        requester, child = self.active_runs[run_id]
        note(f"tool: {requester} subagents kill {run_id} ({child})")
        got: list[dict] = []
        self._step(lambda: got.append(self.gw.call_tool(requester, "subagents", {"action": "kill", "target": run_id})),
                   quiet=True)
        if self._depth(requester) >= MAX_DEPTH:
            # A leaf has no `subagents`. The requester key can be a leaf only as a new session
            # under a deleted requester's key (delete, then spawn the key again deeper down):
            # the policy refuses and the run keeps running.
            assert got[0]["error"]["code"] == "tool_not_allowed", got[0]
            return
        del self.active_runs[run_id]
        assert got[0] == {"status": "ok", "action": "kill", "killed": [run_id]}, got[0]
        self.model.record_run_event(
            child, "run_failed", "agent", requester, f"run cancelled ({run_id})",
            {"outcome": "cancelled"}, f"run-terminal:{run_id}", run_id,
        )

    @rule()
    def restart(self) -> None:
        self._end_runs_for_restart()
        super().restart()


globals().update(stateful_test_cases(ToolsVersusModel, "ToolsVersusModel"))

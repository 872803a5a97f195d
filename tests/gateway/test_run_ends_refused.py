"""A run whose end the runner describes beyond the bounds still ends, and its requester hears
of it: a reply over ``MAX_RESULT_CHARS``, token counts over half the counter range, and an
end as ``timeout`` for a run that had no timeout (``finish_run`` is public). Before, the first
two left the run "running" until shutdown (the refusal was logged as a session gone away) and
the third raised after the end was committed, so nobody was told."""

from __future__ import annotations

import logging

import pytest

from sessionstate.runner.base import RunContext, TurnRequest, TurnResult
from sessionstate.services.runs import MAX_RESULT_CHARS
from sessionstate.shared.validation import MAX_COUNT
from tests.gateway.helpers import run_record
from tests.tools.support import MANAGER, ok, open_gateway


class ReplyingRunner:
    def __init__(self, result: TurnResult) -> None:
        self.result = result

    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
        return self.result


@pytest.mark.parametrize("result, refused", [
    (TurnResult("x" * (MAX_RESULT_CHARS + 1)), "text"),
    (TurnResult("fine", input_tokens=MAX_COUNT // 2 + 1), "input tokens"),
], ids=["reply too long", "usage too large"])
def test_a_result_over_the_bounds_ends_the_run_as_an_error_and_tells_the_requester(db_url, caplog, result, refused):
    gw, _ = open_gateway(db_url)
    gw.runs.runner = ReplyingRunner(result)
    gw.create_session(MANAGER)
    gw.drain_system_events(MANAGER)
    with caplog.at_level(logging.INFO, logger="sessionstate"):
        spawned = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "t"}))
        assert gw.runs.wait_for_runs()
    run = gw.runs.get_run(spawned["runId"])
    assert (run.status, run.outcome) == ("failed", "error")
    assert run.result_text.startswith("the runner's result was refused: ") and refused in run.result_text
    announced = [line for line in gw.pending_system_events(MANAGER) if spawned["runId"] in line]
    assert len(announced) == 1 and "failed (error)" in announced[0]
    warned = [r.getMessage() for r in caplog.records if r.name == "sessionstate" and r.levelno == logging.WARNING]
    assert warned == [f"run {spawned['runId']}: its result was refused ({run.result_text.split(': ', 1)[1]}); it ends as an error"]
    assert not any("went away" in r.getMessage() for r in caplog.records)
    gw.close()


def test_a_run_without_a_timeout_ended_as_timed_out_is_announced(db_url):
    gw, _ = open_gateway(db_url)
    gw.create_session(MANAGER)
    gw.create_session("agent:main:subagent:child")
    gw.runs.insert(run_record("run-1", child=("agent:main:subagent:child", "main"), created_at=1.0))
    gw.drain_system_events(MANAGER)
    assert gw.runs.finish_run("run-1", "timeout", actor_type="system") is True
    assert gw.runs.get_run("run-1").outcome == "timeout"
    announced = [line for line in gw.pending_system_events(MANAGER) if "run-1" in line]
    assert len(announced) == 1 and announced[0].endswith("(run run-1) timed out")
    gw.close()

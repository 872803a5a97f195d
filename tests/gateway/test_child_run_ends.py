"""How a child run's end is written (services/runs.py; the rest of child runs is in
test_child_runs.py):

- the run's row reads back how it ended (status, outcome only for a failure, the text) and
  when (the gateway's clock);
- only a completed run with a reply writes the child's result message: an assistant message
  of the child's own session (its agent id too), written by the child, with provenance
  naming the run; a failure's detail and an empty reply write none;
- a run another process ended after this one read it is not ended a second time;
- finish_run names the argument it refuses and changes nothing (also for a failure whose
  text is not a string, which no transcript check would catch); usage counts may reach half
  the counter range, not more;
- the end is one event of the child's session (its agent id too) naming the run, its
  outcome and who ended it (the child itself unless told), with R10's dedupe key;
- a kill cancels the run's live job as "cancelled"; a runner that raises ends its run as an
  error naming the exception.
"""

from __future__ import annotations

import pytest

from sessionstate import Gateway
from sessionstate.runner.base import RunContext, TurnRequest, TurnResult
from sessionstate.shared.validation import MAX_COUNT
from tests.gateway.helpers import SHARED_KEY, CancelRecordingRunner, refusal, run_record
from tests.tools.support import MANAGER

NOW = 1_700_000_000.5
CHILD = (SHARED_KEY, "a2")  # beside ("worker", "a1"): only the agent id tells them apart


@pytest.fixture
def gw(db_url):
    gateway = Gateway.open(db_url, clock=lambda: NOW)
    gateway.create_session(MANAGER)
    for agent in ("a1", "a2"):
        gateway.create_session(SHARED_KEY, agent_id=agent)
    for n in (1, 2, 3):
        gateway.runs.insert(run_record(f"run-{n}", child=CHILD, created_at=float(n)))
    yield gateway
    gateway.runs.wait_for_runs()
    gateway.close()


def test_an_ended_runs_row_reads_back_how_and_when_it_ended(gw):
    assert gw.runs.finish_run("run-1", "completed", text="the report") is True
    assert gw.runs.finish_run("run-2", "error", text="boom") is True
    assert gw.runs.finish_run("run-2", "completed", text="late") is False  # ended once
    ended = [gw.runs.get_run(run_id) for run_id in ("run-1", "run-2")]
    assert [(r.status, r.outcome, r.result_text, r.ended_at) for r in ended] == [
        ("completed", None, "the report", NOW), ("failed", "error", "boom", NOW)]


def test_only_a_completed_run_with_a_reply_writes_the_childs_result_message(gw):
    assert gw.runs.finish_run("run-1", "error", text="boom") is True
    assert gw.runs.finish_run("run-2", "completed") is True  # no reply
    assert gw.transcripts.transcript(SHARED_KEY, agent_id="a2") == []
    assert gw.runs.finish_run("run-3", "completed", text="the report", usage=(7, 3)) is True
    (message,) = gw.transcripts.transcript(SHARED_KEY, agent_id="a2")
    assert (message.role, message.text, message.actor_type, message.actor_id) == ("assistant", "the report", "agent", SHARED_KEY)
    assert (message.input_tokens, message.output_tokens) == (7, 3)
    assert message.provenance == {"kind": "run_result", "runId": "run-3"}
    assert gw.transcripts.transcript(SHARED_KEY, agent_id="a1") == []


def test_a_run_another_process_ended_after_this_one_read_it_is_not_ended_again(gw, monkeypatch):
    stale = gw.runs.get_run("run-1")  # still running, as this process read it
    assert gw.runs.finish_run("run-1", "cancelled", announce=False) is True  # the other process
    monkeypatch.setattr(gw.store.runs, "get", lambda run_id: stale)
    assert gw.runs.finish_run("run-1", "completed", text="late") is False
    assert [e["kind"] for e in gw.session_status(SHARED_KEY, agent_id="a2", changes_since=0)["stateChanges"]["events"]] == [
        "created", "run_failed"]


def test_finish_run_refusals_name_the_argument_and_change_nothing(gw):
    finish = gw.runs.finish_run
    assert refusal(lambda: finish("", "completed")) == "run id must not be empty"
    for outcome in ("bogus", 3):  # a string that is no outcome, and no string at all
        assert refusal(lambda: finish("run-1", outcome)) == "outcome must be one of ['completed', 'error', 'timeout', 'cancelled']"
    for outcome in ("completed", "error"):  # a failure's text reaches no transcript check
        assert refusal(lambda: finish("run-1", outcome, text=5)) == "text must be a string, not int"
    assert refusal(lambda: finish("run-1", "error", actor_id="a b")).startswith("actor id 'a b' contains whitespace")
    for usage in ([1, 2], (1, 2, 3)):  # a list is no pair, nor are three counts
        assert refusal(lambda: finish("run-1", "completed", usage=usage)) == "usage must be an (input tokens, output tokens) pair"
    half = MAX_COUNT // 2  # the session's counters add the counts up
    assert refusal(lambda: finish("run-1", "completed", usage=(half + 1, 0))) == f"input tokens must be between 0 and {half}"
    assert refusal(lambda: finish("run-1", "completed", usage=(0, half + 1))) == f"output tokens must be between 0 and {half}"
    assert gw.runs.get_run("run-1").status == "running"
    assert gw.pending_system_events(MANAGER) == []
    assert finish("run-1", "completed", usage=(half, half)) is True


def test_a_kill_cancels_the_runs_live_job_as_cancelled(gw):
    runner = CancelRecordingRunner()
    gw.runs.runner = runner
    gw.runs.start_run(gw.runs.get_run("run-1"), "work until told")
    assert gw.runs.kill_run("run-1", actor_id=MANAGER) is True
    assert gw.runs.wait_for_runs(5)
    assert runner.reasons == ["cancelled"]


class FailingRunner:
    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
        raise ValueError("bad input")


def test_a_runner_that_raises_ends_its_run_as_an_error_naming_the_exception(gw):
    gw.runs.runner = FailingRunner()
    gw.runs.start_run(gw.runs.get_run("run-1"), "t")
    assert gw.runs.wait_for_runs()
    run = gw.runs.get_run("run-1")
    assert (run.status, run.outcome, run.result_text) == ("failed", "error", "ValueError: bad input")


def test_a_runs_end_is_one_event_of_its_child_naming_the_run_and_who_ended_it(gw):
    assert gw.runs.finish_run("run-1", "completed", text="ok") is True
    assert gw.runs.finish_run("run-2", "error") is True
    assert gw.runs.finish_run("run-3", "timeout", actor_type="system", announce=False) is True
    events = gw.session_status(SHARED_KEY, agent_id="a2", changes_since=0)["stateChanges"]["events"][1:]
    assert [(e["kind"], e["runId"], e["summary"], e.get("payload"), e["actorType"], e.get("actorId")) for e in events] == [
        ("run_completed", "run-1", "run completed (run-1)", None, "agent", SHARED_KEY),  # the child's own act
        ("run_failed", "run-2", "run failed (run-2)", {"outcome": "error"}, "agent", SHARED_KEY),
        ("run_failed", "run-3", "run timed out (run-3)", {"outcome": "timeout"}, "system", None),
    ]
    # R10's second guard: the terminal event holds run-terminal:<run id>, so the same end
    # recorded again under that key is the event already there.
    again = gw.record_event(SHARED_KEY, "run_completed", agent_id="a2", actor_type="system", run_id="run-1",
                            summary="run completed (run-1)", dedupe_key="run-terminal:run-1")
    assert again == events[0]["sequence"]
    assert len(gw.session_status(SHARED_KEY, agent_id="a2", changes_since=0)["stateChanges"]["events"]) == 4


def test_finishing_a_run_nobody_knows_answers_false(gw):
    assert gw.runs.finish_run("run-unknown", "completed") is False
    assert gw.runs.get_run("run-unknown") is None


def test_a_long_run_ids_end_event_summary_is_cut_to_the_longest_a_summary_may_be(gw):
    long_id = "r" * 190  # ids may be 256 long; "run completed (" + id + ")" would be 206
    gw.runs.insert(run_record(long_id, child=CHILD, created_at=4.0))
    assert gw.runs.finish_run(long_id, "completed") is True
    summary = gw.session_status(SHARED_KEY, agent_id="a2", changes_since=0)["stateChanges"]["events"][-1]["summary"]
    assert summary == ("run completed (" + long_id)[:200] and len(summary) == 200


def test_a_gateway_given_no_runner_runs_its_children_with_the_scripted_one(gw):
    from sessionstate.runner import ScriptedRunner

    assert isinstance(gw.runs.runner, ScriptedRunner)
    assert gw.runs.runner is gw.runs.runner  # made once, on first use
    gw.runs.start_run(gw.runs.get_run("run-1"), "say hello")
    assert gw.runs.wait_for_runs()
    assert gw.runs.get_run("run-1").status == "completed"

"""Child runs (services/runs.py): reading, steering, starting, announcing, waking the
requester, shutting down, and recording a run's end from its background job:

- the run readers name what they refuse: ``get_run`` its run id; ``runs_of`` and
  ``runs_of_child`` take only a (session key, agent id) tuple and name the argument, and the
  part of it, that is wrong; ``runs_of`` gives the newest 50 runs unless asked for another
  count;
- steering reaches the run's own child (its key *and* agent id, also for an unqualified key
  two agents share) as a user-role message written by the sending agent, with provenance
  naming the sender and the run; it counts on the run's row; a run that is unknown or has
  ended is not steered; empty guidance is refused, and every refusal names its argument;
- start_run names the argument it refuses; a started run hands the runner the child's key
  and agent id, the task, the requester as sender, and the run's model and thinking;
- the requester's announce: an empty reply reads "(no reply)", a reply is cut after 1,000
  characters (marked "…"), a timeout names its limit, a failure without detail says only how
  it ended, and the stored route is named only when there is one (its "->" part only when
  it has a recipient);
- a result wakes its requester only when the requester yielded to wait for it, naming the
  run, and only once; a kill is announced only when asked;
- a shutdown cancels every background job (a send's exchange too, which has no run row) as
  "shutdown", and waits 5 s at most for them by default (a plain wait for the runs, 10 s);
- a run's end recorded from the background job keeps what the job knew: the runner's token
  usage on the result message, and "the system" as the actor of a timeout;
- a run whose end cannot be recorded because its gateway was closed meanwhile is logged at
  INFO, naming the run and its outcome; any other failure to record it is logged as an error
  with its cause; neither is raised into the job.

How a run's end is written (its row, its result message, its refusals) is in
test_child_run_ends.py.
"""

from __future__ import annotations

import logging
import threading

import pytest

from sessionstate import Gateway
from sessionstate.runner import Rule
from sessionstate.runner.base import RunContext, TurnRequest, TurnResult
from sessionstate.shared.fencing import fenced_text
from sessionstate.shared.policy import ToolPolicy
from sessionstate.store import RunRecord
from tests.gateway.helpers import SHARED_KEY, CancelRecordingRunner, refusal, run_record
from tests.tools.support import MANAGER, PEER, ok, open_gateway

REQUESTER = (MANAGER, "main")


@pytest.fixture
def gw(db_url):
    gateway = Gateway.open(db_url)
    gateway.create_session(MANAGER)
    for agent in ("a1", "a2"):
        gateway.create_session(SHARED_KEY, agent_id=agent)
    yield gateway
    gateway.runs.wait_for_runs()
    gateway.close()


# -- reading runs -------------------------------------------------------------------------------

def test_run_readers_take_only_a_key_and_agent_id_pair_and_name_what_is_wrong(gw):
    # A list is not a pair even when it has two items; a value without a length is not either.
    assert refusal(lambda: gw.runs.runs_of([MANAGER, "main"])) == "requester must be a (session key, agent id) pair"
    assert refusal(lambda: gw.runs.runs_of(None)) == "requester must be a (session key, agent id) pair"
    assert refusal(lambda: gw.runs.runs_of_child([SHARED_KEY, "a1"])) == "child must be a (session key, agent id) pair"
    assert refusal(lambda: gw.runs.runs_of(("", "main"))).startswith("requester key must be 1 to ")
    assert refusal(lambda: gw.runs.runs_of((MANAGER, 7))) == "requester agent id must be a string, not int"
    assert refusal(lambda: gw.runs.runs_of_child(("a b", "a1"))).startswith("child key 'a b' contains whitespace")
    assert refusal(lambda: gw.runs.runs_of_child((SHARED_KEY, ""))).startswith("child agent id must be 1 to ")
    assert refusal(lambda: gw.runs.runs_of(REQUESTER, limit=-1)).startswith("limit must be between 0 and ")
    assert refusal(lambda: gw.runs.get_run("")) == "run id must not be empty"


def test_runs_of_gives_the_newest_fifty_runs_unless_told_otherwise(gw):
    for n in range(52):
        gw.runs.insert(run_record(f"run-{n:02}", child=(SHARED_KEY, "a1"), created_at=1000.0 + n))
    newest_first = [f"run-{n:02}" for n in reversed(range(52))]
    assert [r.run_id for r in gw.runs.runs_of(REQUESTER)] == newest_first[:50]
    assert [r.run_id for r in gw.runs.runs_of(REQUESTER, limit=2)] == newest_first[:2]


# -- steering -----------------------------------------------------------------------------------

def test_steering_reaches_the_runs_own_child_as_the_senders_message(gw):
    gw.runs.insert(run_record("run-1", child=(SHARED_KEY, "a2"), created_at=1000.0))
    assert gw.runs.steer_run("run-1", "focus on the tests", sender=MANAGER) is True
    (message,) = gw.transcripts.transcript(SHARED_KEY, agent_id="a2")
    assert (message.role, message.actor_type, message.actor_id) == ("user", "agent", MANAGER)
    assert fenced_text(message.text) == "focus on the tests"  # fenced: another session's words
    assert message.provenance == {"kind": "steer", "sourceSessionKey": MANAGER, "runId": "run-1", "isUser": False}
    assert gw.transcripts.transcript(SHARED_KEY, agent_id="a1") == []  # the other agent's session
    assert gw.runs.get_run("run-1").steer_count == 1


def test_a_run_that_is_unknown_or_has_ended_is_not_steered(gw):
    gw.runs.insert(run_record("run-1", child=(SHARED_KEY, "a1"), created_at=1000.0))
    assert gw.runs.finish_run("run-1", "completed", announce=False) is True
    assert gw.runs.steer_run("run-1", "too late", sender=MANAGER) is False
    assert gw.runs.steer_run("run-unknown", "anyone?", sender=MANAGER) is False
    assert gw.transcripts.transcript(SHARED_KEY, agent_id="a1") == []
    assert gw.runs.get_run("run-1").steer_count == 0


def test_steering_refusals_name_the_argument(gw):
    gw.runs.insert(run_record("run-1", child=(SHARED_KEY, "a1"), created_at=1000.0))
    assert refusal(lambda: gw.runs.steer_run("", "go on", sender=MANAGER)) == "run id must not be empty"
    assert refusal(lambda: gw.runs.steer_run("run-1", "", sender=MANAGER)) == "guidance must not be empty"
    assert refusal(lambda: gw.runs.steer_run("run-1", 5, sender=MANAGER)) == "guidance must be a string, not int"
    assert refusal(lambda: gw.runs.steer_run("run-1", "go on", sender=None)) == "sender must be a string, not NoneType"
    assert gw.transcripts.transcript(SHARED_KEY, agent_id="a1") == []
    assert gw.runs.get_run("run-1").steer_count == 0


# -- finishing and starting a run ----------------------------------------------------------------

class RequestRecordingRunner:
    """Answers at once, and keeps every turn request it was handed."""

    def __init__(self) -> None:
        self.requests: list[TurnRequest] = []

    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
        self.requests.append(request)
        return TurnResult("done")


def test_a_started_run_hands_its_child_the_task_as_the_requester_with_its_model(gw):
    runner = RequestRecordingRunner()
    gw.runs.runner = runner
    run = run_record("run-1", child=(SHARED_KEY, "a2"), created_at=1.0)._replace(model="m-x", thinking="high")
    gw.runs.insert(run)
    assert refusal(lambda: gw.runs.start_run(tuple(run), "the task")) == "run must be a RunRecord"
    assert refusal(lambda: gw.runs.start_run(run, 5)) == "prompt must be a string, not int"
    gw.runs.start_run(run, "the task")
    assert gw.runs.wait_for_runs()
    assert runner.requests == [TurnRequest(SHARED_KEY, "a2", "task", "the task", sender_key=MANAGER, model="m-x", thinking="high")]
    assert gw.runs.get_run("run-1").status == "completed"


# -- the requester's announce --------------------------------------------------------------------

def announced(gw, run: RunRecord, outcome: str, text: str | None = None) -> str:
    """The one line MANAGER is told when ``run`` ends with ``outcome``."""
    gw.runs.insert(run)
    assert gw.runs.finish_run(run.run_id, outcome, text=text) is True
    (line,) = gw.drain_system_events(MANAGER)
    return line


def test_a_completed_run_is_announced_with_its_reply_bounded(gw):
    child = (SHARED_KEY, "a1")
    assert announced(gw, run_record("run-1", child=child, created_at=1.0, label="calc"), "completed") == (
        '[Sub-agent result] "calc" (run run-1) completed; reply (untrusted data): "(no reply)"')
    fits, too_long = "x" * 1000, "y" * 1001  # ANNOUNCE_TEXT_CHARS, and one more
    assert announced(gw, run_record("run-2", child=child, created_at=2.0), "completed", fits) == (
        f'[Sub-agent result] "worker" (run run-2) completed; reply (untrusted data): "{fits}"')
    assert announced(gw, run_record("run-3", child=child, created_at=3.0), "completed", too_long) == (
        f'[Sub-agent result] "worker" (run run-3) completed; reply (untrusted data): "{"y" * 1000}…"')


def test_a_run_that_did_not_complete_is_announced_by_how_it_ended(gw):
    child = (SHARED_KEY, "a1")
    assert announced(gw, run_record("run-1", child=child, created_at=1.0, timeout_seconds=0.5), "timeout") == (
        '[Sub-agent result] "worker" (run run-1) timed out after 0.5s')
    assert announced(gw, run_record("run-2", child=child, created_at=2.0), "cancelled") == (
        '[Sub-agent result] "worker" (run run-2) failed (cancelled)')


def test_the_announce_names_the_stored_route_only_as_far_as_it_is_known(gw):
    run = run_record("run-1", child=(SHARED_KEY, "a1"), created_at=1.0, announce_channel="slack")
    assert announced(gw, run, "completed", "ok") == (
        '[Sub-agent result] "worker" (run run-1) completed; reply (untrusted data): "ok" [route "slack"]')


def test_a_result_wakes_a_requester_only_when_it_yielded_for_it(db_url):
    # An unqualified session is not woken by the lines queued for it (R12, like a sub-agent):
    # only its yield asks for this wake.
    lead = "desk"
    wakes = []
    gw, _ = open_gateway(db_url, on_wake=lambda watcher, reason: wakes.append((watcher, reason)))
    gw.create_session(MANAGER)
    gw.create_session(lead, agent_id="main")
    gw.create_session(SHARED_KEY, agent_id="a1")
    for n in (1, 2, 3):
        gw.runs.insert(run_record(f"run-{n}", child=(SHARED_KEY, "a1"), created_at=float(n), requester=lead))
    assert gw.runs.finish_run("run-1", "completed", text="first") is True
    assert wakes == []  # told on its next turn, not woken: it did not wait for this
    assert ok(gw.call_tool(lead, "sessions_yield", {}))["status"] == "yielded"
    assert gw.runs.finish_run("run-2", "completed", text="second") is True
    assert wakes == [(lead, "subagent-result: run-2")]
    assert gw.registry.meta_of((lead, "main")).yielded_at is None  # the wait is over
    assert gw.runs.finish_run("run-3", "completed", text="third") is True
    assert wakes == [(lead, "subagent-result: run-2")]
    gw.close()


def test_a_kill_is_announced_only_when_asked_and_names_a_refused_run_id(gw):
    for n in (1, 2):
        gw.runs.insert(run_record(f"run-{n}", child=(SHARED_KEY, "a1"), created_at=float(n)))
    assert gw.runs.kill_run("run-1", actor_id=MANAGER) is True
    assert gw.drain_system_events(MANAGER) == []
    assert gw.runs.kill_run("run-2", actor_id=MANAGER, announce=True) is True
    assert gw.drain_system_events(MANAGER) == ['[Sub-agent result] "worker" (run run-2) failed (cancelled)']
    assert refusal(lambda: gw.runs.kill_run("")) == "run id must not be empty"


def test_a_shutdown_cancels_every_background_job_and_waits_five_seconds_at_most(db_url, monkeypatch):
    gw, _ = open_gateway(db_url, policy=ToolPolicy(visibility="agent"))
    runner = CancelRecordingRunner()
    gw.runs.runner = runner
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    waits = []
    wait_idle = gw.runs.executor.wait_idle
    monkeypatch.setattr(gw.runs.executor, "wait_idle", lambda timeout: waits.append(timeout) or wait_idle(timeout))
    # A send's exchange has no run row: only the shutdown's sweep of the jobs reaches it.
    assert ok(gw.call_tool(MANAGER, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0}))["status"] == "accepted"
    assert gw.runs.stop_runs() == []
    assert (runner.reasons, gw.runs.executor.active(), waits) == (["shutdown"], [], [5.0])
    assert refusal(lambda: gw.runs.stop_runs(-1)) == "timeout must be a finite number of seconds >= 0"
    gw.close()


def test_waiting_for_the_runs_is_bounded_by_ten_seconds_by_default(gw, monkeypatch):
    waits = []
    wait_idle = gw.runs.executor.wait_idle
    monkeypatch.setattr(gw.runs.executor, "wait_idle", lambda timeout: waits.append(timeout) or wait_idle(timeout))
    assert gw.runs.wait_for_runs() is True  # nothing runs
    assert waits == [10.0]
    assert refusal(lambda: gw.runs.wait_for_runs(-1)) == "timeout must be a finite number of seconds >= 0"


# -- ends recorded by the background job --------------------------------------------------------

class FixedUsageRunner:
    """Answers every turn with one reply and a known token usage."""

    def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
        return TurnResult("report ready", input_tokens=120, output_tokens=30)


def test_a_completed_run_keeps_the_runners_token_usage_on_its_result(db_url):
    gw, _ = open_gateway(db_url)
    gw.runs.runner = FixedUsageRunner()
    gw.create_session(MANAGER)
    spawned = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "write the report"}))
    assert gw.runs.wait_for_runs()
    result = gw.transcripts.transcript(spawned["childSessionKey"])[-1]
    assert (result.text, result.input_tokens, result.output_tokens) == ("report ready", 120, 30)
    gw.close()


def test_a_timed_out_run_is_ended_by_the_system(db_url):
    gw, runner = open_gateway(db_url)
    gw.create_session(MANAGER)
    runner.add(Rule("agent:main:subagent:*", "task", ["never"], delay=30))  # cancellable: leaves at once
    spawned = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "slow", "timeoutSeconds": 0.2}))
    assert gw.runs.wait_for_runs()
    event = gw.session_status(spawned["childSessionKey"], changes_since=0)["stateChanges"]["events"][-1]
    assert (event["kind"], event["payload"]) == ("run_failed", {"outcome": "timeout"})
    assert event["actorType"] == "system" and "actorId" not in event  # no agent ended it
    gw.close()


def test_a_run_ending_after_its_gateway_closed_is_logged_and_not_raised(db_url, caplog):
    release = threading.Event()

    class WaitingRunner:
        def run_turn(self, request: TurnRequest, ctx: RunContext) -> TurnResult:
            release.wait(10)
            return TurnResult("late reply")

    gw, _ = open_gateway(db_url)
    gw.runs.runner = WaitingRunner()
    gw.create_session(MANAGER)
    spawned = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "t"}))
    gw.close()
    with caplog.at_level(logging.INFO, logger="sessionstate"):
        release.set()
        assert gw.runs.wait_for_runs()
    ended = [r for r in caplog.records if r.name == "sessionstate" and r.levelno >= logging.INFO]
    assert [(r.levelno, r.getMessage()) for r in ended] == [
        (logging.INFO, f"run {spawned['runId']} ended (completed) after its session went away")]


def test_an_unexpected_failure_recording_a_runs_end_is_logged_with_its_cause(db_url, caplog, monkeypatch):
    gw, _ = open_gateway(db_url)
    gw.create_session(MANAGER)

    def broken_finish(*args, **kwargs):
        raise RuntimeError("the driver broke")  # not a refusal the package names

    monkeypatch.setattr(gw.store.runs, "finish", broken_finish)
    with caplog.at_level(logging.INFO, logger="sessionstate"):
        spawned = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "t"}))
        assert gw.runs.wait_for_runs()
    ended = [r for r in caplog.records if r.name == "sessionstate" and r.levelno >= logging.INFO]
    assert [(r.levelno, r.getMessage()) for r in ended] == [
        (logging.ERROR, f"recording the end of run {spawned['runId']} failed")]
    assert str(ended[0].exc_info[1]) == "the driver broke"
    assert gw.runs.get_run(spawned["runId"]).status == "running"  # nothing was recorded
    gw.close()

"""Every tool's happy paths, filters and flags, through call_tool."""

from __future__ import annotations

import json
import time

import pytest

from sessionstate.shared.fencing import fenced_text
from sessionstate.runner import Rule
from sessionstate.services.notice.announce import created_line
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

from .support import MANAGER, OTHER, PEER, error_code, full_dump, ok, open_gateway


@pytest.fixture
def gw(db_url):
    gateway, _ = open_gateway(db_url, policy=ToolPolicy(visibility="agent"))
    gateway.create_session(MANAGER, channel="telegram", model="model-a")
    gateway.create_session(PEER, label="peer desk")
    gateway.create_session("agent:main:cron:nightly", kind="cron", label="nightly")
    gateway.create_session(OTHER)
    gateway.watch(OTHER, MANAGER, ambient=True)  # R24: human turns are recorded for watched sessions
    gateway.transcripts.human_message(MANAGER, "Plan the release\nsecond line", channel="telegram", sender="u1")
    gateway.transcripts.append_message(MANAGER, "assistant", "<think>secret plan</think>Sure, planning now.")
    # R27: the main session hears of PEER and the cron session (lines, no wake); its turn reads
    # them, so every test starts from its empty queue.
    assert gateway.drain_system_events(MANAGER) == [
        created_line(PEER, "main", "peer desk"), created_line("agent:main:cron:nightly", "cron", "nightly")]
    yield gateway
    gateway.runs.wait_for_runs()
    gateway.close()


def call(gw, tool, args=None, caller=MANAGER):
    result = gw.call_tool(caller, tool, args or {})
    json.dumps(result)  # every result is JSON-serialisable
    return result


def keys(result):
    return [row["key"] for row in result["sessions"]]


# -- sessions_list ------------------------------------------------------------------------------

def test_list_shows_visible_sessions_with_registry_fields(gw):
    result = ok(call(gw, "sessions_list"))
    assert set(keys(result)) == {MANAGER, PEER, "agent:main:cron:nightly"}  # not the other agent's
    row = next(r for r in result["sessions"] if r["key"] == MANAGER)
    assert row["agentId"] == "main" and row["kind"] == "main" and row["channel"] == "telegram"
    assert row["model"] == "model-a" and row["stateVersion"] >= 1 and row["messageCount"] == 2
    assert {"inputTokens", "outputTokens", "totalTokens", "createdAt", "updatedAt", "sessionId"} <= set(row)
    peer = next(r for r in result["sessions"] if r["key"] == PEER)
    assert peer["stateVersion"] == 2  # its own `created` only (R27; MANAGER's is 1): no change since
    assert "title" not in row and "preview" not in row and "messages" not in row


def test_list_filters(gw, db_url):
    assert keys(call(gw, "sessions_list", {"kinds": ["cron"]})) == ["agent:main:cron:nightly"]
    assert keys(call(gw, "sessions_list", {"label": "peer desk"})) == [PEER]
    assert keys(call(gw, "sessions_list", {"label": "peer"})) == []  # exact label only
    assert keys(call(gw, "sessions_list", {"search": "NIGHT"})) == ["agent:main:cron:nightly"]
    assert keys(call(gw, "sessions_list", {"search": "plan the"})) == [MANAGER]  # derived title
    assert set(keys(call(gw, "sessions_list", {"agentId": "main"}))) == {MANAGER, PEER, "agent:main:cron:nightly"}
    assert keys(call(gw, "sessions_list", {"agentId": "other"})) == []  # invisible agent
    assert len(call(gw, "sessions_list", {"limit": 1})["sessions"]) == 1
    assert keys(call(gw, "sessions_list", {"limit": 1})) == [MANAGER]  # newest activity first


def test_list_active_minutes(db_url):
    now = [1_700_000_000.0]
    gw, _ = open_gateway(db_url, policy=ToolPolicy(visibility="agent"), clock=lambda: now[0])
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    now[0] += 3600
    gw.transcripts.append_message(MANAGER, "user", "still here")
    assert keys(call(gw, "sessions_list", {"activeMinutes": 30})) == [MANAGER]
    assert set(keys(call(gw, "sessions_list", {"activeMinutes": 61}))) == {MANAGER, PEER}
    gw.close()


def test_list_title_preview_and_recent_messages(gw):
    rows = call(gw, "sessions_list", {"includeTitle": True, "includePreview": True, "recentMessages": 1})["sessions"]
    row = next(r for r in rows if r["key"] == MANAGER)
    assert row["title"] == "Plan the release second line"
    assert row["preview"] == "Sure, planning now."  # normalised: the thinking block is gone
    assert [m["text"] for m in row["messages"]] == ["Sure, planning now."]
    peer = next(r for r in rows if r["key"] == PEER)
    assert peer["title"] == "peer desk" and peer["preview"] is None and peer["messages"] == []


def test_list_under_tree_visibility_shows_own_tree_only(db_url):
    gw, _ = open_gateway(db_url)
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    child = ok(call(gw, "sessions_spawn", {"task": "work"}))["childSessionKey"]
    gw.runs.wait_for_runs()
    assert set(keys(call(gw, "sessions_list"))) == {MANAGER, child}
    assert keys(call(gw, "sessions_list", caller=PEER)) == [PEER]
    gw.close()


# -- sessions_history ---------------------------------------------------------------------------

def test_history_by_key_and_by_session_id(gw):
    by_key = ok(call(gw, "sessions_history", {"sessionKey": MANAGER}))
    assert [m["role"] for m in by_key["messages"]] == ["user", "assistant"]
    assert by_key["messages"][1]["text"] == "Sure, planning now."
    assert by_key["truncated"] is False and by_key["droppedMessages"] == 0 and by_key["bytes"] > 0
    by_id = ok(call(gw, "sessions_history", {"sessionId": by_key["sessionId"]}))
    assert by_id["messages"] == by_key["messages"]
    assert ok(call(gw, "sessions_history", {"sessionKey": "main"}))["sessionKey"] == MANAGER  # alias


def test_history_pages_back_from_the_newest_message_with_next_offset(gw):
    for i in range(5):
        gw.transcripts.append_message(MANAGER, "assistant", f"reply {i}")  # 7 messages in all
    texts = lambda page: [m["text"] for m in page["messages"]]  # noqa: E731
    first = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "limit": 3}))
    assert texts(first) == ["reply 2", "reply 3", "reply 4"] and first["nextOffset"] == 3
    second = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "limit": 3, "offset": first["nextOffset"]}))
    assert texts(second) == ["Sure, planning now.", "reply 0", "reply 1"] and second["nextOffset"] == 6
    last = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "limit": 3, "offset": 6}))
    assert [m["role"] for m in last["messages"]] == ["user"] and "nextOffset" not in last
    beyond = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "offset": 50}))
    assert beyond["messages"] == [] and "nextOffset" not in beyond
    whole = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "limit": 7}))
    assert len(whole["messages"]) == 7 and "nextOffset" not in whole  # exactly all: nothing older


def test_history_next_offset_resumes_at_rows_the_byte_bound_dropped(gw):
    for i in range(30):
        gw.transcripts.append_message(MANAGER, "assistant", f"{i:02d} " + "x" * 3_900)  # ~4 KB each, past 80 KiB together
    page = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "limit": 30}))
    dropped = page["droppedMessages"]
    assert dropped > 0 and page["nextOffset"] == 30 - dropped
    older = ok(call(gw, "sessions_history", {"sessionKey": MANAGER, "limit": 30, "offset": page["nextOffset"]}))
    assert older["messages"][-1]["text"].startswith(f"{dropped - 1:02d} ")  # the newest row dropped before


def test_history_tools_only_on_request_and_redaction(gw):
    gw.transcripts.append_message(MANAGER, "assistant", "calling", tool_calls=[{"name": "grep", "args": {"q": "x"}}])
    gw.transcripts.append_message(MANAGER, "tool", "result", tool_result={"output": "password=hunter2"})
    plain = call(gw, "sessions_history", {"sessionKey": MANAGER})
    assert [m["role"] for m in plain["messages"]] == ["user", "assistant", "assistant"]
    assert all("toolCalls" not in m for m in plain["messages"])
    full = call(gw, "sessions_history", {"sessionKey": MANAGER, "includeTools": True})
    assert [m["role"] for m in full["messages"]][-1] == "tool"
    assert full["messages"][-2]["toolCalls"][0]["name"] == "grep"
    assert "hunter2" not in json.dumps(full) and full["contentRedacted"] is True


def test_history_limit_and_bounds(gw):
    for i in range(5):
        gw.transcripts.append_message(PEER, "user", f"m{i}")
    assert [m["text"] for m in call(gw, "sessions_history", {"sessionKey": PEER, "limit": 2})["messages"]] == ["m3", "m4"]
    gw.transcripts.append_message(PEER, "assistant", "x" * 5000)
    long = call(gw, "sessions_history", {"sessionKey": PEER})
    assert long["contentTruncated"] is True and len(long["messages"][-1]["text"]) < 4100
    for _ in range(30):
        gw.transcripts.append_message(PEER, "user", "y" * 3900)
    big = call(gw, "sessions_history", {"sessionKey": PEER})
    assert big["truncated"] is True and big["droppedMessages"] > 0 and big["bytes"] <= 80 * 1024


# -- session_status -----------------------------------------------------------------------------

def test_status_card_and_model_override(gw):
    card = ok(call(gw, "session_status", {"sessionKey": "current"}))
    assert card["sessionKey"] == MANAGER and card["stateVersion"] == gw.ops.state_version(MANAGER)
    assert card["model"] == "model-a" and card["modelOverride"] is None and card["runtime"] == "native"
    assert card["usage"]["messages"] == 2 and "Session agent:main:main" in card["card"]
    assert "stateChanges" not in card
    changed = ok(call(gw, "session_status", {"sessionKey": PEER, "model": "model-b"}))
    assert changed["model"] == "model-b" and changed["modelOverride"] == "model-b"
    cleared = ok(call(gw, "session_status", {"sessionKey": PEER, "model": "default"}))
    assert cleared["modelOverride"] is None and cleared["model"] == "default"


def test_status_changes_since_matches_the_python_api(gw):
    got = ok(call(gw, "session_status", {"sessionKey": MANAGER, "changesSince": 0}))
    assert got["stateChanges"] == gw.session_status(MANAGER, changes_since=0)["stateChanges"]
    assert [e["kind"] for e in got["stateChanges"]["events"]] == ["created", "human_direct_message"]


# -- sessions_send ------------------------------------------------------------------------------

def test_send_accepted_at_once_then_reply_lands(gw):
    result = ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "hello", "timeoutSeconds": 0}))
    assert result["status"] == "accepted" and result["sessionKey"] == PEER and "watched" not in result
    gw.runs.wait_for_runs()
    texts = [m.text for m in gw.transcripts.transcript(PEER)]
    assert texts[0].startswith("[Inter-session message from agent:main:main") and "isUser=false" in texts[0]
    assert texts[1] == "received: hello"


def test_send_waits_for_the_reply_and_marks_provenance(gw):
    result = ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "status?", "timeoutSeconds": 5}))
    assert (result["status"], result["reply"]) == ("ok", "received: status?")
    first = gw.transcripts.transcript(PEER)[0]
    assert first.provenance["kind"] == "inter_session" and first.provenance["isUser"] is False
    assert (first.actor_type, first.actor_id) == ("agent", MANAGER)


def test_send_statuses_timeout_error_no_reply(gw):
    gw.runs.runner.add(Rule(PEER, "reply", ["late"], delay=2.0))
    assert call(gw, "sessions_send", {"sessionKey": PEER, "message": "a", "timeoutSeconds": 0.1})["status"] == "timeout"
    gw.runs.runner.add(Rule(PEER, "reply", fail="model overloaded"))
    failed = call(gw, "sessions_send", {"sessionKey": PEER, "message": "b", "timeoutSeconds": 5})
    assert failed["status"] == "error" and "overloaded" in failed["error"]["message"]
    gw.runs.runner.add(Rule(PEER, "reply", ["REPLY_SKIP"]))
    assert call(gw, "sessions_send", {"sessionKey": PEER, "message": "c", "timeoutSeconds": 5})["status"] == "no_reply"
    gw.runs.wait_for_runs()
    assert "late" in [m.text for m in gw.transcripts.transcript(PEER)]  # the timed-out reply still landed


def test_send_with_watch_registers_the_receiver(gw):
    result = ok(call(gw, "sessions_send", {"sessionKey": "peer", "message": "hi", "timeoutSeconds": 0, "watch": True}))
    assert result["watched"] is True and result["sessionKey"] == PEER
    version = gw.ops.state_version(PEER)
    assert tuple(gw.ops.cursor_positions(MANAGER, PEER)) == (version,) * 3
    gw.transcripts.human_message(PEER, "a human steps in", channel="slack")
    assert gw.pending_system_events(MANAGER) == [
        f'Session "{PEER}" changed (other actor). Reconcile before acting: '
        f'session_status sessionKey "{PEER}" changesSince {version}.'
    ]


def test_send_with_watch_promotes_an_ambient_cursor_to_explicit(gw):
    gw.watch(MANAGER, PEER, ambient=True)
    ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0, "watch": True}))
    assert gw.ops.cursor_positions(MANAGER, PEER).provenance == "explicit"  # R25: an explicit watch


def test_send_watch_false_for_a_non_agent_qualified_sender(gw):
    gw.create_session("global", agent_id="main")
    result = ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0, "watch": True}, caller="global"))
    assert result["watched"] is False


def test_send_reports_watched_false_whenever_watch_false_was_given(gw):
    # The reference: the result reports watched: true|false whenever the parameter was given.
    result = ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0, "watch": False}))
    assert result["watched"] is False
    assert gw.ops.cursor_positions(MANAGER, PEER) is None  # and watch: false registered nothing
    gw.create_session("global", agent_id="main")
    result = ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0, "watch": False}, caller="global"))
    assert result["watched"] is False


def test_send_watch_false_reports_an_existing_cursor_and_keeps_it(gw):
    ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "a", "timeoutSeconds": 0, "watch": True}))
    positions = gw.ops.cursor_positions(MANAGER, PEER)
    result = ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "b", "timeoutSeconds": 0, "watch": False}))
    assert result["watched"] is True  # the sender still watches the receiver after the call
    assert gw.ops.cursor_positions(MANAGER, PEER) == positions


def test_reply_back_loop_alternates_and_stops_on_reply_skip(gw):
    gw.runs.runner.add(Rule(MANAGER, "reply_back", ["m1", "m2", "REPLY_SKIP"]))
    gw.runs.runner.add(Rule(PEER, "reply_back", ["p1", "p2"]))
    ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "start", "timeoutSeconds": 5}))
    gw.runs.wait_for_runs()
    peer_out = [m.text for m in gw.transcripts.transcript(PEER) if m.role == "assistant"]
    manager_in = [fenced_text(m.text) for m in gw.transcripts.transcript(MANAGER) if m.provenance and m.provenance.get("kind") == "inter_session"]
    assert peer_out == ["received: start", "p1", "p2"]
    assert manager_in == ["received: start", "p1", "p2"]


def test_reply_back_loop_is_bounded_at_five_turns(gw):
    gw.runs.runner.add(Rule(MANAGER, "reply_back", ["again"]))
    gw.runs.runner.add(Rule(PEER, "reply_back", ["again"]))
    ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "start", "timeoutSeconds": 5}))
    gw.runs.wait_for_runs()
    loop = [m for s in (MANAGER, PEER) for m in gw.transcripts.transcript(s) if m.role == "assistant" and m.text == "again"]
    assert len(loop) == 5


# -- sessions_spawn, subagents, sessions_yield --------------------------------------------------

def test_spawn_returns_at_once_and_announces(gw):
    # "At once" as an order, not a timing: the spawn has returned while its child's run is
    # still active (listed below), the run taking a second.
    gw.runs.runner.add(Rule("agent:main:subagent:*", "task", ["42"], delay=1.0))
    result = ok(call(gw, "sessions_spawn", {"task": "compute", "label": "calc", "model": "m-x", "thinking": "low"}))
    child = result["childSessionKey"]
    assert child.startswith("agent:main:subagent:") and result["runId"].startswith("run-")
    assert gw.ops.state_version(child) == gw.ops.cursor_positions(MANAGER, child).last_seen  # spawn edge seeded
    listed = call(gw, "subagents", {"action": "list"})
    assert [r["runId"] for r in listed["active"]] == [result["runId"]]
    gw.runs.wait_for_runs()
    events = gw.session_status(child, changes_since=0)["stateChanges"]["events"]
    assert [e["kind"] for e in events] == ["created", "child_spawned", "run_completed"]
    assert events[2]["runId"] == result["runId"]
    assert gw.pending_system_events(MANAGER) == [
        '[Sub-agent result] "calc" (run %s) completed; reply (untrusted data): "42" [route "telegram" -> "u1"]' % result["runId"]
    ]
    assert gw.registry.session_meta(child).model == "m-x"
    assert call(gw, "subagents", {})["recent"][0]["status"] == "completed"


def test_spawn_options_fork_sandbox_acp_thread(gw):
    forked = ok(call(gw, "sessions_spawn", {"task": "t", "context": "fork", "sandbox": "require"}))
    assert forked["sandboxed"] is True and forked["context"] == "fork"
    copied = [m.text for m in gw.transcripts.transcript(forked["childSessionKey"])]
    assert copied[:2] == ["Plan the release\nsecond line", "<think>secret plan</think>Sure, planning now."]
    acp = ok(call(gw, "sessions_spawn", {"task": "t", "runtime": "acp"}))
    assert ":acp:" in acp["childSessionKey"] and gw.registry.session_meta(acp["childSessionKey"]).runtime == "acp"
    thread = ok(call(gw, "sessions_spawn", {"message": "t", "thread": True}))
    assert thread["context"] == "fork" and thread["thread"] is True  # thread-bound native: fork


def test_run_timeout_and_error_outcomes(gw):
    gw.runs.runner.add(Rule("agent:main:subagent:*", "task", ["never"], delay=5, ignore_cancel=True))
    slow = ok(call(gw, "sessions_spawn", {"task": "slow", "timeoutSeconds": 0.2}))
    time.sleep(0.6)
    events = gw.session_status(slow["childSessionKey"], changes_since=0)["stateChanges"]["events"]
    assert events[-1]["kind"] == "run_failed" and events[-1]["payload"] == {"outcome": "timeout"}
    gw.runs.runner.add(Rule("agent:main:subagent:*", "task", fail="boom"))
    broken = ok(call(gw, "sessions_spawn", {"task": "broken"}))
    deadline = time.monotonic() + 5
    while gw.runs.get_run(broken["runId"]).status == "running" and time.monotonic() < deadline:
        time.sleep(0.01)
    events = gw.session_status(broken["childSessionKey"], changes_since=0)["stateChanges"]["events"]
    assert events[-1]["payload"] == {"outcome": "error"}
    assert any('failed (error); detail (untrusted data): "RuntimeError: boom"' in line for line in gw.pending_system_events(MANAGER))


def test_steer_and_kill(gw):
    gw.runs.runner.add(Rule("agent:main:subagent:*", "task", ["done"], delay=30))
    a = ok(call(gw, "sessions_spawn", {"task": "a"}))
    b = ok(call(gw, "sessions_spawn", {"task": "b"}))
    steered = ok(call(gw, "subagents", {"action": "steer", "target": a["childSessionKey"], "message": "focus on x"}))
    assert steered["runId"] == a["runId"]
    assert gw.transcripts.transcript(a["childSessionKey"])[-1].provenance["kind"] == "steer"
    killed = ok(call(gw, "subagents", {"action": "kill", "target": a["runId"]}))
    assert killed["killed"] == [a["runId"]]
    event = gw.session_status(a["childSessionKey"], changes_since=0)["stateChanges"]["events"][-1]
    assert (event["kind"], event["payload"], event["actorId"]) == ("run_failed", {"outcome": "cancelled"}, MANAGER)
    assert error_code(call(gw, "subagents", {"action": "kill", "target": a["runId"]})) == "not_running"
    assert ok(call(gw, "subagents", {"action": "kill", "target": "all"}))["killed"] == [b["runId"]]
    assert ok(call(gw, "subagents", {"action": "kill", "target": "all"}))["killed"] == []
    gw.runs.wait_for_runs()
    assert gw.pending_system_events(MANAGER) == []  # the requester killed them: no announce


def test_kill_is_recorded_once(gw):
    gw.runs.runner.add(Rule("agent:main:subagent:*", "task", ["done"], delay=30))
    run = ok(call(gw, "sessions_spawn", {"task": "a"}))
    assert gw.runs.kill_run(run["runId"], actor_id=MANAGER) is True
    assert gw.runs.kill_run(run["runId"], actor_id=MANAGER) is False
    assert gw.runs.finish_run(run["runId"], "completed", text="late") is False
    kinds = [e["kind"] for e in gw.session_status(run["childSessionKey"], changes_since=0)["stateChanges"]["events"]]
    assert kinds == ["created", "child_spawned", "run_failed"]


def test_yield_reports_and_the_result_wakes(db_url):
    wakes = []
    gw, runner = open_gateway(db_url, on_wake=lambda w, r: wakes.append((w, r)))
    gw.create_session(MANAGER)
    runner.add(Rule("agent:main:subagent:*", "task", ["r"], delay=0.2))
    run = ok(call(gw, "sessions_spawn", {"task": "t"}))
    result = ok(call(gw, "sessions_yield", {"message": "waiting"}))
    assert result == {"status": "yielded", "activeRuns": [run["runId"]], "queuedResults": 0,
                      "nextMessageReady": False, "message": "waiting"}
    gw.runs.wait_for_runs()
    assert len(gw.pending_system_events(MANAGER)) == 1 and wakes
    assert ok(call(gw, "sessions_yield"))["nextMessageReady"] is True
    gw.close()


# -- profiles and depth ---------------------------------------------------------------------------

def test_messaging_profile_and_also_allow_and_deny(db_url):
    gw, _ = open_gateway(db_url, policy=ToolPolicy(profile="messaging"))
    gw.create_session(MANAGER)
    assert error_code(call(gw, "sessions_spawn", {"task": "x"})) == "tool_not_allowed"
    assert ok(call(gw, "sessions_list"))["count"] == 1
    gw.configure_tools(ToolPolicy(profile="messaging", also_allow=frozenset({"sessions_spawn"})))
    assert ok(call(gw, "sessions_spawn", {"task": "x"}))["status"] == "accepted"
    gw.configure_tools(ToolPolicy(profile="coding", deny={"main": frozenset({"sessions_list"})}))
    gw.runs.wait_for_runs()
    before = full_dump(gw)
    assert error_code(call(gw, "sessions_list")) == "tool_not_allowed"
    assert full_dump(gw) == before
    gw.close()


def test_spawn_depth_gates_leaves_and_orchestrators(db_url):
    gw, runner = open_gateway(db_url)
    runner.add(Rule("*", "task", ["x"], delay=30))
    gw.create_session(MANAGER)
    child = ok(call(gw, "sessions_spawn", {"task": "x"}))["childSessionKey"]
    assert error_code(call(gw, "sessions_list", caller=child)) == "tool_not_allowed"  # leaf at depth 1
    assert ok(call(gw, "session_status", caller=child))["spawnDepth"] == 1  # reconciliation stays
    gw.configure_tools(ToolPolicy(max_spawn_depth=2))
    assert ok(call(gw, "sessions_list", caller=child))["count"] == 1
    grandchild = ok(call(gw, "sessions_spawn", {"task": "y"}, caller=child))["childSessionKey"]
    assert error_code(call(gw, "sessions_send", {"sessionKey": MANAGER, "message": "x"}, caller=child)) == "tool_not_allowed"
    assert error_code(call(gw, "sessions_spawn", {"task": "z"}, caller=grandchild)) == "tool_not_allowed"
    gw.runs.stop_runs()
    gw.close()


def test_every_tool_has_a_published_schema(gw):
    from sessionstate.tools.dispatch import TOOLS

    assert list(TOOLS) == list(TOOL_SCHEMAS)
    assert gw.allowed_tools(MANAGER) == list(TOOL_SCHEMAS)


# -- Python API: producers and recent user messages -------------------------------------------------

def test_goal_and_compaction_producers(gw):
    gw.watch(PEER, MANAGER)
    assert gw.producers.goal_changed(MANAGER, "updated", actor_type="agent", actor_id=PEER) is not None
    assert gw.pending_system_events(PEER) == []  # self-suppressed: PEER changed it
    gw.producers.goal_changed(MANAGER, "cleared", actor_type="human")
    assert len(gw.pending_system_events(PEER)) == 1
    first = gw.producers.compacted(MANAGER, "op-1", messages_before=40, messages_after=5)
    assert gw.producers.compacted(MANAGER, "op-1") == first  # deduped on compacted:<opId>
    summaries = [e["summary"] for e in gw.session_status(MANAGER, changes_since=0)["stateChanges"]["events"]]
    assert summaries[-3:] == [f"goal updated by {PEER}", "goal cleared by human", "history compacted: 40 -> 5 messages"]
    with pytest.raises(Exception):
        gw.producers.goal_changed(MANAGER, "renamed", actor_type="human")


def test_recent_user_messages(gw):
    for i in range(12):
        gw.transcripts.append_message(PEER, "user", f"u{i}")
        gw.transcripts.append_message(PEER, "assistant", f"a{i}")
    assert gw.transcripts.recent_user_messages(PEER) == [f"u{i}" for i in range(2, 12)]
    assert gw.transcripts.recent_user_messages(PEER, limit=2) == ["u10", "u11"]
    ok(call(gw, "sessions_send", {"sessionKey": PEER, "message": "ping", "timeoutSeconds": 0}))
    gw.runs.wait_for_runs()
    delivered = gw.transcripts.recent_user_messages(PEER, limit=1)[0]
    assert delivered.startswith("[Inter-session message from agent:main:main") and fenced_text(delivered) == "ping"


def test_delete_drops_tool_rows(gw):
    run = ok(call(gw, "sessions_spawn", {"task": "t"}))
    gw.runs.wait_for_runs()
    gw.ops.delete_session(run["childSessionKey"])
    dump = full_dump(gw)
    assert all(run["childSessionKey"] not in repr(row) for name in ("session_meta", "session_messages", "agent_runs") for row in dump[name])

"""The issue's scenario, through the tools: a manager spawns two children, a human steps into
one, two peers talk with sessions_send watch:true and a reply-back loop ended by REPLY_SKIP,
the manager kills one child, the other's result is announced; notices and changesSince are
exactly as the protocol says."""

from __future__ import annotations

from sessionstate import notice_text
from sessionstate.shared.fencing import fenced_text
from sessionstate.runner import Rule
from sessionstate.services.notice.announce import created_line
from sessionstate.shared.policy import ToolPolicy

from .support import MANAGER, PEER, ok, open_gateway


def kinds(gw, key, since=0):
    return [e["kind"] for e in gw.session_status(key, changes_since=since)["stateChanges"]["events"]]


def test_manager_children_human_peers_kill_announce(db_url):
    wakes: list[tuple[str, str]] = []
    gw, runner = open_gateway(db_url, policy=ToolPolicy(visibility="agent"), on_wake=lambda w, r: wakes.append((w, r)))
    gw.create_session(MANAGER, channel="telegram")
    gw.create_session(PEER, channel="slack")
    gw.registry.set_route(MANAGER, "telegram", "chat-7")
    # R27: the main session hears that PEER was created (one line, no wake); its turn reads it.
    assert gw.drain_system_events(MANAGER) == [created_line(PEER, "main", None)] and wakes == []
    runner.add(Rule("agent:main:subagent:*", "task", ["report ready"], delay=30))

    # 1. The manager spawns two children: never blocks, both spawn edges seed its cursors.
    one = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "research", "label": "researcher"}))
    two = ok(gw.call_tool(MANAGER, "sessions_spawn", {"task": "draft", "label": "drafter"}))
    c1, c2 = one["childSessionKey"], two["childSessionKey"]
    seed1 = gw.ops.state_version(c1)
    assert tuple(gw.ops.cursor_positions(MANAGER, c1)) == (seed1, seed1, seed1)
    assert gw.pending_system_events(MANAGER) == []  # spawning notifies nobody

    # 2. A human steps into the first child three times: one coalesced notice, one wake.
    for text in ("stop, use the new data", "and hurry", "thanks"):
        gw.transcripts.human_message(c1, text, channel="telegram", sender="alice")
    assert gw.pending_system_events(MANAGER) == [notice_text(c1, seed1)]
    assert [w for w, _ in wakes] == [MANAGER]

    # 3. The manager's turn: drain, reconcile with exactly the delta, steer the child.
    assert gw.drain_system_events(MANAGER) == [notice_text(c1, seed1)]
    delta = ok(gw.call_tool(MANAGER, "session_status", {"sessionKey": c1, "changesSince": seed1}))
    assert [e["kind"] for e in delta["stateChanges"]["events"]] == ["human_direct_message"] * 3
    assert delta["stateChanges"]["historyGap"] is False and delta["task"]["runId"] == one["runId"]
    # R8: the drain acknowledged up to the frozen watermark (the first message); the two that
    # arrived after it reopen exactly one follow-up, since that watermark.
    first = delta["stateChanges"]["events"][0]["sequence"]
    assert gw.drain_system_events(MANAGER) == [notice_text(c1, first)]
    assert gw.pending_system_events(MANAGER) == []
    ok(gw.call_tool(MANAGER, "subagents", {"action": "steer", "target": c1, "message": "include the human's data"}))
    assert gw.pending_system_events(MANAGER) == []  # steering is the manager's own act: log nothing

    # 4. Peers: PEER sends to the manager with watch:true; a reply-back loop, ended by REPLY_SKIP.
    runner.add(Rule(MANAGER, "reply", ["on it"]))
    runner.add(Rule(PEER, "reply_back", ["need it by noon"]))
    runner.add(Rule(MANAGER, "reply_back", ["REPLY_SKIP"]))
    sent = ok(gw.call_tool(PEER, "sessions_send", {"sessionKey": "main", "message": "status of research?",
                                                   "timeoutSeconds": 5, "watch": True}))
    assert (sent["status"], sent["reply"], sent["watched"], sent["sessionKey"]) == ("ok", "on it", True, MANAGER)
    gw.runs.wait_for_runs(timeout=0.5)  # the children still run; the exchange ends quickly
    manager_view = [(m.role, fenced_text(m.text) or m.text) for m in gw.transcripts.transcript(MANAGER)]
    assert manager_view == [("user", "status of research?"), ("assistant", "on it"), ("user", "need it by noon")]
    assert all(m.provenance["isUser"] is False for m in gw.transcripts.transcript(MANAGER) if m.role == "user")
    # Inter-session messages record no signal-log event: the peer's watch sees nothing yet.
    assert gw.pending_system_events(PEER) == []
    watch_seed = gw.ops.cursor_positions(PEER, MANAGER).last_seen
    # The peer's own goal edit is self-suppressed; a human's is not.
    gw.producers.goal_changed(MANAGER, "updated", actor_type="agent", actor_id=PEER)
    assert gw.pending_system_events(PEER) == []
    gw.transcripts.human_message(MANAGER, "new priorities", channel="telegram", sender="alice")
    assert gw.pending_system_events(PEER) == [notice_text(MANAGER, watch_seed)]
    peer_delta = ok(gw.call_tool(PEER, "session_status", {"sessionKey": MANAGER, "changesSince": watch_seed}))
    assert [(e["kind"], e.get("actorId")) for e in peer_delta["stateChanges"]["events"]] == [
        ("goal_changed", PEER), ("human_direct_message", None)]

    # 5. Kill the second child: run_failed/cancelled, recorded once, log-only, no announce.
    killed = ok(gw.call_tool(MANAGER, "subagents", {"action": "kill", "target": c2}))
    assert killed["killed"] == [two["runId"]]
    assert kinds(gw, c2) == ["created", "child_spawned", "run_failed"]
    assert gw.pending_system_events(MANAGER) == []

    # 6. The first child finishes: run_completed (log-only) and the announce on the route.
    assert gw.runs.finish_run(one["runId"], "completed", text="report ready (steered)") is True
    assert kinds(gw, c1) == ["created", "child_spawned"] + ["human_direct_message"] * 3 + ["run_completed"]
    assert gw.pending_system_events(MANAGER) == [
        '[Sub-agent result] "researcher" (run %s) completed; reply (untrusted data): "report ready (steered)"'
        ' [route "telegram" -> "alice"]' % one["runId"]  # the latest human turn set the route
    ]
    listed = ok(gw.call_tool(MANAGER, "subagents", {"action": "list"}))
    assert listed["active"] == [] and {r["status"] for r in listed["recent"]} == {"completed", "failed"}
    cursor = gw.ops.cursor_positions(MANAGER, c1)
    assert cursor.last_seen == cursor.notified == cursor.material  # log-only events opened nothing
    gw.runs.stop_runs()
    gw.close()

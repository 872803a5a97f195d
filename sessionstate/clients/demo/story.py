"""``sessionstate demo``: the protocol told as a story, on a real database file.

The story is the same on every run: it starts on an empty database (database.py), its clock
starts at a fixed instant and moves only where the story says time passes, and its ids are
scripted, so two runs print the same lines but for the database's path."""

from __future__ import annotations

import json

from .database import demo_url, refuse_non_empty
from .narration import heading, show_json, show_lines
from ...facade.gateway import Gateway
from ...shared.timefmt import DAY_SECONDS

MANAGER = "agent:main:main"
WORKER = "agent:main:subagent:worker"
DEMO_SESSIONS = (WORKER, MANAGER)


# 2026-01-05T09:00:00Z: the instant the story begins, whatever the day it is run.
STORY_START = 1_767_603_600.0


class DemoClock:
    """The story's time: a fixed start plus whatever the story says has passed. Real time would
    put a different ``occurredAt`` into every run's output."""

    def __init__(self, start: float = STORY_START) -> None:
        self.start = start
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def __call__(self) -> float:
        return self.start + self.offset


def _adopted_session_step(gw: Gateway, number: int) -> None:
    """An external Claude Code session is adopted; a human types into it upstream."""
    import tempfile
    import uuid
    from pathlib import Path

    from ...upstream.adoption import Adopter, adopted_key
    from ...upstream.catalog import ClaudeJsonlSource, SessionCatalog
    from ...upstream.monitor import UpstreamMonitor
    from ...upstream.providers import ClaudeJsonlProvider

    heading(number, "An external Claude Code session is adopted; a human types into it upstream")
    thread = "d3m0c0de-0000-4000-8000-000000000001"
    with tempfile.TemporaryDirectory() as tmp:
        transcript = Path(tmp) / "-home-dev-gateway" / f"{thread}.jsonl"
        transcript.parent.mkdir()

        def line(kind: str, content: str) -> str:
            return json.dumps({"type": kind, "uuid": str(uuid.uuid4()), "sessionId": thread, "userType": "external",
                               "message": {"role": kind, "content": content}}) + "\n"

        transcript.write_text(line("user", "refactor the store") + line("assistant", "done"), encoding="utf-8")
        providers = {"claude-jsonl": ClaudeJsonlProvider(tmp)}
        (entry,) = SessionCatalog([ClaudeJsonlSource(tmp)]).list().entries
        print(f"   catalog: {entry.provider} thread {entry.thread_id}")
        if gw.ops.session_exists(adopted_key(entry)):  # a previous run's adoption
            gw.ops.delete_session(adopted_key(entry))
        adopted = Adopter(gw, providers).adopt(entry, watcher=MANAGER)
        since = gw.ops.state_version(adopted.session_key)
        print(f"   adopted as {adopted.session_key} (link generation {adopted.generation}); the manager watches it")
        monitor = UpstreamMonitor(gw, providers)
        with transcript.open("a", encoding="utf-8") as handle:
            handle.write(line("user", "hold on, use the staging database"))
        print(f"   monitor tick: {monitor.tick()}")
        show_lines("manager's queue", gw.drain_system_events(MANAGER))
        print(f"   session_status of the adopted session, changesSince {since}:")
        show_json(gw.session_status(adopted.session_key, changes_since=since))


def _tools_step(gw: Gateway, number: int) -> None:
    """The agent-facing tools: spawn, send with watch and a reply-back loop, kill, announce."""
    from ...runner import Rule, ScriptedRunner
    from ...shared.policy import ToolPolicy

    heading(number, "The session tools: spawn two children, a peer sends with watch:true, kill one, announce")
    peer = "agent:main:peer"
    children = [f"agent:main:subagent:demo-tool-{i}" for i in (1, 2)]
    for key in (*children, peer):  # a previous run's sessions
        if gw.ops.session_exists(key):
            gw.ops.delete_session(key)
    ids = iter(f"demo-tool-{i}" for i in range(1, 100))
    runner = ScriptedRunner([
        Rule(children[0], "task", ["3 warnings in the logs"]),
        Rule(children[1], "task", ["never"], delay=60),
        Rule(MANAGER, "reply", ["on it: two children running"]),
        Rule(peer, "reply_back", ["ping me when the survey is in"]),
        Rule(MANAGER, "reply_back", ["REPLY_SKIP"]),
    ])
    gw.configure_tools(ToolPolicy(visibility="agent"), runner=runner, id_factory=lambda: next(ids))
    gw.create_session(peer, channel="slack")
    gw.registry.set_route(MANAGER, "telegram", "ops-chat")
    survey = gw.call_tool(MANAGER, "sessions_spawn", {"task": "survey the logs", "label": "surveyor"})
    # The survey finishes before the second child starts: two runs recording at once would number
    # their events in a different order on every run of the story.
    gw.runs.executor.wait_for(survey["runId"])
    slow = gw.call_tool(MANAGER, "sessions_spawn", {"task": "rewrite everything", "label": "rewriter"})
    print(f"   sessions_spawn -> {json.dumps({k: survey[k] for k in ('status', 'runId', 'childSessionKey')})}")
    sent = gw.call_tool(peer, "sessions_send", {"sessionKey": "main", "message": "how is the survey going?",
                                                "timeoutSeconds": 5, "watch": True})
    print(f"   sessions_send (peer -> manager, watch) -> {json.dumps(sent)}")
    gw.runs.executor.wait_for(sent["runId"])
    recent = gw.transcripts.transcript(MANAGER)[-3:]
    print(f"   the manager's transcript, newest: {len(recent)} message(s)")
    for message in recent:
        print(f"     | {message.role}: {' / '.join(message.text.splitlines())}")
    killed = gw.call_tool(MANAGER, "subagents", {"action": "kill", "target": slow["runId"]})
    print(f"   subagents kill -> {json.dumps(killed)}")
    listed = gw.call_tool(MANAGER, "subagents", {"action": "list"})
    print(f"   subagents list: {len(listed['recent'])} run(s)")
    for run in listed["recent"]:
        print(f"     | run {run['runId']} {run['label']}: {run['status']} {run.get('outcome', '')}")
    show_lines("manager's queue (the announce, on its stored route)", gw.drain_system_events(MANAGER))
    rows = gw.call_tool(MANAGER, "sessions_list", {"includePreview": True})["sessions"]
    print(f"   sessions_list (includePreview): {len(rows)} session(s)")
    for row in rows:
        print(f"     | {row['key']:<36} {row['kind']:<8} v{row.get('stateVersion', '-')}  {row.get('preview') or ''}")
    gw.transcripts.human_message(MANAGER, "a human steps in on telegram", channel="telegram", sender="ops-chat")
    show_lines("the peer watches the manager now; its queue", gw.drain_system_events(peer))


def run_demo(db: str | None, *, reuse: bool = False) -> int:
    url = demo_url(db)
    clock = DemoClock()
    wakes: list[tuple[str, str]] = []

    def on_wake(watcher: str, reason: str) -> None:
        wakes.append((watcher, reason))
        print(f"   wake -> {watcher} ({reason})")

    gw = Gateway.open(url, clock=clock, on_wake=on_wake)
    try:
        refuse_non_empty([s.session_key for s in gw.store.list_sessions()], url, reuse=reuse)
    except BaseException:
        gw.close()
        raise
    print(f"sessionstate demo on {url}")
    for key in DEMO_SESSIONS:  # --reuse: a previous run's sessions, so the story starts clean
        if gw.ops.session_exists(key):
            gw.ops.delete_session(key)

    heading(1, "A manager spawns a worker: the spawn edge seeds the manager's cursor")
    # The protocol's own create_session: no metadata row, so no random session id in the story
    # the two runs of tests/test_demo.py compare.
    gw.ops.create_session(MANAGER)
    gw.ops.create_session(WORKER, kind="subagent", parent=MANAGER, run_id="demo-run-1")
    spawn_version = gw.ops.state_version(WORKER)
    cursor = gw.ops.cursor_positions(MANAGER, WORKER)
    assert cursor is not None  # the spawn edge seeded it
    print(f"   worker stateVersion {spawn_version}; manager cursor {tuple(cursor)}")
    # R27: each new session logs `created` first (log-only), so the spawn is not sequence 1.
    log = gw.session_status(WORKER, changes_since=0)["stateChanges"]["events"]
    print("   worker's log: " + ", ".join(f"{e['sequence']} {e['kind']}" for e in log)
          + f" (sequences are global: {gw.ops.state_version(MANAGER)} is the manager's created)")

    heading(2, "A human steps into the worker over telegram, twenty times")
    for turn in range(1, 21):
        clock.advance(0.5)
        gw.record_event(
            WORKER, "human_direct_message", actor_type="human",
            summary="human message via telegram", payload={"channel": "telegram", "turns": 1},
            dedupe_key=None,
        )
        if turn == 1:
            show_lines("manager's queue after the first message", gw.pending_system_events(MANAGER))
    show_lines("manager's queue after twenty messages", gw.pending_system_events(MANAGER))
    print(f"   wakes sent: {len(wakes)} (coalesced within 20 s)")

    clock.advance(60)
    heading(3, "The manager's turn: one notice, then reconcile with changesSince")
    drained = gw.drain_system_events(MANAGER)
    show_lines("drained", drained)
    reply = gw.call_tool(MANAGER, "session_status", {"sessionKey": WORKER, "changesSince": spawn_version})
    print(f"   the manager's session_status call, changesSince {spawn_version}:")
    show_json(reply)
    follow_up = gw.pending_system_events(MANAGER)
    print("   events that landed after the notice was queued reopen exactly one follow-up:")
    show_lines("manager's queue", follow_up)
    gw.drain_system_events(MANAGER)
    cursor = gw.ops.cursor_positions(MANAGER, WORKER)
    assert cursor is not None
    print(f"   manager cursor now {tuple(cursor)}")

    clock.advance(60)
    heading(4, "The worker's goal changes, then the gateway restarts before the manager's turn")
    gw.record_event(WORKER, "goal_changed", actor_type="human", summary="goal updated")
    before = gw.pending_system_events(MANAGER)
    show_lines("queue before the restart", before)
    gw.close()
    gw = Gateway.open(url, clock=clock, on_wake=on_wake)
    after = gw.pending_system_events(MANAGER)
    show_lines("queue after reopening (startup sweep)", after)
    print(f"   byte-identical after the restart: {before == after}")
    cursor = gw.ops.cursor_positions(MANAGER, WORKER)
    assert cursor is not None
    noticed_since = cursor.last_seen
    gw.drain_system_events(MANAGER)

    clock.advance(60)
    _adopted_session_step(gw, 5)

    clock.advance(60)
    _tools_step(gw, 6)

    heading(7, "Thirty-one days pass; pruning opens an exact history gap")
    clock.offset += 31 * DAY_SECONDS
    counts = gw.prune()
    print(f"   pruned: {counts}")
    gap = gw.session_status(WORKER, changes_since=noticed_since)
    print(f"   session_status of the worker, changesSince {noticed_since} (the manager's last seen):")
    show_json(gap)
    print("   historyGap true: refresh the whole session instead of trusting a delta;")
    print(f"   stateVersion stays {gap['stateVersion']}: heads survive pruning.")
    gw.runs.stop_runs()
    gw.close()
    print(f"\nThe story's database is left as it ends: sessionstate sessions --db '{url}'")
    return 0

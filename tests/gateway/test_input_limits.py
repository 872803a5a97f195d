"""Invalid Unicode and unbounded values are refused at the boundary (spec section 12).

A lone surrogate (``json.loads('"\\ud800"')`` makes one, so an agent can send it) in any
string field of any entry point, a payload nested 100,000 deep, or an ``occurred_at`` beyond
the float range: each is a typed ``InvalidArgument`` (an ``invalid_argument`` result from
``call_tool``) and the database is byte-for-byte unchanged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from sessionstate import Gateway, InvalidArgument
from sessionstate.tools.schemas import TOOL_SCHEMAS
from sessionstate.shared.validation import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES

from ..tools.support import MANAGER, PEER, full_dump, open_gateway

SURROGATE = json.loads('"\\ud800"')
BAD = "text" + SURROGATE  # a plausible string with one lone surrogate in it
CHILD = "agent:main:subagent:child"
SPEC = Path(__file__).resolve().parents[2] / "spec" / "notice-protocol.md"


@pytest.fixture
def gw(db_url):
    gateway, _ = open_gateway(db_url)
    gateway.create_session(MANAGER, channel="telegram")
    gateway.create_session(PEER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER)
    gateway.record_event(CHILD, "human_direct_message", actor_type="human", summary="hello")
    yield gateway
    gateway.runs.wait_for_runs()
    gateway.close()


def nested(depth: int) -> Any:
    """A list nested ``depth`` levels deep, built without recursion."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def rec(**overrides: Any) -> Callable[[Gateway], Any]:
    args: dict[str, Any] = dict(session_key=CHILD, kind="goal_changed", actor_type="agent", summary="ok")
    args.update(overrides)
    key, kind = args.pop("session_key"), args.pop("kind")
    # A fresh call each time: the same bad call runs once per backend.
    return lambda gw: gw.record_event(key, kind, **args)


def msg(**overrides: Any) -> Callable[[Gateway], Any]:
    args: dict[str, Any] = dict(session_key=MANAGER, role="user", text="hi")
    args.update(overrides)
    key, role, text = args.pop("session_key"), args.pop("role"), args.pop("text")
    return lambda gw: gw.transcripts.append_message(key, role, text, **args)


# Every string parameter of every public Gateway method, each given one lone surrogate.
SURROGATE_CALLS: dict[str, Callable[[Gateway], Any]] = {
    "create_session key": lambda gw: gw.create_session("agent:main:" + BAD),
    "create_session agent_id": lambda gw: gw.create_session("x", agent_id=BAD),
    "create_session kind": lambda gw: gw.create_session("agent:main:new", kind=BAD),
    "create_session parent": lambda gw: gw.create_session("agent:main:new", parent=BAD),
    "create_session label": lambda gw: gw.create_session("agent:main:new", label=BAD),
    "create_session run_id": lambda gw: gw.create_session("agent:main:new", parent=MANAGER, run_id=BAD),
    "register_session channel": lambda gw: gw.create_session("agent:main:new", channel=BAD),
    "register_session model": lambda gw: gw.create_session("agent:main:new", model=BAD),
    "register_session thinking": lambda gw: gw.create_session("agent:main:new", thinking=BAD),
    "register_session runtime": lambda gw: gw.create_session("agent:main:new", runtime=BAD),
    "record_event session_key": rec(session_key=BAD),
    "record_event kind": rec(kind=BAD),
    "record_event actor_type": rec(actor_type=BAD),
    "record_event summary": rec(summary=BAD),
    "record_event actor_id": rec(actor_id=BAD),
    "record_event agent_id": rec(agent_id=BAD),
    "record_event run_id": rec(run_id=BAD),
    "record_event dedupe_key": rec(dedupe_key=BAD),
    "record_event payload value": rec(payload={"channel": BAD}),
    "record_event payload key": rec(payload={BAD: 1}),
    "record_event nested payload value": rec(payload={"a": [{"b": BAD}]}),
    "record_events summary": lambda gw: gw.record_events(
        [dict(session_key=CHILD, kind="goal_changed", actor_type="agent", summary=BAD)]),
    "watch watcher": lambda gw: gw.watch(BAD, PEER),
    "watch target": lambda gw: gw.watch(MANAGER, BAD),
    "watch target agent": lambda gw: gw.watch(MANAGER, "peer", target_agent_id=BAD),
    "unwatch watcher": lambda gw: gw.unwatch(BAD, CHILD),
    "drain_system_events": lambda gw: gw.drain_system_events(BAD),
    "pending_system_events": lambda gw: gw.pending_system_events(BAD),
    "enqueue_system_event key": lambda gw: gw.ops.enqueue_system_event(BAD, "line"),
    "enqueue_system_event text": lambda gw: gw.ops.enqueue_system_event(MANAGER, BAD),
    "session_status key": lambda gw: gw.session_status(BAD),
    "session_status agent_id": lambda gw: gw.session_status("main", agent_id=BAD),
    "session_exists": lambda gw: gw.ops.session_exists(BAD),
    "reset_session": lambda gw: gw.ops.reset_session(BAD),
    "delete_session": lambda gw: gw.ops.delete_session(BAD),
    "cursor_positions": lambda gw: gw.ops.cursor_positions(MANAGER, BAD),
    "state_version": lambda gw: gw.ops.state_version(BAD),
    "session_meta": lambda gw: gw.registry.session_meta(BAD),
    "resolve_session_id": lambda gw: gw.registry.resolve_session_id(BAD),
    "set_model_override model": lambda gw: gw.registry.set_model_override(MANAGER, BAD),
    "set_route channel": lambda gw: gw.registry.set_route(MANAGER, BAD),
    "set_route to": lambda gw: gw.registry.set_route(MANAGER, "telegram", BAD),
    "append_message key": msg(session_key=BAD),
    "append_message role": msg(role=BAD),
    "append_message text": msg(text=BAD),
    "append_message actor_type": msg(actor_type=BAD),
    "append_message actor_id": msg(actor_id=BAD),
    "append_message provenance": msg(provenance={"kind": BAD}),
    "append_message tool_calls": msg(role="assistant", tool_calls=[{"name": BAD}]),
    "append_message tool_result": msg(role="tool", tool_result=BAD),
    "human_message text": lambda gw: gw.transcripts.human_message(MANAGER, BAD),
    "human_message channel": lambda gw: gw.transcripts.human_message(MANAGER, "hi", channel=BAD),
    "human_message sender": lambda gw: gw.transcripts.human_message(MANAGER, "hi", channel="telegram", sender=BAD),
    "recent_user_messages": lambda gw: gw.transcripts.recent_user_messages(BAD),
    "transcript": lambda gw: gw.transcripts.transcript(BAD),
    "goal_changed change": lambda gw: gw.producers.goal_changed(CHILD, BAD, actor_type="agent"),
    "goal_changed actor_id": lambda gw: gw.producers.goal_changed(CHILD, "updated", actor_type="agent", actor_id=BAD),
    "compacted op_id": lambda gw: gw.producers.compacted(CHILD, BAD),
    "get_run": lambda gw: gw.runs.get_run(BAD),
    "runs_of": lambda gw: gw.runs.runs_of((BAD, "main")),
    "runs_of_child": lambda gw: gw.runs.runs_of_child((CHILD, BAD)),
    "finish_run run_id": lambda gw: gw.runs.finish_run(BAD, "completed"),
    "finish_run outcome": lambda gw: gw.runs.finish_run("run-1", BAD),
    "finish_run text": lambda gw: gw.runs.finish_run("run-1", "completed", text=BAD),
    "kill_run run_id": lambda gw: gw.runs.kill_run(BAD),
    "kill_run actor_id": lambda gw: gw.runs.kill_run("run-1", actor_id=BAD),
    "steer_run guidance": lambda gw: gw.runs.steer_run("run-1", BAD, sender=MANAGER),
    "steer_run sender": lambda gw: gw.runs.steer_run("run-1", "go on", sender=BAD),
    "call_tool caller": lambda gw: gw.call_tool(BAD, "session_status", {}),
}


@pytest.mark.parametrize("name", sorted(SURROGATE_CALLS))
def test_a_lone_surrogate_in_any_python_api_string_is_invalid_argument(gw, name):
    before = full_dump(gw)
    queued = gw.pending_system_events(MANAGER)
    call = SURROGATE_CALLS[name]
    if name.startswith("call_tool"):
        result = call(gw)
        assert result["status"] == "error" and result["error"]["code"] in {"invalid_argument", "unknown_session"}
    else:
        with pytest.raises(InvalidArgument):
            call(gw)
    assert full_dump(gw) == before
    assert gw.pending_system_events(MANAGER) == queued


# A valid call of each tool; each string argument in turn then gets the surrogate.
BASE_ARGS: dict[str, dict[str, Any]] = {
    "sessions_list": {},
    "sessions_history": {"sessionKey": PEER},
    "sessions_send": {"sessionKey": PEER, "message": "hi", "timeoutSeconds": 0},
    "sessions_spawn": {"task": "do it"},
    "sessions_yield": {},
    "subagents": {"action": "steer", "target": CHILD, "message": "go on"},
    "session_status": {},
}
# Arguments that replace another one (a oneOf alternative).
REPLACES = {("sessions_spawn", "message"): "task", ("sessions_history", "sessionId"): "sessionKey"}


def string_arguments() -> list[tuple[str, str]]:
    found = []
    for tool, schema in TOOL_SCHEMAS.items():
        for prop, prop_schema in schema["properties"].items():
            if prop_schema.get("type") == "string" or all(isinstance(v, str) for v in prop_schema.get("enum", [0])):
                found.append((tool, prop))
            elif prop_schema.get("type") == "array":
                found.append((tool, prop))
    return found


def test_every_tool_has_string_arguments_to_check():
    tools = {tool for tool, _ in string_arguments()}
    assert tools == set(TOOL_SCHEMAS)
    assert ("sessions_send", "message") in string_arguments()
    assert {("sessions_spawn", p) for p in ("task", "model", "thinking", "label")} <= set(string_arguments())


@pytest.mark.parametrize(("tool", "prop"), string_arguments())
def test_a_lone_surrogate_in_any_tool_argument_is_invalid_argument(gw, tool, prop):
    args = dict(BASE_ARGS[tool])
    args.pop(REPLACES.get((tool, prop), ""), None)
    args[prop] = [BAD] if TOOL_SCHEMAS[tool]["properties"][prop].get("type") == "array" else BAD
    before = full_dump(gw)
    result = gw.call_tool(MANAGER, tool, args)
    assert result["status"] == "error", result
    assert result["error"]["code"] == "invalid_argument", result
    assert full_dump(gw) == before


def test_a_surrogate_in_a_tool_argument_name_is_invalid_argument(gw):
    before = full_dump(gw)
    result = gw.call_tool(MANAGER, "session_status", {BAD: 1})
    assert result["error"]["code"] == "invalid_argument"
    assert full_dump(gw) == before


# -- sizes and depths ------------------------------------------------------------------------

TOO_BIG: dict[str, Callable[[Gateway], Any]] = {
    "payload nested 100,000 deep": rec(payload={"a": nested(100_000)}),
    "payload one level too deep": rec(payload={"a": nested(MAX_JSON_DEPTH)}),
    "payload with a huge integer": rec(payload={"turns": 10**400}),
    "payload with an infinite float": rec(payload={"turns": float("inf")}),
    "payload with a non-JSON value": rec(payload={"a": {1, 2}}),
    "payload with a nested non-string key": rec(payload={"a": {1: 2}}),
    "payload over the byte limit": rec(payload={"a": "x" * MAX_PAYLOAD_BYTES}),
    "payload of a million items": rec(payload={"a": [0] * 1_000_000}),
    "occurred_at 10**400": rec(occurred_at=10**400),
    "occurred_at -10**400": rec(occurred_at=-(10**400)),
    "record_events with a deep payload": lambda gw: gw.record_events(
        [dict(session_key=CHILD, kind="goal_changed", actor_type="agent", summary="ok", payload={"a": nested(100_000)})]),
    "goal_changed occurred_at 10**400": lambda gw: gw.producers.goal_changed(CHILD, "updated", actor_type="agent", occurred_at=10**400),
    "tool_result nested 100,000 deep": msg(role="tool", tool_result=nested(100_000)),
    "provenance nested 100,000 deep": msg(provenance={"a": nested(100_000)}),
    "tool_calls with NaN": msg(role="assistant", tool_calls=[float("nan")]),
    "tool_result not JSON": msg(role="tool", tool_result=object()),
    "input_tokens 10**400": msg(input_tokens=10**400),
    "transcript limit 10**400": lambda gw: gw.transcripts.transcript(MANAGER, limit=10**400),
    "compacted counts 10**5000": lambda gw: gw.producers.compacted(CHILD, "op-1", messages_before=10**5000, messages_after=1),
    "goal_changed actor id 10**5000": lambda gw: gw.producers.goal_changed(CHILD, "updated", actor_type="agent", actor_id=10**5000),
    "finish_run unknown outcome": lambda gw: gw.runs.finish_run("run-1", "exploded"),
    "runs_of limit 10**400": lambda gw: gw.runs.runs_of((MANAGER, "main"), 10**400),
}


@pytest.mark.parametrize("name", sorted(TOO_BIG))
def test_unbounded_values_are_invalid_argument_and_change_nothing(gw, name):
    before = full_dump(gw)
    with pytest.raises(InvalidArgument):
        TOO_BIG[name](gw)
    assert full_dump(gw) == before


def test_payload_at_the_depth_limit_is_accepted(gw):
    sequence = gw.record_event(CHILD, "goal_changed", actor_type="agent", summary="ok",
                               payload={"a": nested(MAX_JSON_DEPTH - 1)})
    assert sequence is not None


def test_tool_arguments_nested_100000_deep_are_invalid_argument(gw):
    before = full_dump(gw)
    result = gw.call_tool(MANAGER, "sessions_list", {"kinds": nested(100_000)})
    assert result["status"] == "error" and result["error"]["code"] == "invalid_argument", result
    assert full_dump(gw) == before


def test_the_spec_states_the_limits_the_code_enforces():
    text = SPEC.read_text(encoding="utf-8")
    section = re.search(r"^## 12\. Input limits$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "spec/notice-protocol.md has no section 12. Input limits"
    body = section.group(1)
    assert f"at most {MAX_JSON_DEPTH} levels" in body
    assert f"at most {MAX_PAYLOAD_BYTES} bytes" in body
    assert "lone surrogate" in body

"""Malformed tool calls: each gives an error result and leaves the whole database unchanged."""

from __future__ import annotations

import pytest

from sessionstate.runner import Rule
from sessionstate.shared.policy import ToolPolicy

from .support import MANAGER, OTHER, PEER, error_code, full_dump, ok, open_gateway

CHILD_TASK = {"task": "long job"}

BAD = {
    # (caller, tool, args, code)
    "list: kinds not an array": (MANAGER, "sessions_list", {"kinds": "main"}, "invalid_argument"),
    "list: unknown kind": (MANAGER, "sessions_list", {"kinds": ["robot"]}, "invalid_argument"),
    "list: limit zero": (MANAGER, "sessions_list", {"limit": 0}, "invalid_argument"),
    "list: limit as string": (MANAGER, "sessions_list", {"limit": "10"}, "invalid_argument"),
    "list: unknown key": (MANAGER, "sessions_list", {"kind": ["main"]}, "invalid_argument"),
    "list: huge search": (MANAGER, "sessions_list", {"search": "x" * 100_000}, "invalid_argument"),
    "list: NaN activeMinutes": (MANAGER, "sessions_list", {"activeMinutes": float("nan")}, "invalid_argument"),
    "history: neither key nor id": (MANAGER, "sessions_history", {}, "invalid_argument"),
    "history: both key and id": (MANAGER, "sessions_history", {"sessionKey": PEER, "sessionId": "x"}, "invalid_argument"),
    "history: unknown session id": (MANAGER, "sessions_history", {"sessionId": "nope"}, "unknown_session"),
    "history: invisible target": (MANAGER, "sessions_history", {"sessionKey": OTHER}, "forbidden"),
    "history: includeTools not bool": (MANAGER, "sessions_history", {"sessionKey": PEER, "includeTools": "yes"}, "invalid_argument"),
    "send: missing message": (MANAGER, "sessions_send", {"sessionKey": PEER}, "invalid_argument"),
    "send: blank message": (MANAGER, "sessions_send", {"sessionKey": PEER, "message": "   "}, "invalid_argument"),
    "send: huge message": (MANAGER, "sessions_send", {"sessionKey": PEER, "message": "x" * 20_001}, "invalid_argument"),
    "send: thread key": (MANAGER, "sessions_send", {"sessionKey": PEER + ":thread:1712", "message": "hi"}, "invalid_argument"),
    "send: negative timeout": (MANAGER, "sessions_send", {"sessionKey": PEER, "message": "hi", "timeoutSeconds": -1}, "invalid_argument"),
    "send: to itself": (MANAGER, "sessions_send", {"sessionKey": MANAGER, "message": "hi"}, "invalid_argument"),
    "send: unknown target": (MANAGER, "sessions_send", {"sessionKey": "agent:main:ghost", "message": "hi"}, "unknown_session"),
    "send: invisible target": (MANAGER, "sessions_send", {"sessionKey": OTHER, "message": "hi", "watch": True}, "forbidden"),
    "send: key with newline": (MANAGER, "sessions_send", {"sessionKey": "agent:main:a\nb", "message": "hi"}, "invalid_argument"),
    "spawn: no task": (MANAGER, "sessions_spawn", {}, "invalid_argument"),
    "spawn: task and message": (MANAGER, "sessions_spawn", {"task": "a", "message": "b"}, "invalid_argument"),
    "spawn: unknown runtime": (MANAGER, "sessions_spawn", {"task": "a", "runtime": "docker"}, "invalid_argument"),
    "spawn: bad sandbox": (MANAGER, "sessions_spawn", {"task": "a", "sandbox": "off"}, "invalid_argument"),
    "spawn: from a leaf": ("LEAF", "sessions_spawn", {"task": "a"}, "tool_not_allowed"),
    "yield: unknown key": (MANAGER, "sessions_yield", {"wait": True}, "invalid_argument"),
    "subagents: unknown action": (MANAGER, "subagents", {"action": "pause", "target": "all"}, "invalid_argument"),
    "subagents: steer without message": (MANAGER, "subagents", {"action": "steer", "target": "CHILD"}, "invalid_argument"),
    "subagents: steer all": (MANAGER, "subagents", {"action": "steer", "target": "all", "message": "x"}, "invalid_argument"),
    "subagents: kill without target": (MANAGER, "subagents", {"action": "kill"}, "invalid_argument"),
    "subagents: kill a stranger's run": (PEER, "subagents", {"action": "kill", "target": "RUN"}, "forbidden"),
    "subagents: steer a non-child": (MANAGER, "subagents", {"action": "steer", "target": PEER, "message": "x"}, "unknown_session"),
    "status: invisible target": (MANAGER, "session_status", {"sessionKey": OTHER}, "forbidden"),
    "status: model on invisible target": (MANAGER, "session_status", {"sessionKey": OTHER, "model": "m"}, "forbidden"),
    "status: empty model": (MANAGER, "session_status", {"model": ""}, "invalid_argument"),
    "status: float changesSince": (MANAGER, "session_status", {"changesSince": 1.5}, "invalid_argument"),
    "unknown tool": (MANAGER, "sessions_delete", {}, "unknown_tool"),
    "args not an object": (MANAGER, "sessions_list", [1, 2], "invalid_argument"),
    "caller unknown": ("agent:main:ghost", "sessions_list", {}, "unknown_session"),
    "caller not a string": (None, "sessions_list", {}, "invalid_argument"),
}


@pytest.fixture(scope="module")
def world(module_db_url):
    gw, runner = open_gateway(module_db_url, policy=ToolPolicy(visibility="tree"))
    runner.add(Rule("*", "task", ["x"], delay=60))
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    gw.create_session(OTHER)
    spawned = ok(gw.call_tool(MANAGER, "sessions_spawn", CHILD_TASK))
    names = {"LEAF": spawned["childSessionKey"], "CHILD": spawned["childSessionKey"], "RUN": spawned["runId"]}
    yield gw, names
    gw.runs.stop_runs()
    gw.close()


def test_there_are_at_least_twenty_cases():
    assert len(BAD) >= 20


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_call_is_an_error_result_and_changes_nothing(world, name):
    gw, names = world
    caller, tool, args, code = BAD[name]
    caller = names.get(caller, caller)
    if isinstance(args, dict):
        args = {k: names.get(v, v) if isinstance(v, str) else v for k, v in args.items()}
    before = full_dump(gw)
    pending = {k: gw.pending_system_events(k) for k in (MANAGER, PEER)}
    assert error_code(gw.call_tool(caller, tool, args)) == code
    assert full_dump(gw) == before
    assert {k: gw.pending_system_events(k) for k in (MANAGER, PEER)} == pending


def test_tool_argument_error_is_a_session_state_error():
    from sessionstate import SessionStateError
    from sessionstate.tools.tool_errors import ToolArgumentError

    error = ToolArgumentError("limit: must be >= 1", field="limit")
    assert isinstance(error, SessionStateError) and error.field == "limit" and error.code == "invalid_argument"

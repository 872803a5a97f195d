"""Section 7 of the issue: bad input raises a typed error (or an error result from
call_tool), never an uncaught exception, and leaves the database byte-for-byte unchanged."""

from __future__ import annotations

import pytest

from sessionstate import Gateway, SessionStateError

MANAGER = "agent:main:main"
CHILD = "agent:main:subagent:child"


@pytest.fixture
def gw(db_url):
    gateway = Gateway.open(db_url)
    gateway.create_session(MANAGER)
    gateway.create_session(CHILD, kind="subagent", parent=MANAGER)
    gateway.create_session("global", agent_id="main")
    gateway.record_event(CHILD, "human_direct_message", actor_type="human", summary="hello")
    yield gateway
    gateway.close()


def rec(**overrides):
    args = dict(session_key=CHILD, kind="human_direct_message", actor_type="human", summary="ok")
    args.update(overrides)
    key, kind = args.pop("session_key"), args.pop("kind")
    # Builds a fresh call each time: the same bad call runs once per backend.
    return lambda gw: gw.record_event(key, kind, **args)


BAD_CALLS = {
    "unknown kind": rec(kind="human_message"),
    "kind not a string": rec(kind=7),
    "unknown actor type": rec(actor_type="robot"),
    "multi-line summary": rec(summary="line one\nline two"),
    "over-long summary": rec(summary="x" * 201),
    "empty summary": rec(summary="  "),
    "summary not a string": rec(summary=None),
    "unknown session": rec(session_key="agent:main:nobody"),
    "unknown unqualified session": rec(session_key="nobody"),
    "key with whitespace": rec(session_key="agent:main:a b"),
    "agent id contradicts key": rec(agent_id="other"),
    "payload not an object": rec(payload=[1, 2]),
    "payload not serialisable": rec(payload={"x": object()}),
    "run_failed with unknown outcome": rec(kind="run_failed", payload={"outcome": "exploded"}),
    "occurred_at not a number": rec(occurred_at="yesterday"),
    "occurred_at NaN": rec(occurred_at=float("nan")),
    "negative changesSince": lambda gw: gw.session_status(CHILD, changes_since=-1),
    "non-integer changesSince": lambda gw: gw.session_status(CHILD, changes_since=1.5),
    "boolean changesSince": lambda gw: gw.session_status(CHILD, changes_since=True),
    "status of unknown session": lambda gw: gw.session_status("agent:main:ghost"),
    "watcher == target": lambda gw: gw.watch(MANAGER, MANAGER),
    "non-agent-qualified watcher": lambda gw: gw.watch("global", CHILD),
    "watch unknown target": lambda gw: gw.watch(MANAGER, "agent:main:ghost"),
    "watch from unknown watcher": lambda gw: gw.watch("agent:main:ghost", CHILD),
    "unwatch itself": lambda gw: gw.unwatch(CHILD, CHILD),
    "duplicate session": lambda gw: gw.create_session(MANAGER),
    "unknown session kind": lambda gw: gw.create_session("agent:main:x", kind="robot"),
    "unknown parent": lambda gw: gw.create_session("agent:main:x", parent="agent:main:ghost"),
    "reset unknown": lambda gw: gw.ops.reset_session("agent:main:ghost"),
    "delete unknown": lambda gw: gw.ops.delete_session("agent:main:ghost"),
    "drain unknown": lambda gw: gw.drain_system_events("agent:main:ghost"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_input_raises_and_changes_nothing(gw, name):
    before = gw.store.dump()
    pending = gw.pending_system_events(MANAGER)
    with pytest.raises(SessionStateError) as error:
        BAD_CALLS[name](gw)
    assert error.value.code in {"invalid_argument", "unknown_session", "session_exists"}
    assert gw.store.dump() == before
    assert gw.pending_system_events(MANAGER) == pending


BAD_TOOL_CALLS = {
    "unknown tool": (MANAGER, "sessions_teleport", {}, "unknown_tool"),
    "tool name not a string": (MANAGER, None, {}, "unknown_tool"),
    "negative changesSince": (MANAGER, "session_status", {"sessionKey": CHILD, "changesSince": -3}, "invalid_argument"),
    "string changesSince": (MANAGER, "session_status", {"sessionKey": CHILD, "changesSince": "12"}, "invalid_argument"),
    "unknown session": (MANAGER, "session_status", {"sessionKey": "agent:main:ghost"}, "unknown_session"),
    "args not an object": (MANAGER, "session_status", ["x"], "invalid_argument"),
    "unknown caller": ("agent:main:ghost", "session_status", {}, "unknown_session"),
}


@pytest.mark.parametrize("name", sorted(BAD_TOOL_CALLS))
def test_bad_tool_calls_return_error_results(gw, name):
    caller, tool, args, code = BAD_TOOL_CALLS[name]
    before = gw.store.dump()
    result = gw.call_tool(caller, tool, args)
    assert result["status"] == "error"
    assert result["error"]["code"] == code
    assert isinstance(result["error"]["message"], str) and result["error"]["message"]
    assert gw.store.dump() == before


STATE_FIELDS = ("sessionKey", "stateVersion", "stateChanges")


def state_fields(result):
    # The tool adds the /status card beside the state answer; the state part must be the
    # Python API's, field for field (and the card must not shadow any of it).
    return {k: result[k] for k in STATE_FIELDS if k in result}


def test_call_tool_session_status_equals_the_python_api(gw):
    direct = gw.session_status(CHILD, changes_since=0)
    via_tool = gw.call_tool(MANAGER, "session_status", {"sessionKey": CHILD, "changesSince": 0})
    assert state_fields(via_tool) == direct and "card" in via_tool
    assert state_fields(gw.call_tool(MANAGER, "session_status", {"sessionKey": "current"})) == gw.session_status(MANAGER)
    assert state_fields(gw.call_tool(MANAGER, "session_status", {})) == gw.session_status(MANAGER)

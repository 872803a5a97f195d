"""Hypothesis-generated bad input at every public Gateway method and at ``call_tool``.

Every call either succeeds or raises a ``SessionStateError`` (``call_tool`` returns a result,
never raises); whenever it raised, the database dump and the queue are unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessionstate import Gateway, SessionStateError

MANAGER = "agent:main:main"
CHILD = "agent:main:subagent:child"
KEYS = [MANAGER, CHILD, "global", "agent:main:ghost", "agent::x", "agent:main:"]
INJECTION = ["'; DROP TABLE session_state_events; --", "\" OR 1=1 --", "agent:main:x'); DELETE FROM sessions;--",
             "%s%n", "${jndi:ldap://x}", "\u202e\u0000", "Robert'); DROP TABLE sessions;--"]

junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.text(min_size=500, max_size=700),
    st.text(alphabet=st.characters(categories=["Co", "Cf", "Zl", "Zp", "So", "Mn"]), max_size=20),
    st.sampled_from(INJECTION), st.binary(max_size=10), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
key = st.one_of(st.sampled_from(KEYS + INJECTION), junk)
kind = st.one_of(st.sampled_from(["human_direct_message", "goal_changed", "run_failed", "compacted", "bogus"]), junk)
actor_type = st.one_of(st.sampled_from(["human", "agent", "system"]), junk)
payload = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.one_of(junk, st.sampled_from(["error", "timeout"])), max_size=4), junk)
tool = st.one_of(st.sampled_from(["session_status", "sessions_list", "session_watch", "bogus"]), junk)
tool_args = st.one_of(
    st.none(), junk,
    st.fixed_dictionaries({}, optional={"sessionKey": key, "changesSince": junk, "unknownKey": junk}),
)

Call = Callable[[Gateway, st.DataObject], Any]


def draw(data: st.DataObject, strategy: st.SearchStrategy, label: str) -> Any:
    return data.draw(strategy, label=label)


CALLS: dict[str, Call] = {
    "create_session": lambda gw, d: gw.create_session(
        draw(d, key, "key"), agent_id=draw(d, st.one_of(st.none(), key), "agent_id"),
        kind=draw(d, st.one_of(st.just("main"), junk), "kind"), parent=draw(d, st.one_of(st.none(), key), "parent"),
        label=draw(d, st.one_of(st.none(), junk), "label"), run_id=draw(d, st.one_of(st.none(), junk), "run_id")),
    "session_exists": lambda gw, d: gw.ops.session_exists(draw(d, key, "key"), draw(d, st.one_of(st.none(), key), "agent")),
    "record_event": lambda gw, d: gw.record_event(
        draw(d, key, "key"), draw(d, kind, "kind"), actor_type=draw(d, actor_type, "actor_type"),
        summary=draw(d, st.one_of(st.sampled_from(INJECTION), junk), "summary"),
        actor_id=draw(d, st.one_of(st.none(), key), "actor_id"), agent_id=draw(d, st.one_of(st.none(), key), "agent_id"),
        run_id=draw(d, st.one_of(st.none(), junk), "run_id"), payload=draw(d, payload, "payload"),
        dedupe_key=draw(d, st.one_of(st.none(), junk), "dedupe"), occurred_at=draw(d, st.one_of(st.none(), junk), "at")),
    "watch": lambda gw, d: gw.watch(draw(d, key, "w"), draw(d, key, "t"), target_agent_id=draw(d, st.one_of(st.none(), key), "a")),
    "unwatch": lambda gw, d: gw.unwatch(draw(d, key, "w"), draw(d, key, "t"), target_agent_id=draw(d, st.one_of(st.none(), key), "a")),
    "drain_system_events": lambda gw, d: gw.drain_system_events(draw(d, key, "key")),
    "pending_system_events": lambda gw, d: gw.pending_system_events(draw(d, key, "key")),
    "enqueue_system_event": lambda gw, d: gw.ops.enqueue_system_event(draw(d, key, "key"), draw(d, junk, "text")),
    "session_status": lambda gw, d: gw.session_status(
        draw(d, key, "key"), changes_since=draw(d, st.one_of(st.none(), junk), "since"),
        agent_id=draw(d, st.one_of(st.none(), key), "agent")),
    "reset_session": lambda gw, d: gw.ops.reset_session(draw(d, key, "key"), agent_id=draw(d, st.one_of(st.none(), key), "a")),
    "delete_session": lambda gw, d: gw.ops.delete_session(draw(d, key, "key"), agent_id=draw(d, st.one_of(st.none(), key), "a")),
    "cursor_positions": lambda gw, d: gw.ops.cursor_positions(
        draw(d, key, "w"), draw(d, key, "t"), target_agent_id=draw(d, st.one_of(st.none(), key), "a")),
    "state_version": lambda gw, d: gw.ops.state_version(draw(d, key, "key"), draw(d, st.one_of(st.none(), key), "a")),
}


def make_gateway(tmp_path) -> Gateway:
    gw = Gateway.open(f"sqlite:///{tmp_path / 'state.db'}")
    gw.create_session(MANAGER)
    gw.create_session(CHILD, kind="subagent", parent=MANAGER)
    gw.create_session("global", agent_id="main")
    gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="hello")
    return gw


def snapshot(gw: Gateway) -> tuple:
    return gw.store.dump(), {k: gw.pending_system_events(k) for k in (MANAGER, CHILD, "global")}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_bad_arguments_raise_a_session_state_error_and_change_nothing(method, tmp_path):
    gw = make_gateway(tmp_path)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data())
    def call(data: st.DataObject) -> None:
        before = snapshot(gw)
        try:
            CALLS[method](gw, data)
        except SessionStateError:
            assert snapshot(gw) == before

    try:
        call()
    finally:
        gw.close()


def test_call_tool_never_raises_and_errors_change_nothing(tmp_path):
    gw = make_gateway(tmp_path)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(caller=key, name=tool, args=tool_args)
    def call(caller: Any, name: Any, args: Any) -> None:
        before = snapshot(gw)
        result = gw.call_tool(caller, name, args)
        assert isinstance(result, dict)
        if result.get("status") == "error":
            assert result["error"]["code"] != "internal_error", result
            assert snapshot(gw) == before

    try:
        call()
    finally:
        gw.close()

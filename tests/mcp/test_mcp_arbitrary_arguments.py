"""Arbitrary JSON arguments to every tool through the SDK's client: never a crash, never a
silent change. A refused call is an error result equal to ``call_tool``'s and leaves the
database as it was; the server answers the next request either way."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from mcp import Client

from sessionstate.clients.mcp import SessionToolServer
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

from ..tools.support import MANAGER, PEER, full_dump
from .support import deterministic_gateway, structured, with_client

KNOWN_CODES = {"invalid_argument", "unknown_session", "forbidden", "tool_not_allowed", "not_running"}

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from([MANAGER, PEER, "current", "all", "list", "kill", "steer", "subagent", "fork", "require"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def arguments_for(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    names = sorted(TOOL_SCHEMAS[tool].get("properties", {}))
    keys = st.one_of(st.sampled_from(names), st.text(max_size=12)) if names else st.text(max_size=12)
    return st.dictionaries(keys, json_values, max_size=5)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('mcp-fuzz') / 'state.db'}"
    gw = deterministic_gateway(url, ToolPolicy(visibility="tree"))
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    yield gw, SessionToolServer(gw, MANAGER)
    gw.runs.stop_runs()
    gw.close()


@pytest.mark.parametrize("tool", list(TOOL_SCHEMAS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_arguments_never_crash_and_refusals_change_nothing(served, tool, data):
    gw, server = served
    args = data.draw(arguments_for(tool), label="arguments")
    gw.runs.wait_for_runs()  # what an earlier accepted call started must not race the dump
    before = full_dump(gw)

    async def body(client: Client) -> tuple[dict[str, Any], bool]:
        result = structured(await client.call_tool(tool, args))
        return result, (await client.call_tool("session_status", {})).is_error  # still serving

    result, status_failed = with_client(server, body)
    note(f"result: {result!r}"[:500])
    event(f"refused: {result['error']['code']}" if result.get("status") == "error" else "accepted")
    assert not status_failed
    if result.get("status") == "error":
        assert result["error"]["code"] in KNOWN_CODES, result  # never internal_error
        assert full_dump(gw) == before
        assert result == gw.call_tool(MANAGER, tool, args)

"""The seven session tools through the SDK's own in-memory client."""

from __future__ import annotations

import math

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequest, CallToolRequestParams, CallToolResult

from sessionstate.clients.mcp import SessionToolServer
from sessionstate.services.notice.announce import created_line
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

from ..tools.support import MANAGER, NOT_OBJECTS, OTHER, PEER, full_dump, malformed_sets
from .support import deterministic_gateway, structured, with_client

CHILD_TASK = "index the repository"


def populate(gw):
    gw.create_session(MANAGER, channel="telegram", model="model-a")
    gw.create_session(PEER, label="peer desk")
    gw.create_session(OTHER)
    gw.transcripts.human_message(MANAGER, "Plan the release", channel="telegram", sender="u1")
    gw.transcripts.human_message(PEER, "peer notes", channel="telegram", sender="u2")


@pytest.fixture
def gw(db_url):
    gateway = deterministic_gateway(db_url, ToolPolicy(visibility="tree"))
    populate(gateway)
    yield gateway
    gateway.runs.stop_runs()
    gateway.close()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_list_tools_gives_the_published_schemas_unchanged(gw, mode):
    listing = with_client(SessionToolServer(gw, MANAGER), lambda c: c.list_tools(), mode=mode)
    assert [tool.name for tool in listing.tools] == list(TOOL_SCHEMAS)
    for tool in listing.tools:
        assert tool.input_schema == TOOL_SCHEMAS[tool.name], tool.name
        assert tool.description == TOOL_SCHEMAS[tool.name]["description"]


def test_list_tools_follows_the_profile_and_the_spawn_depth(tmp_path):
    gw = deterministic_gateway(f"sqlite:///{tmp_path / 'p.db'}", ToolPolicy(profile="messaging"))
    populate(gw)
    names = lambda key: [t.name for t in with_client(SessionToolServer(gw, key), lambda c: c.list_tools()).tools]
    assert names(MANAGER) == ["sessions_list", "sessions_history", "sessions_send", "session_status"]
    gw.configure_tools(ToolPolicy())
    child = gw.call_tool(MANAGER, "sessions_spawn", {"task": CHILD_TASK})["childSessionKey"]
    gw.runs.wait_for_runs()
    assert names(child) == ["session_status"]  # a leaf at depth 1 of max 1

    async def refused(client: Client) -> CallToolResult:
        return await client.call_tool("sessions_spawn", {"task": "grandchild"})

    before = full_dump(gw)
    result = structured(with_client(SessionToolServer(gw, child), refused))
    assert result == gw.call_tool(child, "sessions_spawn", {"task": "grandchild"})
    assert result["error"]["code"] == "tool_not_allowed"
    assert full_dump(gw) == before
    gw.close()


# "<child>" stands for the key sessions_spawn returned.
HAPPY_CALLS = [
    ("sessions_list", {}),
    ("sessions_history", {"sessionKey": MANAGER, "limit": 5}),
    ("sessions_spawn", {"task": CHILD_TASK, "label": "indexer"}),
    ("sessions_send", {"sessionKey": "<child>", "message": "use the staging db", "timeoutSeconds": 5}),
    ("subagents", {"action": "list"}),
    ("sessions_yield", {"message": "waiting for the indexer"}),
    ("session_status", {"sessionKey": "<child>", "changesSince": 0}),
]


def session_ids(gw) -> list[str]:
    return [row[2] for row in full_dump(gw)["session_meta"]]  # (key, agent id, session id, ...)


def scrub(value, ids):
    """``value`` with the random session ids (the one thing twins cannot share) masked."""
    if isinstance(value, dict):
        return {k: scrub(v, ids) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, ids) for v in value]
    if isinstance(value, str):
        for sid in ids:
            value = value.replace(sid, "<session id>")
    return value


def test_one_happy_call_per_tool_equals_call_tool_on_a_twin(tmp_path):
    """The same calls on two identical gateways: through MCP on one, call_tool on the other.

    Clocks and run ids are fixed, so the results are equal but for the random session ids.
    """
    served = deterministic_gateway(f"sqlite:///{tmp_path / 'served.db'}")
    twin = deterministic_gateway(f"sqlite:///{tmp_path / 'twin.db'}")
    for gw in (served, twin):
        populate(gw)
    server = SessionToolServer(served, MANAGER)
    assert {tool for tool, _ in HAPPY_CALLS} == set(TOOL_SCHEMAS)
    child = None
    for tool, template in HAPPY_CALLS:
        args = {k: child if v == "<child>" else v for k, v in template.items()}
        result = structured(with_client(server, lambda c: c.call_tool(tool, args)))
        expected = twin.call_tool(MANAGER, tool, args)
        for gw in (served, twin):
            gw.runs.wait_for_runs()  # children and replies run in the background: settle both
        assert result.get("status") != "error", (tool, result)
        assert scrub(result, session_ids(served)) == scrub(expected, session_ids(twin)), tool
        child = result.get("childSessionKey", child)
    assert scrub(full_dump(served), session_ids(served)) == scrub(full_dump(twin), session_ids(twin))
    for gw in (served, twin):
        gw.close()


@pytest.mark.parametrize("tool", list(TOOL_SCHEMAS))
def test_malformed_arguments_are_error_results_and_change_nothing(gw, tool):
    server = SessionToolServer(gw, MANAGER)
    sets = [args for args in malformed_sets(tool) if isinstance(args, dict)]
    before = full_dump(gw)
    queued = gw.pending_system_events(MANAGER)
    assert queued == [created_line(PEER, "main", "peer desk")]  # R27's announcement, nothing else

    async def calls(client: Client) -> list[CallToolResult]:
        return [await client.call_tool(tool, args) for args in sets]

    for args, result in zip(sets, with_client(server, calls)):
        answer = structured(result)
        assert result.is_error and answer["error"]["code"] == "invalid_argument", (repr(args)[:200], answer)
        assert answer == gw.call_tool(MANAGER, tool, on_the_wire(args))
    assert full_dump(gw) == before
    assert gw.pending_system_events(MANAGER) == queued


def on_the_wire(value):
    """``value`` as the SDK's JSON dump carries it: JSON has no NaN or infinity, they go as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: on_the_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [on_the_wire(v) for v in value]
    return value


# model_construct on purpose: pydantic warns while it serialises the ill-typed arguments.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_arguments_that_are_no_object_are_refused_and_the_server_keeps_serving(gw):
    server = SessionToolServer(gw, MANAGER)
    before = full_dump(gw)

    async def body(client: Client) -> None:
        for bad in NOT_OBJECTS:
            # Bypass the client's own model checks: the server must survive what a foreign
            # client could put on the wire.
            request = CallToolRequest.model_construct(
                method="tools/call",
                params=CallToolRequestParams.model_construct(name="session_status", arguments=bad),
            )
            with pytest.raises(MCPError) as refused:
                await client.session.send_request(request, CallToolResult)
            assert refused.value.error.code == INVALID_PARAMS
        assert structured(await client.call_tool("session_status", {}))["sessionKey"] == MANAGER

    for mode in ("auto", "legacy"):
        with_client(server, body, mode=mode)
    assert full_dump(gw) == before


def test_an_unknown_tool_is_an_error_result(gw):
    result = with_client(SessionToolServer(gw, MANAGER), lambda c: c.call_tool("sessions_delete", {}))
    assert result.is_error and structured(result)["error"]["code"] == "unknown_tool"


VISIBILITY_REFUSALS = [
    ("sessions_history", {"sessionKey": PEER}),  # not in the caller's tree
    ("session_status", {"sessionKey": OTHER}),  # another agent
    ("sessions_send", {"sessionKey": PEER, "message": "hello", "timeoutSeconds": 0}),
    ("sessions_history", {"sessionKey": OTHER}),
]


def test_visibility_refusals_match_call_tool_and_change_nothing(gw):
    server = SessionToolServer(gw, MANAGER)
    before = full_dump(gw)
    for tool, args in VISIBILITY_REFUSALS:
        result = structured(with_client(server, lambda c: c.call_tool(tool, args)))
        assert result["error"]["code"] == "forbidden", (tool, args, result)
        assert result == gw.call_tool(MANAGER, tool, args)
    listed = structured(with_client(server, lambda c: c.call_tool("sessions_list", {})))
    assert [row["key"] for row in listed["sessions"]] == [MANAGER]  # invisible ones left out
    assert full_dump(gw) == before


def test_a_sandboxed_caller_is_clamped_to_its_tree(tmp_path):
    gw = deterministic_gateway(f"sqlite:///{tmp_path / 's.db'}", ToolPolicy(visibility="agent"))
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    gw.create_session("agent:main:boxed", sandboxed=True)
    history = lambda key: structured(
        with_client(SessionToolServer(gw, key), lambda c: c.call_tool("sessions_history", {"sessionKey": PEER}))
    )
    assert history(MANAGER).get("status") != "error"
    assert history("agent:main:boxed")["error"]["code"] == "forbidden"
    gw.close()


def test_an_unknown_caller_is_refused_before_serving(gw):
    from sessionstate import UnknownSession

    with pytest.raises(UnknownSession):
        SessionToolServer(gw, "agent:main:ghost")

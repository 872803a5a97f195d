"""The MCP items a newcomer trips over, through the SDK's clients: one correct message per bad
argument, an answered (empty) resources/templates/list, tool titles and annotations, ``--session``
read as the tools read keys, Ctrl-C ending the server at once, and what each protocol version
really carries (``ttlMs``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import anyio
import pytest
from mcp import Client, StdioServerParameters

from sessionstate import Gateway
from sessionstate.clients.mcp import SessionToolServer
from sessionstate.shared.policy import ToolPolicy
from sessionstate.tools.schemas import TOOL_SCHEMAS

from ..tools.support import MANAGER, PEER
from .support import deterministic_gateway, structured, with_client

WAIT_SECONDS = 60  # a bound for a hung server, never a timing assertion
READ_ONLY = {"sessions_list", "sessions_history"}


@pytest.fixture
def server(tmp_path):
    gw = deterministic_gateway(f"sqlite:///{tmp_path / 'state.db'}", ToolPolicy(visibility="tree"))
    gw.create_session(MANAGER)
    gw.create_session(PEER)
    yield SessionToolServer(gw, MANAGER)
    gw.runs.stop_runs()
    gw.close()


def call(server: SessionToolServer, tool: str, args: dict) -> dict:
    return structured(with_client(server, lambda c: c.call_tool(tool, args)))


@pytest.mark.parametrize(("tool", "args", "message"), [
    ("session_status", {"sessionKey": 123}, "session_status: sessionKey: expected a string, got integer"),
    ("session_status", {"sessionKey": None}, "session_status: sessionKey: expected a string, got null"),
    ("session_status", {"sessionKey": "a\u0001b"}, "session_status: sessionKey: must not contain control characters"),
    ("sessions_send", {"sessionKey": 7, "message": ["x"]},
     "sessions_send: message: expected a string, got array; sessionKey: expected a string, got integer"),
    ("sessions_history", {"sessionKey": 1.5}, "sessions_history: sessionKey: expected a string, got number"),
])
def test_each_bad_argument_gets_one_true_message(server, tool, args, message):
    result = call(server, tool, args)
    assert result["error"] == {"code": "invalid_argument", "message": message}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_resource_templates_list_is_answered_and_empty(server, mode):
    listing = with_client(server, lambda c: c.list_resource_templates(), mode=mode)
    assert listing.resource_templates == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_tools_have_titles_and_honest_annotations(server, mode):
    tools = with_client(server, lambda c: c.list_tools(), mode=mode).tools
    assert [t.name for t in tools] == list(TOOL_SCHEMAS)
    for tool in tools:
        assert tool.title and tool.title != tool.name and tool.annotations is not None
        assert tool.annotations.title == tool.title
        assert tool.annotations.read_only_hint is (tool.name in READ_ONLY), tool.name
        assert tool.annotations.destructive_hint is (tool.name == "subagents"), tool.name
        assert tool.annotations.open_world_hint is False


def test_a_tool_marked_read_only_changes_nothing(server):
    gw = server.gateway
    before = gw.store.dump()
    for name in READ_ONLY:
        assert call(server, name, {"sessionKey": MANAGER} if name == "sessions_history" else {}).get("status") != "error"
    assert gw.store.dump() == before


def _database(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as gw:
        gw.create_session(MANAGER)
    return url


def _stdio(url: str, session: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "sessionstate.clients.cli", "mcp", "--db", url, "--session", session])


def test_session_main_is_read_as_the_tools_read_it(tmp_path):
    url = _database(tmp_path)

    async def main() -> dict:
        with anyio.fail_after(WAIT_SECONDS):
            async with Client(_stdio(url, "main")) as client:
                return (await client.call_tool("session_status", {})).structured_content  # type: ignore[return-value]

    assert anyio.run(main)["sessionKey"] == MANAGER


def test_an_unknown_bare_session_names_both_readings(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sessionstate.clients.cli", "mcp", "--db", _database(tmp_path),
                           "--session", "ghost"], capture_output=True, text=True, timeout=WAIT_SECONDS,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "sessionstate: unknown_session: unknown session 'ghost' (nor 'agent:main:ghost')"


def test_ctrl_c_ends_the_server_at_once_with_130_and_no_traceback(tmp_path):
    url = _database(tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "sessionstate.clients.cli", "mcp", "--db", url, "--session", MANAGER],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "probe", "version": "0"}}}
        process.stdin.write(json.dumps(initialize) + "\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        assert json.loads(process.stdout.readline())["id"] == 1  # type: ignore[union-attr]  # serving
        process.send_signal(signal.SIGINT)
        # stdin stays open: the old server waited here for its next line, for ever.
        status = process.wait(timeout=WAIT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read()  # type: ignore[union-attr]
    assert status == 130 and "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


def _raw_exchange(url: str, requests: list[dict]) -> dict[int, dict]:
    """JSON-RPC lines to ``sessionstate mcp`` over stdio, the replies by id, as on the wire."""
    process = subprocess.Popen([sys.executable, "-m", "sessionstate.clients.cli", "mcp", "--db", url, "--session", MANAGER],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wanted = {r["id"] for r in requests if "id" in r}
    replies: dict[int, dict] = {}
    try:
        process.stdin.write("".join(json.dumps(r) + "\n" for r in requests))  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        while not wanted <= replies.keys():
            line = process.stdout.readline()  # type: ignore[union-attr]
            assert line, "the server ended before answering"
            reply = json.loads(line)
            replies[reply["id"]] = reply
    finally:
        process.stdin.close()  # type: ignore[union-attr]
        process.wait(timeout=WAIT_SECONDS)
    return replies


CACHEABLE = [("tools/list", {}), ("resources/list", {}),
             ("resources/read", {"uri": f"sessionstate://sessions/{MANAGER}/notices"})]


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25"])
def test_handshake_era_results_carry_no_ttl_ms(tmp_path, version):
    """What docs/mcp.md says: the SDK drops ttlMs and cacheScope from handshake-era results."""
    handshake = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
                  "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "p", "version": "0"}}},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    requests = [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(CACHEABLE, 1)]
    replies = _raw_exchange(_database(tmp_path), handshake + requests)
    assert replies[0]["result"]["protocolVersion"] == version
    for i in range(1, len(CACHEABLE) + 1):
        assert "ttlMs" not in replies[i]["result"] and "cacheScope" not in replies[i]["result"], replies[i]


def test_2026_07_28_results_carry_ttl_ms_0_and_private_scope(tmp_path):
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "p", "version": "0"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}
    requests = [{"jsonrpc": "2.0", "id": i, "method": m, "params": {**p, **meta}}
                for i, (m, p) in enumerate(CACHEABLE, 1)]
    replies = _raw_exchange(_database(tmp_path), requests)
    for i in range(1, len(CACHEABLE) + 1):
        assert replies[i]["result"]["ttlMs"] == 0 and replies[i]["result"]["cacheScope"] == "private", replies[i]

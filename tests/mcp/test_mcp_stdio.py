"""End to end over stdio: `sessionstate mcp` as a subprocess, the SDK's stdio client and session.

A second gateway in this test process plays the process that records: the server learns of
its notice through the durable cursor (spec R18), announces it, and delivers it byte for byte.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import ResourceUpdatedNotification

from sessionstate import Gateway
from sessionstate.clients.mcp import notices_uri

MANAGER = "agent:main:main"
CHILD = "agent:main:subagent:worker"
WAIT_SECONDS = 60  # a bound for a hung server, never a timing assertion


def test_stdio_subscribe_update_read_and_reconcile(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    recorder = Gateway.open(url)
    recorder.registry.create_session(MANAGER)
    recorder.create_session(CHILD, kind="subagent", parent=MANAGER)  # MANAGER watches CHILD
    since = recorder.ops.cursor_positions(MANAGER, CHILD).last_seen
    uri = notices_uri(MANAGER)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sessionstate.clients.cli", "mcp", "--db", url, "--session", MANAGER, "--poll-interval", "0.05"],
    )
    updates: list[str] = []
    updated = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(message.params.uri)
            updated.set()

    async def main() -> tuple[str, dict, dict]:
        with anyio.fail_after(WAIT_SECONDS):
            async with stdio_client(server) as (read, write):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    await session.initialize()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", MCPDeprecationWarning)  # handshake-era subscribe
                        await session.subscribe_resource(uri)
                    recorder.transcripts.human_message(CHILD, "stop: use the staging database", channel="telegram", sender="u1")
                    await updated.wait()
                    read_result = await session.read_resource(uri)
                    status = await session.call_tool("session_status", {"sessionKey": CHILD, "changesSince": since})
                    assert not status.is_error, status
                    tools = await session.list_tools()
                    return read_result.contents[0].text, status.structured_content, {t.name: t for t in tools.tools}  # type: ignore[union-attr,return-value]

    text, status, tools = anyio.run(main)
    assert updates == [uri]
    # Byte for byte the line the recording process queued for the manager's next turn.
    (expected,) = recorder.pending_system_events(MANAGER)
    assert text.encode("utf-8") == expected.encode("utf-8")
    assert f'changesSince {since}.' in text
    # The read acknowledged it durably, as a turn does: the recorder's copy is now stale (R17).
    positions = recorder.ops.cursor_positions(MANAGER, CHILD)
    assert positions.last_seen == positions.notified == positions.material
    assert recorder.drain_system_events(MANAGER) == []
    changes = status["stateChanges"]
    assert [e["kind"] for e in changes["events"]] == ["human_direct_message"]
    assert changes["events"][0]["summary"].startswith("human message via telegram")
    assert status["stateVersion"] == changes["events"][-1]["sequence"] and not changes["historyGap"]
    assert status["stateChanges"] == recorder.session_status(CHILD, changes_since=since)["stateChanges"]
    assert set(tools) == {"sessions_list", "sessions_history", "sessions_send", "sessions_spawn",
                          "sessions_yield", "subagents", "session_status"}
    recorder.close()


def test_garbage_on_stdin_never_stops_the_server(tmp_path):
    """Below any client: lines that are no JSON-RPC message are dropped; what follows is served."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with Gateway.open(url) as gw:
        gw.create_session(MANAGER)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "{not json", "[]", "\u0000",
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "x"},
        {"jsonrpc": "2.0", "id": 3, "method": "no/such/method"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "session_status", "arguments": {"sessionKey": 7}}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "session_status", "arguments": [1]}},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "session_status"}},
    ]
    payload = "".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages).encode()
    command = [sys.executable, "-m", "sessionstate.clients.cli", "mcp", "--db", url, "--session", MANAGER]

    async def main() -> tuple[dict[int, dict], int | None]:
        replies: dict[int, dict] = {}
        with anyio.fail_after(WAIT_SECONDS):
            async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
                assert process.stdin is not None and process.stdout is not None
                await process.stdin.send(payload)
                buffer = b""
                while not {3, 4, 5, 6} <= replies.keys():
                    buffer += await process.stdout.receive()
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        reply = json.loads(line)
                        replies[reply["id"]] = reply
                await process.stdin.aclose()  # the client goes away: the server ends cleanly
                return replies, await process.wait()

    replies, returncode = anyio.run(main)
    assert returncode == 0
    assert replies[1]["result"]["serverInfo"]["name"] == "sessionstate"
    assert replies[3]["error"]["code"] == -32601  # method not found, answered
    assert replies[4]["result"]["isError"] is True
    assert replies[4]["result"]["structuredContent"]["error"]["code"] == "invalid_argument"
    assert replies[5]["error"]["code"] == -32602  # arguments that are no object: invalid params
    assert replies[6]["result"]["structuredContent"]["sessionKey"] == MANAGER
    assert 2 not in replies  # a message that is no JSON-RPC request is dropped, unanswered

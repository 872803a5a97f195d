"""The notices resource: read drains like a turn; subscribers hear of every queued notice."""

from __future__ import annotations

import warnings

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import INVALID_PARAMS, ResourceUpdatedNotification

from sessionstate import Gateway, notice_text
from sessionstate.clients.mcp import SessionToolServer, notices_uri, session_of_notices_uri

from ..tools.support import MANAGER, PEER
from .support import with_client

CHILD = "agent:main:subagent:worker"
WAIT_SECONDS = 20  # a generous bound for a poll of a few milliseconds; never a timing assertion


def open_pair(url: str) -> Gateway:
    gw = Gateway.open(url)
    gw.create_session(MANAGER)
    gw.create_session(CHILD, kind="subagent", parent=MANAGER)  # the spawn edge: MANAGER watches CHILD
    return gw


def spawn_seed(gw: Gateway) -> int:
    """Where the spawn edge seeded MANAGER's cursor: CHILD's child_spawned, after both sessions'
    own `created` (R27), so 3 and not 1."""
    return gw.ops.state_version(CHILD)


def human_steps_in(gw: Gateway) -> None:
    gw.record_event(CHILD, "human_direct_message", actor_type="human", summary="human message via telegram")


@pytest.fixture
def gw(db_url):
    gateway = open_pair(db_url)
    yield gateway
    gateway.close()


def read_text(server: SessionToolServer, *, mode: str = "auto") -> str:
    result = with_client(server, lambda c: c.read_resource(server.notices_uri), mode=mode)
    (contents,) = result.contents
    assert contents.uri == server.notices_uri and contents.mime_type == "text/plain"
    return contents.text  # type: ignore[union-attr]


def test_the_uri_round_trips_every_key():
    for key in [MANAGER, "global", "agent:main:a/b c%2F", "agent:ü:ß"]:
        assert session_of_notices_uri(notices_uri(key)) == key
    assert notices_uri(MANAGER) == "sessionstate://sessions/agent:main:main/notices"
    for uri in ["sessionstate://sessions//notices", "sessionstate://sessions/a/b/notices",
                "sessionstate://sessions/%ff/notices", "file:///etc/passwd", "sessionstate://sessions/agent%3Amain%3Amain/notices"]:
        assert session_of_notices_uri(uri) is None, uri


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_reading_drains_and_acknowledges_exactly_like_a_turn(db_url, tmp_path, mode):
    served = open_pair(db_url)
    twin = open_pair(f"sqlite:///{tmp_path / 'twin.db'}")
    for gw in (served, twin):
        human_steps_in(gw)
        gw.ops.enqueue_system_event(MANAGER, "[Sub-agent result] worker (run r1) completed: done")
        human_steps_in(gw)
    expected = twin.drain_system_events(MANAGER)  # the turn, on the twin
    assert len(expected) == 2
    server = SessionToolServer(served, MANAGER)
    assert read_text(server, mode=mode) == "\n".join(expected)
    assert served.ops.cursor_positions(MANAGER, CHILD) == twin.ops.cursor_positions(MANAGER, CHILD)
    # The second change arrived while the first notice was pending: one follow-up (R8).
    (follow_up,) = twin.drain_system_events(MANAGER)
    assert read_text(server, mode=mode) == follow_up
    assert read_text(server, mode=mode) == "" == "\n".join(twin.drain_system_events(MANAGER))
    human_steps_in(served)
    human_steps_in(twin)
    assert read_text(server, mode=mode) == "\n".join(twin.drain_system_events(MANAGER))
    assert served.ops.cursor_positions(MANAGER, CHILD) == twin.ops.cursor_positions(MANAGER, CHILD)
    for gw in (served, twin):
        gw.close()


def test_the_resource_is_listed_and_other_uris_are_refused(gw):
    server = SessionToolServer(gw, MANAGER)
    listing = with_client(server, lambda c: c.list_resources())
    assert [(r.uri, r.mime_type) for r in listing.resources] == [(notices_uri(MANAGER), "text/plain")]
    human_steps_in(gw)

    async def body(client: Client) -> None:
        for uri in [notices_uri(CHILD), notices_uri(PEER), "sessionstate://sessions/agent:main:main/other"]:
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert refused.value.error.code == INVALID_PARAMS

    with_client(server, body)
    assert len(gw.pending_system_events(MANAGER)) == 1  # a refused read drains nothing


def test_a_handshake_era_subscriber_gets_resources_updated(gw):
    server = SessionToolServer(gw, MANAGER, poll_interval=0.01)
    updates: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(message.params.uri)
            arrived.set()

    async def main() -> str:
        async with Client(server.server, mode="legacy", message_handler=on_message) as client:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # resources/subscribe is handshake-era
                await client.subscribe_resource(server.notices_uri)
            human_steps_in(gw)
            with anyio.fail_after(WAIT_SECONDS):
                await arrived.wait()
            result = await client.read_resource(server.notices_uri)
            return result.contents[0].text  # type: ignore[union-attr]

    seed = spawn_seed(gw)
    text = anyio.run(main)
    assert updates[0] == server.notices_uri
    assert text == notice_text(CHILD, seed)


def test_a_subscriber_refused_for_another_uri(gw):
    server = SessionToolServer(gw, MANAGER)

    async def body(client: Client) -> None:
        with warnings.catch_warnings(), pytest.raises(MCPError) as refused:
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.subscribe_resource(notices_uri(CHILD))
        assert refused.value.error.code == INVALID_PARAMS

    with_client(server, body, mode="legacy")


def test_a_listen_stream_gets_resource_updated_and_follow_ups(gw):
    """2026-07-28 clients listen; a follow-up notice queued by a drain is news too."""
    server = SessionToolServer(gw, MANAGER, poll_interval=0.01)

    async def body(client: Client) -> list[str]:
        texts = []
        async with client.listen(resource_subscriptions=[server.notices_uri]) as events:
            human_steps_in(gw)
            with anyio.fail_after(WAIT_SECONDS):
                async for event in events:
                    assert event.uri == server.notices_uri  # type: ignore[union-attr]
                    read = await client.read_resource(server.notices_uri)
                    texts.append(read.contents[0].text)  # type: ignore[union-attr]
                    if len(texts) == 1:
                        # More changes while the first notice was pending: the drain queues
                        # a follow-up, which the stream announces like any other notice.
                        human_steps_in(gw)
                    if len(texts) == 2:
                        break
        return texts

    seed = spawn_seed(gw)
    first, follow_up = with_client(server, body)
    assert first == notice_text(CHILD, seed)
    assert follow_up.startswith(f'Session "{CHILD}" changed')

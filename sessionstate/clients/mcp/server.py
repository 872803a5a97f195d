"""The MCP server of one calling session: its session tools and its notices resource.

Built on the SDK's low-level ``Server`` so the published schemas go out untouched. Every
request runs the gateway's public API through ``sessionstate.facade.aio.AsyncGateway`` (one per
connection): store work on its worker thread, ``call_tool`` in anyio's thread pool
(``sessions_send`` may wait up to its ``timeoutSeconds`` for a reply; the event loop must keep
serving meanwhile):

* ``tools/list``: the tools the session's profile allows now (``allowed_tools``);
* ``tools/call``: ``Gateway.call_tool``, its dict as structured content and as JSON text,
  ``isError`` for an error result;
* ``resources/read`` of ``sessionstate://sessions/<key>/notices``: the next turn's system
  lines, drained and acknowledged by ``Gateway.drain_system_events`` exactly as a turn does;
* ``resources/subscribe`` (handshake-era clients) and ``subscriptions/listen`` (2026-07-28
  clients): a ``resources/updated`` whenever a notice is queued for the session.

Notices recorded by another process reach this one only through the durable cursors: while a
client is subscribed, a poll queues the session's owed notices every ``poll_interval`` seconds
(``Gateway.ops.queue_owed_notices``, spec R18: a read, unlike a sweep it writes nothing) and
announces new ones; a read does the same first. ``docs/mcp.md`` says what that costs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from ...facade.aio import AsyncGateway
from ...errors import InvalidArgument, SessionStateError
from .results import tool_listing, tool_result
from .uris import notices_uri

if TYPE_CHECKING:
    from ...facade.gateway import Gateway

log = logging.getLogger("sessionstate.clients.mcp")

SERVER_NAME: Final = "sessionstate"
DEFAULT_POLL_INTERVAL: Final = 0.2
NOTICES_MIME_TYPE: Final = "text/plain"


def _package_version() -> str:
    try:
        return version("sessionstate")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0"


@dataclass
class ConnectionWatch:
    """Per connection (the server's lifespan runs once per connection): who wants updates."""

    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)
    listen: ListenHandler = field(init=False)
    open_listens: int = 0
    # The handshake era's resources/subscribe: any request's session reaches the connection's
    # standalone channel, which outlives that request.
    subscriber: ServerSession | None = None
    # The pending notice texts already announced; a text not in here is news.
    announced: frozenset[str] = frozenset()
    # The server's gateway for this connection's loop (set by the lifespan).
    aio: AsyncGateway | None = None

    def __post_init__(self) -> None:
        self.listen = ListenHandler(self.bus)

    @property
    def watching(self) -> bool:
        return self.subscriber is not None or self.open_listens > 0


Context = ServerRequestContext[ConnectionWatch, Any]


class SessionToolServer:
    """The low-level MCP ``Server`` (``.server``) serving ``session_key`` on ``gateway``."""

    def __init__(self, gateway: "Gateway", session_key: str, *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or not 0 < poll_interval <= 60:
            raise InvalidArgument("poll_interval must be a number of seconds in (0, 60]")
        self.gateway = gateway
        self.session_key = session_key
        self.poll_interval = float(poll_interval)
        self.allowed_tools()  # refuses an unknown or malformed caller before anything is served
        self.notices_uri = notices_uri(session_key)
        self.server: Server[ConnectionWatch] = Server(
            SERVER_NAME,
            version=_package_version(),
            instructions=(
                f"Session tools for {session_key}. Read {self.notices_uri} at the start of each "
                "turn (or subscribe to it): it holds the stale notices and announcements queued "
                "for this session, and reading acknowledges them."
            ),
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )

    # -- the gateway, called in worker threads ----------------------------------------------

    def allowed_tools(self) -> list[str]:
        return self.gateway.allowed_tools(self.session_key)

    def _owed_and_pending(self) -> list[str]:
        self.gateway.ops.queue_owed_notices(self.session_key)
        return self.gateway.pending_system_events(self.session_key)

    def _owed_and_drained(self) -> list[str]:
        self.gateway.ops.queue_owed_notices(self.session_key)
        return self.gateway.drain_system_events(self.session_key)

    # -- connection lifespan and the notice poll ---------------------------------------------

    @asynccontextmanager
    async def _lifespan(self, _server: Server[ConnectionWatch]) -> AsyncIterator[ConnectionWatch]:
        watch = ConnectionWatch(aio=AsyncGateway(self.gateway, owns_gateway=False))
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._poll, watch)
                try:
                    yield watch
                finally:
                    watch.listen.close()
                    tasks.cancel_scope.cancel()
        finally:
            await _aio(watch).close()  # its worker only: the gateway is the caller's

    async def _poll(self, watch: ConnectionWatch) -> None:
        while True:
            await anyio.sleep(self.poll_interval)
            if watch.watching:
                try:
                    await self.check_notices(watch)
                except Exception:  # the poll outlives any one failure (a locked database, say)
                    log.exception("checking the notices of %r failed", self.session_key)

    async def check_notices(self, watch: ConnectionWatch) -> bool:
        """Queue owed notices; announce when a text is queued that was not before."""
        pending = await _aio(watch).run(self._owed_and_pending)
        fresh = set(pending) - watch.announced
        watch.announced = frozenset(pending)
        if not fresh:
            return False
        if watch.subscriber is not None:
            try:
                await watch.subscriber.send_resource_updated(self.notices_uri)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                watch.subscriber = None  # the client went away
        await watch.bus.publish(ResourceUpdated(uri=self.notices_uri))
        return True

    # -- handlers ----------------------------------------------------------------------------

    async def _list_tools(self, ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            names = await _aio(ctx.lifespan_context).run(self.allowed_tools)
        except SessionStateError as exc:
            raise MCPError(types.INVALID_PARAMS, f"{exc.code}: {exc.message}") from exc
        # The list depends on the profile and the session's spawn depth: never cache it.
        return types.ListToolsResult(tools=tool_listing(names), ttl_ms=0, cache_scope="private")

    async def _call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = await _aio(ctx.lifespan_context).call_tool(self.session_key, params.name, params.arguments)
        return tool_result(result)

    async def _list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        notices = types.Resource(
            uri=self.notices_uri,
            name="notices",
            title=f"Notices for {self.session_key}",
            description=(
                "The system lines queued for this session's next turn, one per line; "
                "reading acknowledges them."
            ),
            mime_type=NOTICES_MIME_TYPE,
        )
        return types.ListResourcesResult(resources=[notices], ttl_ms=0, cache_scope="private")

    async def _list_resource_templates(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        # None: the one resource has a fixed URI. Answered, because declaring `resources`
        # promises the method (clients and inspectors call it right after resources/list).
        return types.ListResourceTemplatesResult(resource_templates=[], ttl_ms=0, cache_scope="private")

    async def _read_resource(self, ctx: Context, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        self._require_notices_uri(params.uri)
        try:
            lines = await _aio(ctx.lifespan_context).run(self._owed_and_drained)
        except SessionStateError as exc:
            raise MCPError(types.INVALID_PARAMS, f"{exc.code}: {exc.message}") from exc
        contents = types.TextResourceContents(uri=self.notices_uri, mime_type=NOTICES_MIME_TYPE, text="\n".join(lines))
        # Every read drains: a client must never be served a cached copy.
        return types.ReadResourceResult(contents=[contents], ttl_ms=0, cache_scope="private")

    async def _subscribe(self, ctx: Context, params: types.SubscribeRequestParams) -> types.EmptyResult:
        self._require_notices_uri(params.uri)
        ctx.lifespan_context.subscriber = ctx.session
        ctx.lifespan_context.announced = frozenset()  # what is pending already is news to it
        return types.EmptyResult()

    async def _unsubscribe(self, ctx: Context, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self._require_notices_uri(params.uri)
        ctx.lifespan_context.subscriber = None
        return types.EmptyResult()

    async def _listen(
        self, ctx: Context, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        watch = ctx.lifespan_context
        watch.open_listens += 1
        if self.notices_uri in (params.notifications.resource_subscriptions or ()):
            watch.announced = frozenset()
        try:
            return await watch.listen(ctx, params)
        finally:
            watch.open_listens -= 1

    def _require_notices_uri(self, uri: str) -> None:
        if uri != self.notices_uri:
            raise MCPError(
                types.INVALID_PARAMS,
                f"unknown resource {uri!r}: this server serves {self.notices_uri} only",
            )

    # -- transports --------------------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until it disconnects."""
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())


def _aio(watch: ConnectionWatch) -> AsyncGateway:
    assert watch.aio is not None  # set for the connection's whole lifespan
    return watch.aio


def serve_stdio(gateway: "Gateway", session_key: str, *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
    """Run the server for ``session_key`` over stdio (blocks until the client disconnects)."""
    server = SessionToolServer(gateway, session_key, poll_interval=poll_interval)
    anyio.run(server.run_stdio)

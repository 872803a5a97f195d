"""``sessions_history``: one visible session's transcript, sanitised and bounded."""

from __future__ import annotations

from typing import Any

from .context import ToolContext
from .rows import history_row
from .sanitize import build_history_view


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    with gw.locked():
        if "sessionId" in args:
            target = ctx.require_visible(gw.resolve_session_id(args["sessionId"]))
        else:
            target = ctx.resolve_visible(args["sessionKey"])
        records = gw.transcripts.recent(target, args["limit"])
        session_id = gw.registry.meta_of(target).session_id
    view = build_history_view([history_row(r) for r in records], include_tools=args["includeTools"])
    return {"sessionKey": target[0], "agentId": target[1], "sessionId": session_id, **view}

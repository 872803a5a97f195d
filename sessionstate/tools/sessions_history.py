"""``sessions_history``: one visible session's transcript, sanitised and bounded, paged back
from the newest message (``limit``, ``offset``; ``nextOffset`` while older ones remain)."""

from __future__ import annotations

from typing import Any

from .context import ToolContext
from .rows import history_row
from .sanitize import build_history_view


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    with gw.locked():
        if "sessionId" in args:
            target = ctx.require_visible(gw.registry.resolve_session_id(args["sessionId"]))
        else:
            target = ctx.resolve_visible(args["sessionKey"])
        limit, offset = args["limit"], args["offset"]
        # One row beyond the page says whether older messages remain.
        records = gw.transcripts.recent(target, limit + 1, offset)
        session_id = gw.registry.meta_of(target).session_id
    older_remain = len(records) > limit
    records = records[1:] if older_remain else records  # the extra one is the oldest
    view = build_history_view([history_row(r) for r in records], include_tools=args["includeTools"])
    result = {"sessionKey": target[0], "agentId": target[1], "sessionId": session_id, **view}
    # Rows the byte bound dropped are the page's oldest: the next page starts with them.
    if older_remain or view["droppedMessages"]:
        result["nextOffset"] = offset + len(records) - view["droppedMessages"]
    return result

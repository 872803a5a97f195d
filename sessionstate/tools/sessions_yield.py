"""``sessions_yield``: end the caller's turn on purpose, so that the next sub-agent result
(an announce in its system-event queue) becomes its next message, instead of polling.

The gateway marks the session as yielded; the next announce for it wakes it (even a
sub-agent, which stale notices never wake) and clears the mark.
"""

from __future__ import annotations

from typing import Any

from .context import ToolContext


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    with gw.locked():
        active = gw.runs.active_by_requester(ctx.caller)
        queued = len(gw.ops.pending_system_events(ctx.key))
        if active:
            gw.registry.update_meta(ctx.caller, yielded_at=gw.clock())
    result: dict[str, Any] = {
        "status": "yielded",
        "activeRuns": [r.run_id for r in active],
        "queuedResults": queued,
        "nextMessageReady": queued > 0,
    }
    if args.get("message"):
        result["message"] = args["message"]
    return result

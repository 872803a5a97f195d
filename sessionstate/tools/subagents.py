"""``subagents``: the control plane for the caller's own children: list, steer, kill.

Only runs the caller requested, and only children it can see (visibility applies here too).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument, UnknownSession
from ..shared.keys import check_key
from ..store import RunRecord
from .context import ToolContext
from .tool_errors import Forbidden, RunNotActive
from .rows import run_json

LIST_LIMIT = 50


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    with gw.locked():
        action = args["action"]
        if action == "list":
            return _list(ctx)
        if action == "kill" and args["target"] == "all":
            runs = [r for r in gw.runs.active_by_requester(ctx.caller) if ctx.visible((r.child_key, r.child_agent_id))]
        else:
            runs = [_find(ctx, args["target"])]
            if runs[0].status != "running":
                raise RunNotActive(f"run {runs[0].run_id} already ended ({runs[0].outcome or runs[0].status})")
        if action == "steer":
            gw.runs.steer_run(runs[0].run_id, args["message"], sender=ctx.key)
            return {"status": "ok", "action": "steer", "runId": runs[0].run_id,
                    "childSessionKey": runs[0].child_key}
        killed = [r.run_id for r in runs if gw.runs.kill_run(r.run_id, actor_id=ctx.key)]
        return {"status": "ok", "action": "kill", "killed": killed}


def _list(ctx: ToolContext) -> dict[str, Any]:
    gw = ctx.gw
    now = gw.clock()
    runs = [r for r in gw.runs.runs_of(ctx.caller, LIST_LIMIT) if ctx.visible((r.child_key, r.child_agent_id))]
    return {
        "status": "ok",
        "action": "list",
        "active": [run_json(r, now) for r in runs if r.status == "running"],
        "recent": [run_json(r, now) for r in runs if r.status != "running"],
    }


def _find(ctx: ToolContext, target: str) -> RunRecord:
    """A run id, or a child session key (its newest run), of this caller's children."""
    gw = ctx.gw
    try:
        run = gw.runs.get_run(target)
    except InvalidArgument:  # not a run id; perhaps a child session key
        run = None
    if run is None:
        check_key(target, "target")
        child = ctx.resolve(target)
        runs = [r for r in gw.runs.runs_of_child(child) if (r.requester_key, r.requester_agent_id) == ctx.caller]
        if not runs:
            raise UnknownSession(f"{target!r} is not a sub-agent of {ctx.key!r}")
        run = runs[0]
    if (run.requester_key, run.requester_agent_id) != ctx.caller:
        raise Forbidden(f"run {run.run_id} was not spawned by {ctx.key!r}")
    ctx.require_visible((run.child_key, run.child_agent_id))
    return run

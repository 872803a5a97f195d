"""``sessions_spawn``: an isolated child session for background work; never blocks.

In one transaction: the child session (``create_session`` with ``parent`` = the caller: the
spawn edge records ``child_spawned`` and seeds the caller's cursor), its metadata (depth,
sandbox, model), the run row and the task as the child's first message (after the caller's
transcript when ``context: "fork"``). The run then starts in the background and the call
returns ``runId`` and ``childSessionKey``.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..shared.fencing import fence_untrusted
from ..store import RUNNING, MetaRecord, RunRecord
from .context import ToolContext
from .tool_errors import ToolNotAllowed

FORK_MESSAGES = 50


def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    gw = ctx.gw
    depth = ctx.meta.spawn_depth + 1
    if depth > ctx.policy.max_spawn_depth:
        raise ToolNotAllowed(f"sessions_spawn: spawn depth {depth} exceeds maxSpawnDepth {ctx.policy.max_spawn_depth}")
    runtime = args["runtime"]
    context = args.get("context") or ("fork" if args["thread"] and runtime == "subagent" else "isolated")
    sandboxed = True if args["sandbox"] == "require" else ctx.meta.sandboxed
    token = gw.new_id()
    run_id = f"run-{token}"
    child = (f"agent:{ctx.caller[1]}:{'acp' if runtime == 'acp' else 'subagent'}:{token}", ctx.caller[1])
    session_id = uuid.uuid4().hex
    # The child's first message and prompt: its requester's words, fenced like all foreign text.
    prompt = fence_untrusted(args["task"], f"Task from {ctx.key} via sessions_spawn; isUser=false")
    with gw.locked():
        now = gw.clock()
        route = (ctx.meta.last_channel, ctx.meta.last_to)
        record = RunRecord(
            run_id, ctx.caller[0], ctx.caller[1], child[0], child[1], runtime, args["task"],
            args.get("label"), args.get("model"), args.get("thinking"), args["thread"], context,
            args.get("timeoutSeconds") or None, RUNNING, None, None, route[0], route[1], 0, now, None,
        )
        with gw.transaction():
            gw.ops.create_session(child[0], kind="acp" if runtime == "acp" else "subagent",
                              parent=ctx.caller[0], label=args.get("label"), run_id=run_id)
            gw.registry.insert_meta(MetaRecord(
                child[0], child[1], session_id, channel=ctx.meta.channel, model=args.get("model"),
                thinking=args.get("thinking"), runtime=runtime, sandboxed=sandboxed, spawn_depth=depth,
                last_activity_at=now,
            ))
            gw.runs.insert(record)
            if context == "fork":
                for message in gw.transcripts.recent(ctx.caller, FORK_MESSAGES):
                    gw.transcripts.append_message(
                        child[0], message.role, message.text, agent_id=child[1], actor_type=message.actor_type,
                        actor_id=message.actor_id, tool_calls=message.tool_calls, tool_result=message.tool_result,
                        provenance={"kind": "fork", "sourceSessionKey": ctx.key, "sourceMessageId": message.id},
                    )
            gw.transcripts.append_message(
                child[0], "user", prompt, agent_id=child[1], actor_type="agent", actor_id=ctx.key,
                provenance={"kind": "spawn_task", "sourceSessionKey": ctx.key, "runId": run_id, "isUser": False},
            )
        gw.runs.start_run(record, prompt)
    result: dict[str, Any] = {
        "status": "accepted",
        "runId": run_id,
        "childSessionKey": child[0],
        "sessionId": session_id,
        "runtime": runtime,
        "context": context,
        "sandboxed": sandboxed,
        "spawnDepth": depth,
    }
    for name in ("label", "model", "thinking"):
        if name in args:
            result[name] = args[name]
    if args["thread"]:
        result["thread"] = True
    return result
